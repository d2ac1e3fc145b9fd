"""Delta tables written by another process: the key of a latest read follows, a pinned read stays,
and so does its entry."""
import glob
import json
import os
import subprocess
import sys

import pyspark
import pytest

from memphis.spark.jvm import spark_line

pytestmark = [
    pytest.mark.slow,  # minutes: `make test-fast` leaves it out
    pytest.mark.skipif(spark_line(pyspark.__version__) == "4.3",
                       reason="no delta-spark release is built for Spark 4.3 yet (delta-spark_4.3_2.13 is not published)"),
]

HERE = os.path.dirname(os.path.abspath(__file__))
DELTA_JARS = sorted(glob.glob(os.path.join(HERE, "..", "jvm", "target", "delta-jars", "*.jar")))

DELTA_CONFS = """
from pyspark.sql import SparkSession
builder = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
           .config("spark.jars", JARS)
           .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
           .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog"))
"""

WRITER = DELTA_CONFS + """
import sys
spark = builder.getOrCreate()  # a plain Delta job: no memphis
spark.range(int(sys.argv[2]), int(sys.argv[3])).write.format("delta").mode(sys.argv[4]).save(sys.argv[1])
"""

READER = DELTA_CONFS + """
import json, subprocess, sys
import memphis
# Persisted entries, not rows kept on the driver, answer the repeated collects below.
spark = memphis.configure_spark(builder, collected_maxBytes="0").getOrCreate()
path, writer = sys.argv[1], sys.argv[2]
spark.range(100).write.format("delta").save(path)
latest = spark.read.format("delta").load(path).where("id > 10")
pinned = spark.read.format("delta").option("versionAsOf", 0).load(path).where("id > 10")
seen = {"latest": memphis.lineage_key(latest), "pinned": memphis.lineage_key(pinned)}
subprocess.run([sys.executable, "-c", writer, path, "100", "130", "append"], check=True, capture_output=True)
seen["latest_after"] = memphis.lineage_key(latest)  # the same DataFrame, built before the append
seen["pinned_after"] = memphis.lineage_key(spark.read.format("delta").option("versionAsOf", 0).load(path).where("id > 10"))
seen["counts"] = [latest.count(), pinned.count()]
seen["explain"] = memphis.explain_key(latest)

# Reuse: an aggregate over the table, persisted and served, then a commit by another process.
def per_bucket(**options):
    from pyspark.sql import functions as F
    table = spark.read.format("delta").options(**options).load(path)
    return sorted(map(tuple, table.groupBy((F.col("id") % 3).alias("b")).count().collect()))
rounds = [per_bucket() for _ in range(3)]
stats = memphis.stats(spark)
subprocess.run([sys.executable, "-c", writer, path, "130", "160", "append"], check=True, capture_output=True)
seen["reuse"] = {"rounds_equal": rounds[0] == rounds[1] == rounds[2], "hits": stats["hits"],
                 "after_commit": per_bucket(), "invalidated": memphis.stats(spark)["invalidated"] - stats["invalidated"]}

# An overwrite by another process after reads of version 1 (pinned) and of the latest: the latest
# read follows the overwrite, the pinned one still answers version 1.
pinned_rounds = [per_bucket(versionAsOf=1) for _ in range(3)]
latest_rounds = [per_bucket() for _ in range(2)]
stats = memphis.stats(spark)
subprocess.run([sys.executable, "-c", writer, path, "0", "50", "overwrite"], check=True, capture_output=True)
seen["overwrite"] = {"latest": per_bucket(), "pinned_rounds": pinned_rounds, "latest_rounds": latest_rounds}
hits = memphis.stats(spark)["hits"]
seen["overwrite"]["pinned"] = per_bucket(versionAsOf=1)
seen["overwrite"]["pinned_hits"] = memphis.stats(spark)["hits"] - hits
seen["overwrite"]["invalidated"] = memphis.stats(spark)["invalidated"] - stats["invalidated"]
spark.conf.set("spark.memphis.enabled", "false")
seen["reuse"]["plain"] = per_bucket(versionAsOf=2)
seen["overwrite"]["plain"] = {"latest": per_bucket(), "pinned": per_bucket(versionAsOf=1)}
seen["explain_pinned"] = [memphis.explain_key(pinned), memphis.explain_key(spark.read.format("delta").option("versionAsOf", 0).load(path).where("id > 10"))]
print(json.dumps(seen))
"""


def test_append_by_another_process(tmp_path):
    assert len(DELTA_JARS) == 2, "the Maven build copies the Delta jars to jvm/target/delta-jars"
    jars = ",".join(os.path.abspath(j) for j in DELTA_JARS)
    env = {k: v for k, v in os.environ.items() if k != "PYSPARK_PYTHON"}
    result = subprocess.run([sys.executable, "-c", READER.replace("JARS", repr(jars)), str(tmp_path / "table"),
                             WRITER.replace("JARS", repr(jars))], capture_output=True, text=True, timeout=600, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    # A pinned read is an entry of its own, even of the version that is the latest at first.
    assert None not in (seen["latest"], seen["pinned"]) and seen["latest"] != seen["pinned"]
    assert seen["latest_after"] not in (None, seen["latest"])
    assert seen["pinned_after"] == seen["pinned"], seen["explain_pinned"]
    assert seen["latest_after"] != seen["pinned_after"], "a pinned read must not share a latest read's key"
    assert seen["counts"] == [119, 89]
    assert "at version 1" in seen["explain"]
    reuse = seen["reuse"]
    assert reuse["rounds_equal"] and reuse["hits"] >= 1
    assert reuse["invalidated"] == 1 and reuse["after_commit"] == reuse["plain"]
    assert sum(count for _, count in reuse["after_commit"]) == 160
    overwrite = seen["overwrite"]
    # Never stale: the latest read sees the overwrite; the pinned read still answers version 1.
    assert overwrite["latest"] == overwrite["plain"]["latest"] and sum(c for _, c in overwrite["latest"]) == 50
    assert overwrite["pinned"] == overwrite["plain"]["pinned"] == overwrite["pinned_rounds"][0]
    assert sum(c for _, c in overwrite["pinned"]) == 130
    # The overwrite invalidated the latest read's entry only: the pinned read is still served.
    assert overwrite["invalidated"] == 1 and overwrite["pinned_hits"] == 1
