import subprocess
import sys

import pytest

import memphis
from memphis.cli import CONNECT_SERVER_CLASS, connect_server_command, main, submit_command


def test_submit_sets_jar_and_extension_and_passes_everything_on():
    cmd = submit_command(["--master", "local[2]", "--verbose", "--conf", "spark.ui.enabled=false",
                          "app.py", "--rows", "10"])
    assert cmd[0].endswith("bin/spark-submit")
    assert cmd[1:5] == ["--jars", memphis.jar_path(), "--conf",
                        f"spark.sql.extensions={memphis.EXTENSION_CLASS}"]
    assert cmd[5:] == ["--master", "local[2]", "--verbose", "--conf", "spark.ui.enabled=false",
                       "app.py", "--rows", "10"]


def test_submit_keeps_the_users_jars_and_extensions():
    cmd = submit_command(["--jars", "/opt/a.jar", "--conf", "spark.sql.extensions=com.example.Ext",
                          "--conf", "spark.jars=/opt/b.jar", "app.py", "--jars", "app-arg"])
    assert cmd[1:5] == ["--jars", f"/opt/b.jar,/opt/a.jar,{memphis.jar_path()}", "--conf",
                        f"spark.sql.extensions=com.example.Ext,{memphis.EXTENSION_CLASS}"]
    assert cmd[5:] == ["app.py", "--jars", "app-arg"]  # the app's own arguments are left alone


def test_cli_needs_a_command(capsys):
    with pytest.raises(SystemExit) as info:
        main([])
    assert info.value.code == 2
    assert "submit" in capsys.readouterr().err


def test_connect_server_runs_sparks_connect_server_with_memphis_on_the_port():
    cmd = connect_server_command(["--port", "15123", "--master", "local[2]", "--conf", "spark.ui.enabled=false"])
    assert cmd[1:5] == ["--jars", memphis.jar_path(), "--conf", f"spark.sql.extensions={memphis.EXTENSION_CLASS}"]
    assert cmd[5:9] == ["--class", CONNECT_SERVER_CLASS, "--conf", "spark.connect.grpc.binding.port=15123"]
    assert cmd[-5:] == ["--master", "local[2]", "--conf", "spark.ui.enabled=false", "spark-internal"]
    assert "spark.connect.grpc.binding.port=15002" in connect_server_command([])  # Spark Connect's default port


def test_connect_server_needs_a_port_number(capsys):
    assert main(["connect-server", "--port", "x"]) == 2
    assert "--port needs a port number" in capsys.readouterr().err


def test_python_dash_m_memphis_is_the_console_script():
    shown = subprocess.run([sys.executable, "-m", "memphis", "--help"], capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0 and "connect-server" in shown.stdout and shown.stdout.startswith("usage: memphis")
    bare = subprocess.run([sys.executable, "-m", "memphis"], capture_output=True, text=True, timeout=120)
    assert bare.returncode == 2 and "submit" in bare.stderr
