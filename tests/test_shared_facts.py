"""What the JVM and Python sides both need agrees: the conf table, how values parse, the eviction
score (the JVM is the source of each), the durable tier's layout and the entries' columns (the
jar's durable-layout.json and entry-columns.json, which both read). A refused start is recognized by
the JVM exception's class (test_session_start.py)."""
import os

import pytest

import memphis
from memphis import jar_facts
from memphis.tiers import config, durable
from memphis.tiers.core import Entry, value_per_byte
from memphis.tiers.host import State


def jvm_conf(spark):
    return spark._jvm.io.memphis.conf.MemphisConf


def test_the_jars_conf_table_is_what_the_jvm_declares(spark):
    declared = jvm_conf(spark).All()
    jvm = {}
    for i in range(declared.size()):
        e = declared.apply(i)
        jvm[e.key()] = {"key": e.key(), "default": e.default(), "allowed": e.allowed(), "doc": e.doc(),
                        "static": e.static()}
    assert jar_facts.conf_table() == jvm
    # Every key the driver tiers read is declared there, with the default they use.
    for key in (config.HOST_MAX_BYTES, config.DISK_DIR, config.DISK_MAX_BYTES, config.GPU_MEMORY_FRACTION,
                config.BROADCAST_MAX_BYTES, config.DURABLE_DIR, config.DURABLE_MAX_BYTES):
        assert config.default(key) == jvm[key]["default"]


def python_value(parse, text):
    try:
        return parse(text)
    except ValueError:
        return None


@pytest.mark.parametrize("text", ["0", "6000", "2k", "4G", "3mb", " 10 g ", "8191p", "8192p", "9223372036854775807",
                                  "9223372036854775808", "-1", "12 apples", "1.5g", "", "1e3", "g"])
def test_byte_sizes_parse_as_on_the_jvm(spark, text):
    parsed = jvm_conf(spark).parseBytes(text)
    assert python_value(config.parse_bytes, text) == (parsed.get() if parsed.isDefined() else None)


@pytest.mark.parametrize("text", ["0.9", "1", " 0.5 ", "1e-3", "0", "1.5", "-0.2", "NaN", "inf", "half", ""])
def test_fractions_are_allowed_as_on_the_jvm(spark, text):
    jvm_allows = jvm_conf(spark).problem(config.GPU_MEMORY_FRACTION, text).isEmpty()
    assert (python_value(config.fraction, text) is not None) == jvm_allows


@pytest.mark.parametrize("cost_ms, uses, size", [(250, 3, 1000), (250, 0, 1000), (7, 0, 0), (0, 5, 10), (1, 2, 3)])
def test_the_eviction_score_is_the_jvms(spark, cost_ms, uses, size):
    assert value_per_byte(cost_ms, uses, size) == pytest.approx(
        spark._jvm.io.memphis.cache.EvictionPolicy.valuePerByte(cost_ms, uses, size))


def test_the_host_tiers_score_is_the_jvms(spark):
    entry = Entry(key="k", item=None, opcode="op", state=State.CACHED, owner=0, cost_s=0.25, size=1000,
                  hits=2, misses=1)
    assert entry.score == pytest.approx(spark._jvm.io.memphis.cache.EvictionPolicy.valuePerByte(250, 3, 1000))


def jvm_layout(spark):
    return spark._jvm.io.memphis.durable.DurableLayout


@pytest.mark.parametrize("user", ["alice", "a.b_c-D9", "shared", "Shared", "..", ".hidden", "-x", "a/b", "dom\\user",
                                  "jos\u00e9", "\u7528\u6237", "x" * 64, "x" * 65, "a b", ""])
def test_user_folders_are_named_as_on_the_jvm(spark, user):
    for shared in (False, True):
        assert durable.user_folder(user, shared) == jvm_layout(spark).userFolder(user, shared)


def test_the_driver_tier_uses_the_user_and_folders_of_the_jvm(spark, tmp_path):
    assert durable.user_name() == spark._jvm.org.apache.spark.util.Utils.getCurrentUserName()
    for shared in (False, True):
        folder = durable.DurableTier(root=str(tmp_path), max_bytes=1, shared=shared).folder
        spark_folder = jvm_layout(spark).sparkFolder(str(tmp_path), durable.user_name(), shared).toString()
        assert os.path.dirname(folder) == os.path.dirname(spark_folder)


@pytest.mark.parametrize("cache_home", ["/var/cache/someone", "/var/cache/someone/", "relative/cache", "", None])
def test_the_default_durable_root_is_the_jvms(spark, cache_home):
    environ = {} if cache_home is None else {"XDG_CACHE_HOME": cache_home}
    home = "/home/someone"
    assert durable.default_root(environ, home) == jvm_layout(spark).defaultRoot(cache_home, home)
    assert config.durable_root("auto") == durable.default_root() == jvm_layout(spark).defaultRoot()


def test_the_entries_columns_are_the_jars(spark, local_tier):
    cache = jar_facts.entry_columns("memphis_cache")
    local = jar_facts.entry_columns("local")
    assert spark.sql("SELECT * FROM memphis_cache()").columns == cache
    assert list(memphis.local.entries().columns) == local
    columns = list(memphis.entries(spark).columns)
    assert set(columns) == set(cache) | set(local) and [c for c in columns if c.startswith("age")] == ["age_s"]



def test_the_conf_table_comes_from_the_newest_jar(tmp_path, monkeypatch):
    import json
    import os
    import zipfile

    for name, default, age in (("memphis-spark-3.5_2.12-0.1.0.jar", "old", 3600), ("memphis-spark-4.2_2.13-0.1.0.jar", "new", 0)):
        with zipfile.ZipFile(tmp_path / name, "w") as z:
            z.writestr(jar_facts.CONF_TABLE, json.dumps([{"key": "spark.memphis.x", "default": default}]))
        os.utime(tmp_path / name, (os.path.getmtime(tmp_path / name) - age,) * 2)
    (tmp_path / "memphis-spark-9.9_2.13-0.1.0.jar").write_bytes(b"not a jar")  # newest, unreadable: skipped
    monkeypatch.setattr(jar_facts, "JAR_DIR", str(tmp_path))
    assert jar_facts.default("spark.memphis.x") == "new"
