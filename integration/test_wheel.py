"""The wheel carries a jar per Spark line and leaves pyspark to the platform, and a venv with only the wheel installed starts Spark with memphis."""
import glob
import os
import shutil
import site
import subprocess
import sys
import zipfile

import memphis

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(cmd, **kwargs):
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=900, **kwargs)
    assert result.returncode == 0, f"{cmd}\n{result.stdout[-2000:]}\n{result.stderr[-3000:]}"
    return result.stdout


def test_wheel_from_a_clean_tree_ships_the_jar_and_starts_a_session(tmp_path):
    # A copy of the source tree as a fresh clone has it: no jar, so building the wheel runs Maven.
    src = tmp_path / "src"
    files = run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT).split("\0")
    for name in filter(None, files):
        if os.path.isfile(os.path.join(ROOT, name)):
            os.makedirs(src / os.path.dirname(name), exist_ok=True)
            shutil.copy2(os.path.join(ROOT, name), src / name)
    assert not glob.glob(str(src / "python" / "memphis" / "jars" / "*.jar"))
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", str(tmp_path / "dist"),
         str(src)])
    (wheel,) = glob.glob(str(tmp_path / "dist" / "memphis_spark-*.whl"))
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        metadata = zf.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
        entry_points = zf.read(next(n for n in names if n.endswith(".dist-info/entry_points.txt"))).decode()
    for line in ("4.0", "4.1", "4.2"):
        assert f"memphis/jars/memphis-spark-{line}_2.13-{memphis.__version__}.jar" in names
    # The platform's pyspark is kept: pyspark is only an extra.
    requires = [l for l in metadata.splitlines() if l.startswith("Requires-Dist: pyspark")]
    assert requires and all("extra ==" in l for l in requires), requires
    assert "memphis = memphis.cli:main" in entry_points

    # A fresh venv that installs only the wheel; its dependencies are borrowed from this venv
    # (a .pth file after its own site-packages), so the test runs offline.
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", str(venv)])
    run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-index", "--no-deps", wheel])
    fresh_site = run([str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"])
    with open(os.path.join(fresh_site.strip(), "borrowed-deps.pth"), "w") as f:
        f.write(site.getsitepackages()[0] + "\n")

    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_", "PYTHONPATH"))}
    where = run([str(venv / "bin" / "python"), "-c", "import memphis; print(memphis.jar_path())"],
                cwd=tmp_path, env=env)
    assert where.strip().startswith(fresh_site.strip())
    out = run([str(venv / "bin" / "memphis"), "stats", "--master", "local[1]"], cwd=tmp_path, env=env)
    counters = dict(line.split() for line in out.splitlines() if len(line.split()) == 2)
    assert counters["hits"] == "0" and int(counters["storage_budget_bytes"]) > 0
