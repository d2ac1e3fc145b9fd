"""The stores the durable tier's storage tests run against, started on the loopback address:
an HDFS mini cluster (NameNode and DataNode in one JVM of the test's own, Hadoop's
``MiniDFSClusterManager`` from ``hadoop-client-minicluster``) and an S3-compatible server (moto's
server mode), with the class paths they need resolved by Maven from ``tests/storage/pom.xml``.

The class paths are resolved once per machine (Maven's local repository keeps the jars) and kept in
``.make/storage/`` beside a digest of the pom, so that ``make test`` reuses them; a jar gone from
Maven's repository, or a changed pom, resolves them again."""
import glob
import hashlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
POM = os.path.join(ROOT, "tests", "storage", "pom.xml")
CACHE = os.path.join(ROOT, ".make", "storage")


def pyspark_jars():
    import pyspark
    return os.path.join(os.path.dirname(pyspark.__file__), "jars")


def hadoop_version():
    """The Hadoop that the running pyspark ships (its hadoop-client-api jar)."""
    jars = glob.glob(os.path.join(pyspark_jars(), "hadoop-client-api-*.jar"))
    return re.search(r"hadoop-client-api-(.+)\.jar$", jars[0]).group(1) if jars else None


def classpath(profile):
    """The jars of ``profile`` (``hdfs`` or ``s3a``) of tests/storage/pom.xml, resolved by Maven once and then reused."""
    with open(POM, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()[:16]
    out = os.path.join(CACHE, f"{profile}-{digest}.classpath")
    if os.path.exists(out):
        with open(out) as f:
            jars = f.read().strip().split(os.pathsep)
        if jars and all(os.path.exists(j) for j in jars):
            return jars
    if shutil.which("mvn") is None:
        raise RuntimeError("Maven (mvn) is needed to resolve the storage tests' class paths")
    os.makedirs(CACHE, exist_ok=True)
    tmp = out + f".{os.getpid()}.tmp"
    result = subprocess.run(["mvn", "-B", "-q", "-f", POM, "-P", profile, "dependency:build-classpath",
                             "-Dmdep.includeScope=runtime", f"-Dmdep.outputFile={tmp}"],
                            capture_output=True, text=True, timeout=900)
    if result.returncode != 0:
        raise RuntimeError(f"mvn could not resolve the {profile} class path:\n{result.stdout[-3000:]}{result.stderr[-3000:]}")
    os.replace(tmp, out)
    with open(out) as f:
        return f.read().strip().split(os.pathsep)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop(process):
    """Ends a server ``process``: asked first, killed after 20 s."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def wait_for(check, seconds, what, log=None):
    deadline = time.time() + seconds
    while time.time() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.2)
    tail = ""
    if log and os.path.exists(log):
        with open(log, errors="replace") as f:
            tail = f.read()[-3000:]
    raise RuntimeError(f"{what} did not start within {seconds} s\n{tail}")


class MiniHdfs:
    """An HDFS mini cluster (one NameNode, one DataNode) on 127.0.0.1 with permissions enforced and
    simple authentication: a client is the user HADOOP_USER_NAME names. The user who starts it is
    HDFS's superuser; ``root`` is a folder every user may write (mode 1777, as /tmp), as an administrator
    would make a durable tier's root on a shared cluster."""

    def __init__(self, workdir):
        self.workdir = str(workdir)
        os.makedirs(self.workdir, exist_ok=True)
        self.log = os.path.join(self.workdir, "minidfs.log")
        details = os.path.join(self.workdir, "details.json")
        java = os.path.join(os.environ["JAVA_HOME"], "bin", "java") if os.environ.get("JAVA_HOME") else "java"
        props = {"dfs.permissions.enabled": "true", "hadoop.security.authentication": "simple",
                 "dfs.namenode.rpc-bind-host": "127.0.0.1", "dfs.namenode.http-address": "127.0.0.1:0",
                 "dfs.datanode.address": "127.0.0.1:0", "dfs.datanode.http.address": "127.0.0.1:0",
                 "dfs.datanode.ipc.address": "127.0.0.1:0", "dfs.replication": "1",
                 "dfs.namenode.safemode.extension": "0", "dfs.blockreport.initialDelay": "0",
                 "hadoop.tmp.dir": os.path.join(self.workdir, "tmp"),
                 "test.build.data": os.path.join(self.workdir, "data")}
        args = [java, "-Xmx384m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
                f"-Dtest.build.data={props['test.build.data']}",
                "-cp", os.pathsep.join(classpath("hdfs")), "org.apache.hadoop.test.MiniDFSClusterManager",
                "-format", "-writeDetails", details, "-writeConfig", os.path.join(self.workdir, "conf", "core-site.xml")]
        for k, v in props.items():
            args += ["-D", f"{k}={v}"]
        os.makedirs(os.path.join(self.workdir, "conf"), exist_ok=True)
        env = {k: v for k, v in os.environ.items() if k not in ("HADOOP_USER_NAME", "SPARK_USER")}
        with open(self.log, "w") as log:
            self.process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.PIPE,
                                            cwd=self.workdir, env=env)
        try:
            port = wait_for(lambda: self._port(details), 120, "the HDFS mini cluster", self.log)
        except Exception:
            self.stop()
            raise
        self.uri = f"hdfs://127.0.0.1:{port}"

    def _port(self, details):
        if self.process.poll() is not None:
            raise RuntimeError(f"the HDFS mini cluster exited ({self.process.returncode})")
        try:
            with open(details) as f:
                return json.load(f)["namenode_port"]
        except (OSError, ValueError, KeyError):
            return None

    def shell(self, *commands):
        """Runs Hadoop's FsShell as the cluster's superuser (who started it), one JVM for each command
        (a list of its words); returns the last one's output."""
        cp = os.pathsep.join([os.path.join(self.workdir, "conf")] + classpath("hdfs"))
        env = {k: v for k, v in os.environ.items() if k not in ("HADOOP_USER_NAME", "SPARK_USER")}
        out = ""
        for words in commands:
            result = subprocess.run(["java", "-Xmx256m", "-XX:TieredStopAtLevel=1", "-cp", cp, "org.apache.hadoop.fs.FsShell",
                                     "-fs", self.uri, *words], capture_output=True, text=True, env=env, timeout=120)
            if result.returncode != 0:
                raise RuntimeError(f"hdfs {' '.join(words)}: {result.stderr[-2000:]}")
            out = result.stdout
        return out

    def stop(self):
        stop(self.process)

    def confs(self):
        return {"spark.hadoop.fs.defaultFS": self.uri, "spark.hadoop.dfs.client.use.datanode.hostname": "false"}


