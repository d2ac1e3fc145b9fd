"""Starting Spark with memphis: bad settings, other extensions, wrong environments."""
import os
import subprocess
import sys
import zipfile

import pyspark
import pytest
from pyspark.sql import SparkSession

import memphis
from memphis import jar_facts
from memphis.spark import jvm
from conftest import TEST_CONFS, run_python


@pytest.mark.parametrize("options, key, value, allowed", [
    ({"enabled": "maybe"}, "spark.memphis.enabled", "maybe", "a boolean (true or false)"),
    ({"storage_fraction": 1.5}, "spark.memphis.storage.fraction", "1.5", "greater than 0 and at most 1"),
    ({"storage_fraction": "lots"}, "spark.memphis.storage.fraction", "lots", "greater than 0 and at most 1"),
    ({"storage_maxBytes": "12 apples"}, "spark.memphis.storage.maxBytes", "12 apples", "a byte size"),
    ({"loop_speculative": "sometimes"}, "spark.memphis.loop.speculative", "sometimes", "a boolean (true or false)"),
    ({"enable": "true"}, "spark.memphis.enable", "true", "known keys: spark.memphis.enabled"),
    ({"checkpoint_dir": "/dev/null/checkpoints"}, "spark.memphis.checkpoint.dir", "/dev/null/checkpoints",
     "cannot be made or written"),
])
def test_bad_setting_fails_at_session_start(no_spark, options, key, value, allowed):
    with pytest.raises(memphis.MemphisConfigError) as info:
        memphis.session("local[1]", **TEST_CONFS, **options)
    message = str(info.value)
    assert f"{key}={value}" in message and allowed in message
    assert SparkSession.getActiveSession() is None


def test_a_corrected_retry_starts(no_spark):
    with pytest.raises(memphis.MemphisConfigError):
        memphis.session("local[1]", **TEST_CONFS, enabled="yes")
    spark = memphis.session("local[1]", **TEST_CONFS, enabled=False)
    assert spark.conf.get("spark.memphis.enabled") == "false"
    assert memphis.stats(spark)["hits"] == 0


def test_configure_spark_appends_to_existing_extensions_and_jars(no_spark, tmp_path, monkeypatch):
    (tmp_path / "spark-defaults.conf").write_text(
        "# a comment\nspark.sql.extensions  com.example.FromDefaults\nspark.jars=/opt/defaults.jar\n")
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path))
    builder = (SparkSession.builder.config("spark.sql.extensions", "com.example.OnBuilder")
               .config("spark.jars", "/opt/other.jar"))
    memphis.configure_spark(builder, storage_fraction=0.5, enabled=True)
    memphis.configure_spark(builder)  # twice: nothing doubles
    options = builder._options
    assert options["spark.sql.extensions"] == f"com.example.OnBuilder,{memphis.EXTENSION_CLASS}"
    assert options["spark.jars"] == f"/opt/other.jar,{memphis.jar_path()}"
    assert options["spark.memphis.storage.fraction"] == "0.5"
    assert options["spark.memphis.enabled"] == "true"

    fresh = memphis.configure_spark(SparkSession.Builder())
    assert fresh._options["spark.sql.extensions"] == f"com.example.FromDefaults,{memphis.EXTENSION_CLASS}"
    assert fresh._options["spark.jars"] == f"/opt/defaults.jar,{memphis.jar_path()}"


OTHER_EXTENSION_APP = """
import json, sys
from pyspark.sql import SparkSession
import memphis
builder = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
           .config("spark.sql.extensions", "io.memphis.OtherTestExtension")
           .config("spark.driver.extraClassPath", sys.argv[1]))
spark = memphis.configure_spark(builder).getOrCreate()
print(json.dumps({
    "extensions": spark.sparkContext.getConf().get("spark.sql.extensions"),
    "other": spark.sql("SELECT other_extension_fn()").head()[0],
    "stats_rows": sorted(r["name"] for r in spark.sql("SELECT * FROM memphis_stats()").collect()),
    "stats_keys": sorted(k for k in memphis.stats(spark) if (not k.startswith("local_") or k == "local_disk_budget_bytes")
                         and k not in ("bytes_held_host", "bytes_held_disk", "bytes_held_gpu", "bytes_held_broadcast",
                                       "bytes_held_durable", "host_budget_bytes", "disk_budget_bytes",
                                       "durable_budget_bytes")),
}))
"""


def test_other_extensions_stay_active():
    # OtherTestExtension is compiled with the ScalaTest sources; it adds other_extension_fn() = 42.
    # A fresh process, because a driver class path is fixed when the JVM starts.
    test_classes = os.path.join(os.path.dirname(__file__), "..", "jvm", "target", "test-classes")
    seen = run_python(OTHER_EXTENSION_APP, os.path.abspath(test_classes))
    assert seen["extensions"] == f"io.memphis.OtherTestExtension,{memphis.EXTENSION_CLASS}"
    assert seen["other"] == 42
    assert seen["stats_rows"] == seen["stats_keys"] and "hits" in seen["stats_rows"]


REFUSAL_APP = """
import json
from pyspark.sql import SparkSession
import memphis
plain = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
if "{stop}" == "stop":
    plain.stop()
try:
    memphis.configure_spark(SparkSession.builder)
    print(json.dumps("no error"))
except memphis.MemphisSetupError as e:
    print(json.dumps(str(e)))
"""


