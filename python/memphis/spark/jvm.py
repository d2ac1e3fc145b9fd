"""What memphis needs from the environment before a JVM starts: the jar, Java, the Spark version."""
import glob
import os
import re
import shutil
import subprocess

from memphis.errors import MemphisSetupError
from memphis.jar_facts import JAR_DIR, build_properties

EXTENSION_CLASS = "io.memphis.MemphisSparkSessionExtension"
# memphis-spark-<Spark line>_<Scala version>-<memphis version>.jar, one per line the build made.
_JAR_NAME = re.compile(r"memphis-spark-(\d+\.\d+)_(\d+\.\d+)-[^/]*\.jar$")


def min_java(line: str) -> int:
    """The oldest Java a Spark line runs on, as its jar is compiled for: 8 for Spark 3.5, 17 from Spark 4."""
    jars = [path for (jar_line, _), path in sorted(shipped_jars().items()) if jar_line == line]
    if not jars:
        jar_path(f"{line}.0")  # says which lines this installation has jars for
    return int(build_properties(jars[0])["java.release"])


def shipped_jars() -> dict:
    """The jars inside the package: {(Spark line, Scala version): path}."""
    found = {}
    for path in glob.glob(os.path.join(JAR_DIR, "memphis-spark-*.jar")):
        match = _JAR_NAME.search(os.path.basename(path))
        if match:
            found[match.groups()] = path
    return found


def spark_line(version: str) -> str:
    """A Spark version's line: "4.1" for "4.1.3" (and for "4.1.0.dev1")."""
    return ".".join(version.split(".")[:2])


def spark_scala_version() -> str:
    """The Scala version of the running Spark, from the Scala library jar Spark ships; 2.13 if none is found."""
    from pyspark.find_spark_home import _find_spark_home

    jars = glob.glob(os.path.join(_find_spark_home(), "jars", "scala-library-*.jar"))
    match = re.search(r"scala-library-(\d+\.\d+)\.", os.path.basename(jars[0])) if jars else None
    return match.group(1) if match else "2.13"


def jar_path(spark_version: str = None, scala_version: str = None) -> str:
    """The extension jar inside the package for the running Spark (pyspark's version and its Scala).

    Examples
    --------
    >>> import memphis
    >>> memphis.jar_path()  # doctest: +SKIP
    '.../memphis/jars/memphis-spark-4.2_2.13-0.1.0.jar'
    """
    if spark_version is None:
        import pyspark
        spark_version = pyspark.__version__
    line, scala = spark_line(spark_version), scala_version or spark_scala_version()
    jars = shipped_jars()
    if (line, scala) in jars:
        return jars[(line, scala)]
    if not jars:
        raise MemphisSetupError(
            f"no memphis-spark jar in {JAR_DIR}; reinstall memphis-spark, or run `make jar` in a source checkout")
    in_order = sorted(jars, key=lambda k: (tuple(map(int, k[0].split("."))), k[1]))
    built = ", ".join(f"{l} (Scala {s})" for l, s in in_order)
    raise MemphisSetupError(
        f"memphis has no jar for Spark {line} with Scala {scala} (pyspark {spark_version} is installed); "
        f"this installation has jars for Spark {built}")


def check_spark_version(version: str = None) -> None:
    """Fails with one clear message when memphis ships no jar for the installed pyspark."""
    jar_path(version)


def _installed_spark_line() -> str:
    import pyspark

    return spark_line(pyspark.__version__)


def java_executable(line: str = None) -> str:
    home = os.environ.get("JAVA_HOME")
    java = os.path.join(home, "bin", "java") if home else shutil.which("java")
    if not java or not os.access(java, os.X_OK):
        line = line or _installed_spark_line()
        where = f"JAVA_HOME={home} has no bin/java" if home else "no `java` on PATH and JAVA_HOME is unset"
        raise MemphisSetupError(
            f"Spark {line} needs Java {min_java(line)} or newer, and none was found ({where}); "
            f"install a JDK 17 (e.g. `apt install openjdk-17-jdk-headless`) or set JAVA_HOME")
    return java


def check_java() -> None:
    """Fails with one clear message when Spark's JVM could not start, instead of a py4j trace."""
    line = _installed_spark_line()
    java = java_executable(line)
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60).stderr
    except (OSError, subprocess.SubprocessError) as e:
        raise MemphisSetupError(f"could not run {java} -version: {e}") from None
    match = re.search(r'version "(\d+)(?:\.(\d+))?', out)
    if not match:
        raise MemphisSetupError(f"could not read the Java version from `{java} -version`: {out.strip()[:200]}")
    major = int(match.group(2) if match.group(1) == "1" else match.group(1))
    if major < min_java(line):
        raise MemphisSetupError(
            f"Spark {line} needs Java {min_java(line)} or newer, but {java} is Java {major}; "
            f"install a JDK 17 and point JAVA_HOME at it")


_facades = {}


def facade(spark):
    """The JVM's ``io.memphis.PythonFacade``, looked up once per gateway so each use is one py4j call."""
    gateway = spark.sparkContext._gateway
    found = _facades.get(id(gateway))
    if found is None:
        found = _facades[id(gateway)] = getattr(spark._jvm, "io.memphis.PythonFacade")
    return found