# moto's request log: werkzeug's line per request, `127.0.0.1 - - [date] "GET /path?query HTTP/1.1" 200 -`.
REQUEST = re.compile(r'"(?P<method>[A-Z]+) (?P<target>\S+) HTTP/[0-9.]+" (?P<status>\d{3})')


class MotoS3:
    """moto's S3 server on 127.0.0.1 (one bucket), with the request log it writes, and the confs that
    point S3A at it. A client process marks where its steps begin and end with a request to
    ``/memphis-mark-<name>`` (:data:`MARK_CODE`), which the log shows among the others."""

    def __init__(self, workdir, bucket="memphis"):
        self.workdir = str(workdir)
        os.makedirs(self.workdir, exist_ok=True)
        self.log = os.path.join(self.workdir, "moto.log")
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.bucket = bucket
        env = {**os.environ, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
               "AWS_DEFAULT_REGION": "us-east-1"}
        with open(self.log, "w") as log:
            self.process = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
                                            stdout=log, stderr=subprocess.STDOUT, env=env, cwd=self.workdir)
        try:
            wait_for(self._up, 60, "moto's S3 server", self.log)
            self._request("PUT", f"/{bucket}")
        except Exception:
            self.stop()
            raise

    def _up(self):
        if self.process.poll() is not None:
            raise RuntimeError(f"moto's server exited ({self.process.returncode})")
        try:
            self._request("GET", "/memphis-mark-up")
        except OSError:
            return False
        return True

    def _request(self, method, path):
        try:
            urllib.request.urlopen(urllib.request.Request(self.endpoint + path, method=method), timeout=10).read()
        except urllib.error.HTTPError:
            pass  # answered: the server is up

    def stop(self):
        stop(self.process)

    def uri(self, path):
        return f"s3a://{self.bucket}/{path.lstrip('/')}"

    def confs(self):
        return {"spark.hadoop.fs.s3a.endpoint": self.endpoint,
                "spark.hadoop.fs.s3a.endpoint.region": "us-east-1",
                "spark.hadoop.fs.s3a.path.style.access": "true",
                "spark.hadoop.fs.s3a.connection.ssl.enabled": "false",
                "spark.hadoop.fs.s3a.access.key": "testing",
                "spark.hadoop.fs.s3a.secret.key": "testing",
                "spark.hadoop.fs.s3a.aws.credentials.provider": "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider",
                "spark.jars": ",".join(s3a_jars())}

    def requests(self):
        """Every request in the log so far: (method, key within the bucket or the mark's name, query, status)."""
        with open(self.log, errors="replace") as f:
            lines = f.read().splitlines()
        out = []
        for line in lines:
            m = REQUEST.search(re.sub(r"\x1b\[[0-9;]*m", "", line))  # werkzeug colours what is not a 200
            if not m:
                continue
            target = urllib.parse.urlsplit(m["target"])
            path = urllib.parse.unquote(target.path)
            query = urllib.parse.parse_qs(target.query, keep_blank_values=True)
            if path.startswith("/memphis-mark-"):
                out.append(("MARK", path[len("/memphis-mark-"):], query, int(m["status"])))
            else:
                key = path[len(f"/{self.bucket}"):].lstrip("/") if path.startswith(f"/{self.bucket}") else path
                out.append((m["method"], key, query, int(m["status"])))
        return out


def s3a_jars():
    """hadoop-aws and the AWS SDK v2 modules S3A needs, less what pyspark ships already (by artifact)."""
    shipped = {re.sub(r"-[0-9][^-]*(-[A-Za-z]+)?\.jar$", "", os.path.basename(j))
               for j in glob.glob(os.path.join(pyspark_jars(), "*.jar"))}
    def artifact(jar):
        return os.path.basename(os.path.dirname(os.path.dirname(jar)))
    # Spark's netty (4.2) serves the SDK's async client; the SDK's 4.1 beside it would split the classes.
    return [j for j in classpath("s3a") if artifact(j) not in shipped and not artifact(j).startswith("netty-")]


# Steps of a process of tests/test_durable_spark.py's APP mark where they begin and end in moto's log.
MARK_CODE = """
import urllib.request
def mark(name):
    try:
        urllib.request.urlopen(ENDPOINT + "/memphis-mark-" + name, timeout=10).read()
    except Exception:
        pass
"""