@pytest.mark.parametrize("stop", ["keep", "stop"])
def test_configure_spark_refuses_a_jvm_started_without_memphis(stop):
    # A fresh process each: a JVM started without the jar cannot load it, even after spark.stop().
    seen = run_python(REFUSAL_APP.replace("{stop}", stop))
    assert "started without the memphis jar" in seen and "restart the Python process" in seen


@pytest.mark.parametrize("version", ["4.4.0", "3.4.1"])
def test_a_spark_without_a_jar_is_one_clear_message(monkeypatch, version):
    import pyspark

    monkeypatch.setattr(pyspark, "__version__", version)
    line = version.rsplit(".", 1)[0]
    with pytest.raises(memphis.MemphisSetupError,
                       match=rf"no jar for Spark {line} with Scala 2\.13 \(pyspark {version} is installed\); "
                             r"this installation has jars for Spark .*4\.2 \(Scala 2\.13\)"):
        memphis.configure_spark(SparkSession.Builder())
    jvm.check_spark_version("4.2.0")


def test_the_jar_for_each_spark_line(monkeypatch, tmp_path):
    for name in ("memphis-spark-3.5_2.12-0.1.0.jar", "memphis-spark-3.5_2.13-0.1.0.jar",
                 "memphis-spark-4.0_2.13-0.1.0.jar", "memphis-spark-4.1_2.13-0.1.0.jar",
                 "memphis-spark-4.2_2.13-0.1.0.jar", "memphis-spark-4.3_2.13-0.1.0.jar", "unrelated.jar"):
        (tmp_path / name).write_bytes(b"")
    monkeypatch.setattr(jvm, "JAR_DIR", str(tmp_path))
    assert jvm.jar_path("4.3.0", "2.13") == str(tmp_path / "memphis-spark-4.3_2.13-0.1.0.jar")
    assert jvm.jar_path("4.1.3", "2.13") == str(tmp_path / "memphis-spark-4.1_2.13-0.1.0.jar")
    assert jvm.jar_path("4.0.0", "2.13") == str(tmp_path / "memphis-spark-4.0_2.13-0.1.0.jar")
    assert jvm.jar_path("3.5.2", "2.12") == str(tmp_path / "memphis-spark-3.5_2.12-0.1.0.jar")
    assert jvm.jar_path("3.5.2", "2.13") == str(tmp_path / "memphis-spark-3.5_2.13-0.1.0.jar")
    with pytest.raises(memphis.MemphisSetupError,
                       match=r"no jar for Spark 4\.1 with Scala 2\.12 .* jars for Spark 3\.5 \(Scala 2\.12\), "
                             r"3\.5 \(Scala 2\.13\), 4\.0 \(Scala 2\.13\), 4\.1 \(Scala 2\.13\), 4\.2 \(Scala 2\.13\), "
                             r"4\.3 \(Scala 2\.13\)$"):
        jvm.jar_path("4.1.3", "2.12")
    # The Scala version is the one of the library jar the running Spark ships.
    assert jvm.spark_scala_version() == "2.13"


def test_each_line_names_the_java_it_needs(monkeypatch, tmp_path):
    # The jar says the Java it is compiled for (the build writes it from the line's Maven profile).
    assert jvm.min_java("4.2") == 17
    for line, java in (("3.5", 8), ("4.0", 17)):
        with zipfile.ZipFile(tmp_path / f"memphis-spark-{line}_2.13-0.1.0.jar", "w") as jar:
            jar.writestr(jar_facts.BUILD_PROPERTIES, f"spark.line={line}\njava.release={java}\n")
    monkeypatch.setattr(jvm, "JAR_DIR", str(tmp_path))
    assert [jvm.min_java(line) for line in ("3.5", "4.0")] == [8, 17]
    with pytest.raises(memphis.MemphisSetupError, match="no jar for Spark 4.1"):
        jvm.min_java("4.1")


def test_missing_java_is_one_clear_message(monkeypatch):
    monkeypatch.setenv("JAVA_HOME", "/nonexistent/jdk")
    with pytest.raises(memphis.MemphisSetupError, match="JAVA_HOME=/nonexistent/jdk has no bin/java"):
        jvm.check_java()


def test_cli_without_java_prints_one_line(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    env["PATH"] = str(tmp_path)  # no java here
    result = subprocess.run([sys.executable, "-m", "memphis.cli", "stats"], capture_output=True, text=True,
                            env=env, timeout=120)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"memphis: Spark {jvm.spark_line(pyspark.__version__)} needs Java "), result.stderr


def test_configure_spark_refuses_a_running_context_without_the_extension(no_spark):
    memphis.session("local[1]", **TEST_CONFS).stop()  # the JVM has the jar ...
    builder = SparkSession.builder.master("local[1]").config("spark.sql.extensions", "")
    for key, value in TEST_CONFS.items():
        builder.config(key, value)
    builder.getOrCreate()  # ... but this context runs without the extension
    with pytest.raises(memphis.MemphisSetupError, match="running without the memphis extension"):
        memphis.configure_spark(SparkSession.builder)
