"""A driver of 640 MB whose cached subplans would fill more than memphis' share of its storage memory.

It runs in a fresh interpreter: a JVM's heap is fixed when it starts.
"""
from conftest import TEST_CONFS, run_python

PRESSURE_APP = """
import json, sys, time
import memphis
from pyspark.sql import functions as F

spark = memphis.session("local[2]", app_name="memphis-pressure", **{**json.loads(sys.argv[1]),
                        "spark.driver.memory": "640m", "spark.memphis.reuse.minOccurrences": "1"})
spark.sparkContext.setLogLevel("ERROR")

def settle():  # the listener bus reports stored blocks a moment later
    time.sleep(1)
    return memphis.stats(spark)

def wide(offset, summary):  # about 60 MB cached: sorted rows of long strings that do not compress
    rows = spark.range(400_000).selectExpr("id", f"sha2(cast(id + {offset} AS string), 512) AS s").orderBy("id")
    return rows.agg(summary(F.crc32("s")).alias("c"), F.count("*").alias("n"))

# Each round summarizes the four wide subplans differently: the first persists each query's small
# result, the second the wide subplans they share (more than the budget), the third reuses them.
queries = [(offset * 1_000_000, summary) for summary in (F.sum, F.max, F.min) for offset in range(4)]
budget = settle()["storage_budget_bytes"]
answers, held = [], []
for offset, summary in queries:
    answers.append(wide(offset, summary).collect()[0].asDict())
    held.append(settle()["bytes_held"])
stats = memphis.stats(spark)
spark.conf.set("spark.memphis.enabled", "false")
plain = [wide(offset, summary).collect()[0].asDict() for offset, summary in queries]
print(json.dumps({"budget": budget, "held": held, "stats": stats, "same": answers == plain,
                  "heap": spark.sparkContext._jvm.java.lang.Runtime.getRuntime().maxMemory()}))
"""


def test_a_640m_driver_keeps_memphis_within_its_budget():
    import json

    seen = run_python(PRESSURE_APP, json.dumps(TEST_CONFS))
    assert seen["heap"] < 700 * 2**20, "the driver really runs with 640 MB"
    assert 0 < seen["budget"] < 300 * 2**20
    assert all(held <= seen["budget"] for held in seen["held"]), seen
    assert max(seen["held"]) > seen["budget"] // 2, "the wide subplans press on the budget"
    assert seen["stats"]["evicted"] >= 1 and seen["stats"]["persisted"] >= 4, seen["stats"]
    assert seen["same"], "answers with memphis on equal those with it off"
