"""What a memphis jar says about itself, read from the jar file (no JVM needed): the table of
``spark.memphis.*`` keys that ``io.memphis.conf.MemphisConf`` declares (written into the jar by the
build), the durable tier's layout and the columns of the entries' tables (the JVM reads the same
files), and what the jar is built for (Spark line, Scala version, oldest Java)."""
import functools
import glob
import json
import os
import zipfile

from memphis.errors import MemphisSetupError

JAR_DIR = os.path.join(os.path.dirname(__file__), "jars")
CONF_TABLE = "io/memphis/confs.json"
DURABLE_LAYOUT = "io/memphis/durable-layout.json"
ENTRY_COLUMNS = "io/memphis/entry-columns.json"
BUILD_PROPERTIES = "io/memphis/build.properties"


def build_properties(jar: str) -> dict:
    """The jar's build facts: ``spark.line``, ``scala.binary.version`` and ``java.release``."""
    with zipfile.ZipFile(jar) as z:
        text = z.read(BUILD_PROPERTIES).decode("utf-8")
    pairs = (line.split("=", 1) for line in text.splitlines() if "=" in line and not line.startswith("#"))
    return {key.strip(): value.strip() for key, value in pairs}


@functools.lru_cache(maxsize=None)
def _read(name: str, jars: tuple):
    problems = []
    for jar in jars:
        try:
            with zipfile.ZipFile(jar) as z:
                return json.loads(z.read(name).decode("utf-8"))
        except (OSError, KeyError, ValueError, zipfile.BadZipFile) as error:  # a foreign or broken jar
            problems.append(f"{os.path.basename(jar)}: {error}")
    raise MemphisSetupError(f"no memphis-spark jar with {name} in {JAR_DIR} ({'; '.join(problems) or 'none'}); "
                            "reinstall memphis-spark, or run `make jar` in a source checkout")


def _newest(name: str):
    """The JSON file ``name`` of the newest readable jar: every jar built from one source carries the
    same one, and a jar left from an older build (of another Spark line, say) never speaks for the current one."""
    jars = glob.glob(os.path.join(JAR_DIR, "memphis-spark-*.jar"))
    return _read(name, tuple(sorted(jars, key=lambda jar: (-os.path.getmtime(jar), jar))))


def conf_table() -> dict:
    """Every ``spark.memphis.*`` key: ``{key: {"key", "default", "allowed", "doc", "static"}}``, from the newest jar.

    Examples
    --------
    >>> from memphis import jar_facts
    >>> jar_facts.conf_table()["spark.memphis.disk.maxBytes"]["default"]  # doctest: +SKIP
    '10g'
    """
    return {row["key"]: row for row in _newest(CONF_TABLE)}


def default(key: str) -> str:
    """The default value of a ``spark.memphis.*`` key, as the JVM declares it."""
    return conf_table()[key]["default"]


def durable_layout() -> dict:
    """The durable tier's layout (``io.memphis.durable.DurableLayout`` reads it too): the default
    root's rule, the user folder's rule, the shared folder, each tier's folder, the entries' files."""
    return _newest(DURABLE_LAYOUT)


def entry_columns(table: str) -> list:
    """The columns of an entries table, in ``memphis.entries``' order: ``"local"`` (the driver's,
    :func:`memphis.local.entries`) or ``"memphis_cache"`` (the JVM's, ``memphis_cache()``)."""
    return [column["name"] for column in _newest(ENTRY_COLUMNS)["columns"] if table in column["in"]]
