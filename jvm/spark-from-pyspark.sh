#!/usr/bin/env bash
# jvm/spark-from-pyspark.sh <Spark line>: for a line whose Spark the Maven registry serves only in part,
# a Maven repository (jvm/target/spark-repo, named by that line's profile in pom.xml) made of the Spark
# jars pyspark's release ships. Does nothing for the other lines.
#
# Why: for 4.3.0 the registry serves spark-sql and spark-core, but not spark-catalyst, spark-sql-api and
# the other modules, nor their parent POM, so Maven cannot resolve spark-sql. pyspark 4.3.0 (PyPI)
# ships every module's jar, each with its own POM inside (META-INF/maven); the parent POM is 4.2.0's
# with its version changed, as the two releases ship the same third-party jars, each at the same version.
# Each module's POM goes in without its test-scoped dependencies: no user of the module needs them,
# and 4.2.0's parent gives no version to some that 4.3.0's modules added (spark-sql's com.ibm.db2:jcc),
# which would make Maven drop spark-sql's transitive dependencies (ORC's among them).
# Delete a line from the case below once the registry serves its Spark whole.
set -euo pipefail
case ${1:?a Spark line} in
  4.3) version=4.3.0 like=4.2.0 ;;
  *) exit 0 ;;
esac
cd "$(dirname "$0")"
repo=target/spark-repo/org/apache/spark
made=$repo/spark-parent_2.13/$version/made-without-test-deps
test -f "$made" && exit 0
# Maven's local repository keeps its copies of an earlier making's files: they go too.
rm -rf "$HOME"/.m2/repository/org/apache/spark/spark-*_2.13/$version

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"${PYTHON:-python3}" -m pip download -q --disable-pip-version-check --no-deps --no-binary :all: -d "$tmp" "pyspark==$version"
tar -xzf "$tmp"/pyspark-*.tar.gz -C "$tmp" --wildcards "*/deps/jars/spark-*_2.13-$version.jar"
put() { # <artifact> <file> <ext>: one file of the repository, with the checksum Maven looks for
  mkdir -p "$repo/$1/$version"
  cp "$2" "$repo/$1/$version/$1-$version.$3"
  sha1sum < "$2" | cut -d' ' -f1 > "$repo/$1/$version/$1-$version.$3.sha1"
}
for jar in "$tmp"/pyspark-*/deps/jars/spark-*_2.13-"$version".jar; do
  artifact=$(basename "$jar" "-$version.jar")
  unzip -p "$jar" "META-INF/maven/org.apache.spark/$artifact/pom.xml" |
    "${PYTHON:-python3}" -c 'import re, sys
sys.stdout.write(re.sub(r"\s*<dependency>(?:(?!</dependency>).)*<scope>test</scope>(?:(?!</dependency>).)*</dependency>", "",
                        sys.stdin.read(), flags=re.S))' > "$tmp/pom.xml"
  put "$artifact" "$jar" jar
  put "$artifact" "$tmp/pom.xml" pom
done
mvn -B -q dependency:get -Dartifact="org.apache.spark:spark-parent_2.13:$like:pom"
sed "0,/<version>$like<\/version>/s//<version>$version<\/version>/" \
  "$HOME/.m2/repository/org/apache/spark/spark-parent_2.13/$like/spark-parent_2.13-$like.pom" > "$tmp/parent.pom"
put spark-parent_2.13 "$tmp/parent.pom" pom
touch "$made"
