"""Puts the extension jars inside the package, one per Spark line and Scala version: prebuilt by
`make jars`, or built here."""
import glob
import os
import shutil
import subprocess

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
JAR_DIR = os.path.join(HERE, "python", "memphis", "jars")
POM = os.path.join(HERE, "jvm", "pom.xml")


def builds():
    """The (Spark line, Scala version) pairs of jvm/builds.txt, the default line first."""
    with open(os.path.join(HERE, "jvm", "builds.txt")) as f:
        return [tuple(line.split()) for line in f if line.strip() and not line.startswith("#")]


class BuildPyWithJars(build_py):
    def run(self):
        default = builds()[0]
        # An editable install (a source checkout: `make test`) runs the default line; a wheel ships every line.
        wanted = [default] if self.editable_mode else builds()
        missing = [b for b in wanted if not glob.glob(os.path.join(JAR_DIR, f"memphis-spark-{b[0]}_{b[1]}-*.jar"))]
        if missing and shutil.which("mvn") is None:
            raise SystemExit("memphis: building from source needs Maven (mvn) and a JDK 17 to build the jars")
        os.makedirs(JAR_DIR, exist_ok=True)
        for line, scala in missing:
            profiles = f"spark-{line}" + (",scala-2.12" if scala == "2.12" else "")
            subprocess.check_call(["bash", os.path.join(HERE, "jvm", "spark-from-pyspark.sh"), line])
            subprocess.check_call(["mvn", "-B", "-q", "-f", POM, "-P", profiles, "package", "-DskipTests"])
            target = os.path.join(HERE, "jvm", "target", "" if (line, scala) == default else f"spark-{line}_{scala}")
            for jar in glob.glob(os.path.join(target, f"memphis-spark-{line}_{scala}-*.jar")):
                shutil.copy(jar, JAR_DIR)
        super().run()


setup(cmdclass={"build_py": BuildPyWithJars})
