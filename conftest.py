"""What every test of this repository shares, those of integration/ too."""
import os

# The durable tier (spark.memphis.durable.dir, on by default for a local master) carries results from one
# process to the next, which would change what the tests count and make one test run depend on the one
# before. It is off in every JVM the tests start, through spark-submit (a JVM system property, which
# SparkConf reads; a session's own setting still overrides it, as tests/test_durable_spark.py does).
#
# Delta rebuilds a table's state over 50 partitions by default (snapshotPartitions): for the tests' tables of
# a few files that is most of the time of each Delta read and commit, so 2 (as shuffle partitions are 4).
#
# The JVMs run C1-compiled code only (TieredStopAtLevel=1): most live for a test or a benchmark's quick run,
# and on two busy cores the second JIT tier costs them more than it saves (two checkpoint and loop test files
# took 197–217 s against 237–243 s, alternating).
# C1's frames are larger, and the lineage-key benchmark's deep plans overflowed a thread's default stack
# while Spark analyzed them: 4 MB, as Spark's own test JVMs have.
os.environ["SPARK_SUBMIT_OPTS"] = " ".join(
    filter(None, [os.environ.get("SPARK_SUBMIT_OPTS"), "-Dspark.memphis.durable.dir=none",
                  "-Dspark.databricks.delta.snapshotPartitions=2", "-XX:TieredStopAtLevel=1", "-Xss4m"]))
