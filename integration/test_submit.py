"""`memphis submit` runs a plain PySpark app with the extension active."""
import json
import os
import subprocess
import sys

import pytest

import memphis

pytestmark = pytest.mark.slow  # minutes: `make test-fast` leaves it out

HERE = os.path.dirname(os.path.abspath(__file__))
APP = os.path.join(HERE, "apps", "check_extension.py")
TEST_CLASSES = os.path.join(HERE, "..", "jvm", "target", "test-classes")
MEMPHIS = os.path.join(os.path.dirname(sys.executable), "memphis")  # the console script


def submit(*args):
    result = subprocess.run([MEMPHIS, "submit", "--master", "local[2]", "--conf", "spark.ui.enabled=false",
                             *args], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]


def test_submitted_app_sees_the_extension(tmp_path):
    out = tmp_path / "seen.json"
    submit(APP, str(out), "--app-flag", "x")
    seen = json.loads(out.read_text())
    assert seen["extensions"] == memphis.EXTENSION_CLASS
    assert seen["stats"]["hits"] == 0 and seen["stats"]["storage_budget_bytes"] > 0
    assert seen["answer"] == [[k, sum(i for i in range(10_000) if i % 3 == k)] for k in range(3)]
    assert seen["app_args"] == ["--app-flag", "x"]


def test_submit_keeps_the_apps_own_extensions(tmp_path):
    out = tmp_path / "seen.json"
    submit("--driver-class-path", os.path.abspath(TEST_CLASSES),
           "--conf", "spark.sql.extensions=io.memphis.OtherTestExtension", APP, str(out))
    seen = json.loads(out.read_text())
    assert seen["extensions"] == f"io.memphis.OtherTestExtension,{memphis.EXTENSION_CLASS}"
    assert seen["other"] == 42
    assert "hits" in seen["stats"]
