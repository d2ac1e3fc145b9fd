"""What the JVM and Python sides both need agrees: the conf table, how values parse, the eviction
score (the JVM is the source of each). A refused start is recognized by the JVM exception's class
(test_session_start.py)."""
import pytest

from memphis import jar_facts
from memphis.tiers import config
from memphis.tiers.core import Entry
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


def test_the_host_tiers_score_is_the_jvms(spark):
    entry = Entry(key="k", item=None, opcode="op", state=State.CACHED, owner=0, cost_s=0.25, size=1000,
                  hits=2, misses=1)
    assert entry.score == pytest.approx(spark._jvm.io.memphis.cache.EvictionPolicy.valuePerByte(250, 3, 1000))



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
