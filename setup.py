"""Puts the extension jars inside the package, one per Spark line: prebuilt by `make jars`, or built here."""
import glob
import os
import re
import shutil
import subprocess

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
JAR_DIR = os.path.join(HERE, "python", "memphis", "jars")
POM = os.path.join(HERE, "jvm", "pom.xml")
DEFAULT_LINE = "4.2"


def spark_lines():
    """The Spark lines the Maven build has a profile for (spark-<line>)."""
    with open(POM) as f:
        return re.findall(r"<id>spark-([0-9.]+)</id>", f.read())


class BuildPyWithJars(build_py):
    def run(self):
        missing = [line for line in spark_lines()
                   if not glob.glob(os.path.join(JAR_DIR, f"memphis-spark-{line}_*.jar"))]
        if missing and shutil.which("mvn") is None:
            raise SystemExit("memphis: building from source needs Maven (mvn) and a JDK 17 to build the jars")
        os.makedirs(JAR_DIR, exist_ok=True)
        for line in missing:
            subprocess.check_call(["mvn", "-B", "-q", "-f", POM, "-P", f"spark-{line}", "package", "-DskipTests"])
            target = os.path.join(HERE, "jvm", "target", "" if line == DEFAULT_LINE else f"spark-{line}_2.13")
            for jar in glob.glob(os.path.join(target, f"memphis-spark-{line}_*.jar")):
                shutil.copy(jar, JAR_DIR)
        super().run()


setup(cmdclass={"build_py": BuildPyWithJars})
