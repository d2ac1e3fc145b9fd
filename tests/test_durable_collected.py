"""Collected results in the durable tier: the rows a query collected serve the same question in a new
process without a job, never after a source changed, never from a damaged file.

Each process is a fresh interpreter and JVM (test_durable_spark's APP), so the test is marked slow."""
import glob
import json
import os
import shutil
import stat

import pytest

from conftest import run_python
from test_durable_spark import APP, asking, assert_answers_right, confs, write_sales

# The first row file's middle overwritten, its size and modification time kept, its checksum file gone:
# only memphis's own SHA-256 in the manifest can tell.
CORRUPT_ROWS = """
import glob
for f in glob.glob(os.path.join(entry, '*', 'data-*', 'rows.bin')):
    seen = os.stat(f)
    with open(f, 'r+b') as out:
        out.seek(seen.st_size // 2)
        out.write(bytes(8))
    os.utime(f, ns=(seen.st_atime_ns, seen.st_mtime_ns))
    crc = os.path.join(os.path.dirname(f), '.rows.bin.crc')
    if os.path.exists(crc):
        os.remove(crc)
"""


def rows_manifests(durable):
    return sorted(glob.glob(os.path.join(str(durable), "*", "collected", "*", "manifest.json")))


@pytest.mark.slow
def test_collected_rows_serve_a_new_process_without_a_job_until_a_source_changes(tmp_path):
    sales, durable = write_sales(tmp_path / "sales"), tmp_path / "durable"

    def run(steps):
        kept = confs(durable, **{"spark.memphis.collected.maxBytes": "16m"})
        return run_python(APP, json.dumps({"confs": kept, "durable": str(durable), "steps": steps}))

    first = run([asking(sales)])
    assert_answers_right(first)
    written = rows_manifests(durable)
    assert len(written) == 3, "each question's rows, collected once, are written"
    assert first["steps"][0]["moved"]["durable_writes"] >= 3
    rows_files = glob.glob(os.path.join(str(durable), "*", "collected", "*", "data-*", "rows.bin"))
    assert len(rows_files) == 3 and all(stat.S_IMODE(os.stat(f).st_mode) == 0o600 for f in rows_files)
    with open(written[0]) as f:
        manifest = json.load(f)
    assert manifest["format"].startswith("memphis-durable-rows-v1 spark-") and len(manifest["files"][0]["sha256"]) == 64

    # A new process: each question is answered from the rows, no job runs.
    second = run([asking(sales)])
    assert_answers_right(second)
    step = second["steps"][0]
    assert step["moved"]["durable_hits"] == 3
    assert all(r["jobs"] == 0 and r["collected_in_plan"] and not r["scans_source"] for r in step["runs"])
    assert sum("/collected/" in e["path"] for e in second["entries"]) == 3

    # A file copied into the Parquet folder: new answers, the rows' entries invalidated, new rows written.
    shutil.copy(os.path.join(sales, "part-0.parquet"), os.path.join(sales, "part-1.parquet"))
    third = run([asking(sales)])
    assert_answers_right(third)
    assert third["plain"][0] != first["plain"][0]
    step = third["steps"][0]
    assert step["moved"]["durable_invalidated"] >= 3 and all(r["jobs"] > 0 for r in step["runs"])
    assert len(rows_manifests(durable)) == 3

    # Rows damaged in place (same size and time): refused and removed, each question computed, answers right.
    collected_folder = os.path.dirname(os.path.dirname(rows_manifests(durable)[0]))
    fourth = run([asking(sales, CORRUPT_ROWS, entry=collected_folder)])
    assert_answers_right(fourth)
    step = fourth["steps"][0]
    assert step["moved"]["durable_refused"] >= 3 and all(r["jobs"] > 0 for r in step["runs"])
    assert fourth["steps"][0]["answers"] == third["steps"][0]["answers"]


# One process: memphis.collect of an aggregate (its job counted), the driver's durable writes waited
# for, then the answer with memphis off.
COLLECT_APP = r"""
import json, sys
import memphis, memphis.local
from pyspark.sql import functions as F

args = json.loads(sys.argv[1])
spark = memphis.session("local[2]", app_name="memphis-durable-collect", **args["confs"])
memphis.local.configure(durable_dir=args["durable"], min_cost_s=0.0)
sc = spark.sparkContext
df = spark.read.parquet(args["source"]).groupBy("k").agg(F.sum("v").alias("total"), F.count("*").alias("n"))
sc.setJobGroup("collect", "collect")
table = memphis.collect(df)
jobs = len(sc.statusTracker().getJobIdsForGroup("collect"))
memphis.local.tier().durable.flush()
spark.conf.set("spark.memphis.enabled", "false")
print(json.dumps({"rows": sorted(map(list, table.to_pandas().itertuples(index=False))),
                  "plain": sorted(map(list, df.collect())), "jobs": jobs, **memphis.local.stats()}))
"""


@pytest.mark.slow
def test_a_collected_table_serves_a_new_process_without_a_job_until_a_source_changes(tmp_path):
    sales, durable = write_sales(tmp_path / "sales"), tmp_path / "durable"

    def run():
        args = {"confs": confs(durable), "durable": str(durable), "source": sales}
        out = run_python(COLLECT_APP, json.dumps(args))
        assert out["rows"] == out["plain"]
        return out

    first = run()
    assert first["jobs"] > 0 and first["durable_writes"] == 1
    second = run()  # a restarted notebook: the table is read from the driver's durable tier
    assert second["jobs"] == 0 and second["durable_hits"] == 1 and second["rows"] == first["rows"]
    shutil.copy(os.path.join(sales, "part-0.parquet"), os.path.join(sales, "part-1.parquet"))
    third = run()  # another key: collected from Spark
    assert third["jobs"] > 0 and third["durable_hits"] == 0 and third["rows"] != first["rows"]
