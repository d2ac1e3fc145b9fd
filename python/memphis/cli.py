"""The ``memphis`` command: ``submit``, ``connect-server``, ``stats`` and ``demo``."""
import argparse
import glob
import os
import subprocess
import sys

import memphis
from memphis.spark import jvm
from memphis.errors import MemphisConfigError, MemphisSetupError
from memphis.spark.session import append_csv

# spark-submit options that take no value; every other option is followed by one.
_SUBMIT_FLAGS = {"--verbose", "-v", "--supervise", "--help", "-h", "--version"}
CONNECT_SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
CONNECT_PORT = 15002  # Spark Connect's own default


def submit_command(args) -> list:
    """The spark-submit command line for ``memphis submit ARGS``, keeping the user's jars and extensions."""
    from pyspark.find_spark_home import _find_spark_home

    jars, extensions, passed = jvm.jar_path(), jvm.EXTENSION_CLASS, []
    i = 0
    while i < len(args) and args[i].startswith("-"):
        option = args[i]
        if option in _SUBMIT_FLAGS or "=" in option or i + 1 == len(args):
            passed.append(option)
            i += 1
            continue
        value = args[i + 1]
        key = value.split("=", 1)[0] if option == "--conf" else None
        if option == "--jars" or key == "spark.jars":
            jars = append_csv(value.split("=", 1)[-1], jars)
        elif key == "spark.sql.extensions":
            extensions = append_csv(value.split("=", 1)[1], extensions)
        else:
            passed += [option, value]
        i += 2
    submit = os.path.join(_find_spark_home(), "bin", "spark-submit")
    return [submit, "--jars", jars, "--conf", f"spark.sql.extensions={extensions}"] + passed + list(args[i:])


def connect_server_command(args) -> list:
    """The spark-submit command line for ``memphis connect-server [--port N] [spark-submit options]``:
    Spark's Connect server (``start-connect-server.sh`` is not in the pyspark wheel) with memphis on."""
    from pyspark.find_spark_home import _find_spark_home

    args, port = list(args), CONNECT_PORT
    if "--port" in args:
        at = args.index("--port")
        if at + 1 == len(args) or not args[at + 1].isdigit():
            raise MemphisConfigError(f"memphis connect-server: --port needs a port number, got {args[at + 1:at + 2] or 'none'}")
        port = int(args.pop(at + 1))
        args.pop(at)
    server = ["--class", CONNECT_SERVER_CLASS, "--conf", f"spark.connect.grpc.binding.port={port}"]
    if not glob.glob(os.path.join(_find_spark_home(), "jars", "spark-connect_*.jar")):
        # Spark 3.5 ships its Connect server as a package of its own.
        import pyspark

        server += ["--packages", f"org.apache.spark:spark-connect_{jvm.spark_scala_version()}:{pyspark.__version__}"]
    return submit_command(server + args + ["spark-internal"])


def _spark_submit(command: list) -> int:
    jvm.check_spark_version()
    jvm.check_java()
    # Python workers must run this interpreter, which has pyarrow and memphis.
    env = dict(os.environ)
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    env.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    return subprocess.call(command, env=env)


def _stats(master: str) -> int:
    spark = memphis.session(master, app_name="memphis-stats")
    try:
        for name, value in memphis.stats(spark).items():
            print(f"{name:<22}{value:>16}")
    finally:
        spark.stop()
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="memphis", description="Lineage-based reuse for Spark ML pipelines.")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("submit", help="spark-submit with the memphis jar and extension set: "
                                       "memphis submit [spark-submit options] APP.py [app arguments]")
    commands.add_parser("connect-server", help="start a Spark Connect server with memphis on: "
                                               "memphis connect-server [--port N (default 15002)] [spark-submit options]")
    stats = commands.add_parser("stats", help="start a session and print its memphis counters")
    stats.add_argument("--master", default="local[*]")
    demo = commands.add_parser("demo", help="run an exploratory ML session with memphis off, then on")
    demo.add_argument("--master", default="local[*]")
    demo.add_argument("--remote", help="run on the Spark Connect server at this URL (sc://host:port) on this machine")
    demo.add_argument("--rows", type=int, default=400_000, help="rows of generated sales (default 400000)")
    demo.add_argument("--plot", default="memphis-demo.png", help="where to save the plot (default memphis-demo.png)")
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        # Everything after `submit` belongs to spark-submit, options included, so argparse stays out.
        if argv[:1] == ["submit"] and argv[1:2] not in (["-h"], ["--help"]):
            return _spark_submit(submit_command(argv[1:]))
        if argv[:1] == ["connect-server"] and argv[1:2] not in (["-h"], ["--help"]):
            return _spark_submit(connect_server_command(argv[1:]))
        args = parser.parse_args(argv)
        if args.command == "stats":
            return _stats(args.master)
        from memphis import demo as showcase  # imported when asked for: it imports pyspark
        showcase.main(master=args.master, rows=args.rows, plot_path=args.plot, remote=args.remote)
        return 0
    except (MemphisSetupError, MemphisConfigError) as e:
        print(f"memphis: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
