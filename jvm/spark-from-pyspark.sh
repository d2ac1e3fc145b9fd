#!/usr/bin/env bash
# jvm/spark-from-pyspark.sh <Spark line>: for a line whose Spark the Maven registry serves only in part,
# a Maven repository (jvm/target/spark-repo, named by that line's profile in pom.xml) made of the Spark
# jars pyspark's release ships. Does nothing for the other lines.
#
# Why: for 4.3.0 the registry serves spark-sql and spark-core, but not spark-catalyst, spark-sql-api and
# the other modules, nor their parent POM, so Maven cannot resolve spark-sql. pyspark 4.3.0 (PyPI)
# ships every module's jar, each with its own POM inside (META-INF/maven); the parent POM is 4.2.0's
# with its version changed, as the two releases ship the same third-party jars, each at the same version.
# Delete a line from the case below once the registry serves its Spark whole.
set -euo pipefail
case ${1:?a Spark line} in
  4.3) version=4.3.0 like=4.2.0 ;;
  *) exit 0 ;;
esac
cd "$(dirname "$0")"
repo=target/spark-repo/org/apache/spark
test -f "$repo/spark-parent_2.13/$version/done" && exit 0

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
  unzip -p "$jar" "META-INF/maven/org.apache.spark/$artifact/pom.xml" > "$tmp/pom.xml"
  put "$artifact" "$jar" jar
  put "$artifact" "$tmp/pom.xml" pom
done
mvn -B -q dependency:get -Dartifact="org.apache.spark:spark-parent_2.13:$like:pom"
sed "0,/<version>$like<\/version>/s//<version>$version<\/version>/" \
  "$HOME/.m2/repository/org/apache/spark/spark-parent_2.13/$like/spark-parent_2.13-$like.pom" > "$tmp/parent.pom"
put spark-parent_2.13 "$tmp/parent.pom" pom
touch "$repo/spark-parent_2.13/$version/done"
