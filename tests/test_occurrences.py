"""An occurrence counts once per executed query: explain and a look at a plan count nothing."""
import memphis
from conftest import entry_states, memphis_off, per_key, sales


def settled(spark):
    """The entries once Spark's listeners have seen every execution end (memphis.stats waits for them)."""
    memphis.stats(spark)
    return entry_states(spark)


def test_explain_counts_nothing_and_the_explained_dataframe_counts_once_when_it_runs(fresh, tmp_path):
    spark = fresh
    path = sales(spark, str(tmp_path / "sales"))
    key = memphis.lineage_key(per_key(spark, path))
    misses = memphis.stats(spark)["misses"]  # the session's counters count since it started
    df = per_key(spark, path)
    df.explain()
    per_key(spark, path)._jdf.queryExecution().optimizedPlan()
    per_key(spark, path)._jdf.queryExecution().executedPlan()
    assert key not in settled(spark), "only planned: not seen"
    assert memphis.stats(spark)["misses"] == misses

    answer = sorted(df.collect())
    entry = settled(spark)[key]
    assert (entry["occurrences"], entry["state"]) == (1, "seen"), "the explained plan ran: its first occurrence"
    assert sorted(df.collect()) == answer and settled(spark)[key]["occurrences"] == 1, "one DataFrame plans once"

    assert sorted(per_key(spark, path).collect()) == answer
    entry = settled(spark)[key]
    assert entry["occurrences"] == 2 and entry["state"] in ("to-persist", "materialized"), "persisted on the 2nd run"
    assert memphis_off(spark, lambda: sorted(per_key(spark, path).collect())) == answer
