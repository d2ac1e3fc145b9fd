"""What a memphis jar says about itself, read from the jar file (no JVM needed): the table of
``spark.memphis.*`` keys that ``io.memphis.conf.MemphisConf`` declares (written into the jar by the
build), and what the jar is built for (Spark line, Scala version, oldest Java)."""
import functools
import glob
import json
import os
import zipfile

from memphis.errors import MemphisSetupError

JAR_DIR = os.path.join(os.path.dirname(__file__), "jars")
CONF_TABLE = "io/memphis/confs.json"
BUILD_PROPERTIES = "io/memphis/build.properties"


def build_properties(jar: str) -> dict:
    """The jar's build facts: ``spark.line``, ``scala.binary.version`` and ``java.release``."""
    with zipfile.ZipFile(jar) as z:
        text = z.read(BUILD_PROPERTIES).decode("utf-8")
    pairs = (line.split("=", 1) for line in text.splitlines() if "=" in line and not line.startswith("#"))
    return {key.strip(): value.strip() for key, value in pairs}


@functools.lru_cache(maxsize=None)
def _conf_table(jars: tuple) -> dict:
    problems = []
    for jar in jars:
        try:
            with zipfile.ZipFile(jar) as z:
                rows = json.loads(z.read(CONF_TABLE).decode("utf-8"))
            return {row["key"]: row for row in rows}
        except (OSError, KeyError, ValueError, zipfile.BadZipFile) as error:  # a foreign or broken jar
            problems.append(f"{os.path.basename(jar)}: {error}")
    raise MemphisSetupError(f"no memphis-spark jar with a conf table in {JAR_DIR} ({'; '.join(problems) or 'none'}); "
                            "reinstall memphis-spark, or run `make jar` in a source checkout")


def conf_table() -> dict:
    """Every ``spark.memphis.*`` key: ``{key: {"key", "default", "allowed", "doc", "static"}}``.

    Every jar built from one source carries the same table; the newest readable one is used, so that
    a jar left from an older build (of another Spark line, say) never speaks for the current one.

    Examples
    --------
    >>> from memphis import jar_facts
    >>> jar_facts.conf_table()["spark.memphis.disk.maxBytes"]["default"]  # doctest: +SKIP
    '10g'
    """
    jars = glob.glob(os.path.join(JAR_DIR, "memphis-spark-*.jar"))
    return _conf_table(tuple(sorted(jars, key=lambda jar: (-os.path.getmtime(jar), jar))))


def default(key: str) -> str:
    """The default value of a ``spark.memphis.*`` key, as the JVM declares it."""
    return conf_table()[key]["default"]
