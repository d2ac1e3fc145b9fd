"""What memphis needs from the environment before a JVM starts: the jar, Java, the Spark version."""
import glob
import os
import re
import shutil
import subprocess

from memphis.errors import MemphisSetupError

EXTENSION_CLASS = "io.memphis.MemphisSparkSessionExtension"
SPARK_MINOR = "4.2"
MIN_JAVA = 17


def jar_path() -> str:
    """The extension jar shipped inside the package."""
    jars = glob.glob(os.path.join(os.path.dirname(__file__), "jars", "memphis-spark_*.jar"))
    if len(jars) != 1:
        raise MemphisSetupError(
            f"expected one memphis-spark jar in {os.path.dirname(__file__)}/jars, found {len(jars)}; "
            "reinstall memphis-spark, or run `make jar` in a source checkout")
    return jars[0]


def check_spark_version(version: str = None) -> None:
    if version is None:
        import pyspark
        version = pyspark.__version__
    if not (version == SPARK_MINOR or version.startswith(SPARK_MINOR + ".")):
        raise MemphisSetupError(
            f"memphis is built for Spark {SPARK_MINOR}.x but pyspark {version} is installed; "
            f"install pyspark=={SPARK_MINOR}.0")


def java_executable() -> str:
    home = os.environ.get("JAVA_HOME")
    java = os.path.join(home, "bin", "java") if home else shutil.which("java")
    if not java or not os.access(java, os.X_OK):
        where = f"JAVA_HOME={home} has no bin/java" if home else "no `java` on PATH and JAVA_HOME is unset"
        raise MemphisSetupError(
            f"Spark {SPARK_MINOR} needs Java {MIN_JAVA} or newer, and none was found ({where}); "
            f"install a JDK {MIN_JAVA} (e.g. `apt install openjdk-17-jdk-headless`) or set JAVA_HOME")
    return java


def check_java() -> None:
    """Fails with one clear message when Spark's JVM could not start, instead of a py4j trace."""
    java = java_executable()
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60).stderr
    except (OSError, subprocess.SubprocessError) as e:
        raise MemphisSetupError(f"could not run {java} -version: {e}") from None
    match = re.search(r'version "(\d+)(?:\.(\d+))?', out)
    if not match:
        raise MemphisSetupError(f"could not read the Java version from `{java} -version`: {out.strip()[:200]}")
    major = int(match.group(2) if match.group(1) == "1" else match.group(1))
    if major < MIN_JAVA:
        raise MemphisSetupError(
            f"Spark {SPARK_MINOR} needs Java {MIN_JAVA} or newer, but {java} is Java {major}; "
            f"install a JDK {MIN_JAVA} and point JAVA_HOME at it")


_facades = {}


def facade(spark):
    """The JVM's ``io.memphis.PythonFacade``, looked up once per gateway so each use is one py4j call."""
    gateway = spark.sparkContext._gateway
    found = _facades.get(id(gateway))
    if found is None:
        found = _facades[id(gateway)] = getattr(spark._jvm, "io.memphis.PythonFacade")
    return found
