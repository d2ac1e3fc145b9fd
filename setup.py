"""Puts the extension jar inside the package: a prebuilt jar from `make jar`, or a Maven build."""
import glob
import os
import shutil
import subprocess

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
JAR_DIR = os.path.join(HERE, "python", "memphis", "jars")


class BuildPyWithJar(build_py):
    def run(self):
        if not glob.glob(os.path.join(JAR_DIR, "*.jar")):
            if shutil.which("mvn") is None:
                raise SystemExit("memphis: building from source needs Maven (mvn) and a JDK 17 to build the jar")
            subprocess.check_call(["mvn", "-B", "-q", "-f", os.path.join(HERE, "jvm", "pom.xml"),
                                   "package", "-DskipTests"])
            os.makedirs(JAR_DIR, exist_ok=True)
            for jar in glob.glob(os.path.join(HERE, "jvm", "target", "memphis-spark_*.jar")):
                shutil.copy(jar, JAR_DIR)
        super().run()


setup(cmdclass={"build_py": BuildPyWithJar})
