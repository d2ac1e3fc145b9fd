"""A plain PySpark app, as a team would submit it: it knows nothing of memphis.

Run by `memphis submit`; writes what it saw as JSON to argv[1].
"""
import json
import sys

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

spark = SparkSession.builder.appName("check-extension").getOrCreate()
df = spark.range(10_000).groupBy((F.col("id") % 3).alias("k")).agg(F.sum("id").alias("s")).orderBy("k")
seen = {
    "extensions": spark.conf.get("spark.sql.extensions"),
    "stats": {r["name"]: r["value"] for r in spark.sql("SELECT * FROM memphis_stats()").collect()},
    "answer": [list(r) for r in df.collect()],
    "app_args": sys.argv[2:],
}
if "io.memphis.OtherTestExtension" in seen["extensions"]:
    seen["other"] = spark.sql("SELECT other_extension_fn()").head()[0]
with open(sys.argv[1], "w") as f:
    json.dump(seen, f)
spark.stop()
