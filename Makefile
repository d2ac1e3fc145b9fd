# `make demo` and `make test` set up everything they need on a fresh machine (a venv with pinned
# Python deps, the Maven build of the jar) and reuse what is already there.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
JAR_DIR := python/memphis/jars
# The stamp of the browser the UI tests use (the browser target below).
BROWSER := .make/chromium
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
JVM_SOURCES := jvm/pom.xml $(shell find jvm/src -type f 2>/dev/null)
MVN := mvn -B -q -f jvm/pom.xml
# The jars memphis builds, <Spark line>_<Scala version> (jvm/builds.txt); the first is the default line.
BUILDS := $(shell sed -n 's/^\([0-9.]*\) \([0-9.]*\)$$/\1_\2/p' jvm/builds.txt)
DEFAULT_BUILD := $(firstword $(BUILDS))
OTHER_BUILDS := $(wordlist 2,$(words $(BUILDS)),$(BUILDS))
DEFAULT_JAR := jvm/target/memphis-spark-$(DEFAULT_BUILD)-*.jar
# The Maven profiles of a build: its Spark line, and Scala 2.12 where it is not 2.13.
comma := ,
profiles = spark-$(word 1,$(subst _, ,$1))$(if $(filter %_2.12,$1),$(comma)scala-2.12)
# The Maven repository of a line whose Spark the registry serves only in part (nothing for the others).
spark_repo = jvm/spark-from-pyspark.sh $(word 1,$(subst _, ,$1))

.PHONY: demo test test-fast test-jvm test-python test-lines bench bench-quick jar jars clean browser

demo: $(VENV)/.installed
	$(VENV)/bin/memphis demo

test: test-jvm test-python

# ScalaTest runs in Maven's package phase; the fresh jar is then copied into the Python package.
test-jvm: $(VENV)/.installed
	$(MVN) package
	cp $(DEFAULT_JAR) $(JAR_DIR)/

# The slowest tests are listed at the end: CI's time limit is what they spend (docs/compatibility.md).
# PYTEST_WORKERS test processes, a file's tests in one of them and in their order (they share its module
# fixtures, such as a Connect server); each test's Spark is local[2] or a subprocess, so more workers
# than cores only contend (one alone leaves about a third of two cores idle, waiting on JVMs).
PYTEST_WORKERS ?= 2
# Files are handed out in collection order, the longest first (tests/conftest.py), not by their number of tests.
PYTEST := $(PY) -m pytest -q -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder
test-python: $(VENV)/.installed $(BROWSER)
	$(PYTEST) --durations=20

# The Python tests without those marked slow (over ~20 s each: benchmarks, corpora, soaks): minutes, not tens.
test-fast: $(VENV)/.installed $(BROWSER)
	$(PYTEST) -m "not slow"

# The browser tests/test_spark_ui.py reads the Spark UI with: Debian's chromium, installed once
# (through sudo unless root); a chromium already on the PATH is used as it is.
browser: $(BROWSER)
$(BROWSER):
	command -v chromium >/dev/null || ($(SUDO) apt-get update -q && $(SUDO) apt-get install -y -q chromium)
	mkdir -p $(dir $@) && touch $@

# Every other Spark line, each at both ends of its patch releases, and Java 11 and 21
# (integration/lines/run.sh says what runs; docs/compatibility.md what it found).
test-lines: $(VENV)/.installed $(BROWSER)
	PY=$(PY) PYTHON=$(PYTHON) PYTEST_WORKERS=$(PYTEST_WORKERS) bash integration/lines/run.sh

# The TPC-H scale and driver sizes of the corpus `make bench` runs (benchmarks/tpch_corpus.py,
# docs/reliability.md); its CI scale is 0.1. TPC-DS' scales (CI: 0.05) with their driver sizes, at 8
# shuffle partitions (at sf 1 a 1 GiB driver fails five queries with memphis off); and TPC-H at sf 1.
TPCH_SF ?= 0.5
TPCH_DRIVER_MEMORY ?= 640m 1g 4g
TPCDS_SF_DRIVER ?= 0.2:1g 1:2g
RESULTS := benchmarks/results
QUICK := $(RESULTS)/quick
# The driver-side benchmarks run on one BLAS thread, as their hand-hoisted baselines do.
ONE_BLAS := OPENBLAS_NUM_THREADS=1

# Every figure the README and docs carry, in one dated run on a quiet machine (about three hours on
# 2 cores): each results file records its commit, date and machine (docs/user-guide.md, "Benchmarks").
bench: $(VENV)/.installed
	$(PY) benchmarks/run.py
	$(PY) benchmarks/run.py --pressure --workload tpch_session --workload exploration --out $(RESULTS)/pressure
	$(PY) benchmarks/run.py --scale 0.1,1,10 --repeats 3 --workload tpch_session --workload exploration \
		--conf spark.driver.memory=4g --out $(RESULTS)/scaling
	$(ONE_BLAS) $(PY) benchmarks/ml_workloads.py
	$(ONE_BLAS) $(PY) benchmarks/ml_workloads.py --scale 0.1,1,10 --workloads grid_10_lambda \
		--skip joblib,joblib_second_process --no-systemds --no-spark --out $(RESULTS)/ml_scale_sweep
	$(ONE_BLAS) $(PY) benchmarks/ml_workloads.py --host-budget 400k --skip joblib,joblib_second_process \
		--workloads grid_10_lambda,cv_4fold_10_lambda,pca_k_sweep,ensemble_weights --no-systemds --no-spark \
		--out $(RESULTS)/ml_pressure
	$(PY) benchmarks/ml_workloads.py --skip joblib,joblib_second_process --no-systemds --no-spark \
		--out $(RESULTS)/ml_threads
	$(ONE_BLAS) $(PY) benchmarks/sklearn_pipelines.py
	$(PY) benchmarks/tracing_overhead.py
	$(ONE_BLAS) $(PY) benchmarks/gpu_tier.py --device simulated
	$(PY) benchmarks/run_all.py
	$(PY) benchmarks/kmeans_loop.py
	$(PY) benchmarks/kmeans_loop.py --modes hand,hand-lazy,memphis-checkpoints,memphis-nospec --out $(RESULTS)/kmeans_questions
	$(PY) benchmarks/broadcast_joins.py
	$(PY) benchmarks/lineage_keys.py
	$(PY) benchmarks/connect_calls.py
	$(PY) benchmarks/connect_calls.py --serve
	$(PY) benchmarks/demo_table.py
	$(PY) benchmarks/restart.py
	$(PY) benchmarks/restart.py --workload demo
	for memory in $(TPCH_DRIVER_MEMORY); do \
		$(PY) benchmarks/tpch_corpus.py --sf $(TPCH_SF) --driver-memory $$memory --warmup --plain-once \
			--out $(RESULTS)/tpch_corpus_sf$(TPCH_SF)_$$memory.json || exit 1; done
	$(PY) benchmarks/tpch_corpus.py --sf 1 --driver-memory 1g --warmup --plain-once --out $(RESULTS)/tpch_corpus_sf1_1g.json
	for run in $(TPCDS_SF_DRIVER); do sf=$${run%%:*}; memory=$${run##*:}; \
		$(PY) benchmarks/tpcds_corpus.py --sf $$sf --driver-memory $$memory --shuffle-partitions 8 --warmup --plain-once \
			--out $(RESULTS)/tpcds_corpus_sf$${sf}_$$memory.json || exit 1; done
	$(PY) docs/generate.py  # docs/benchmarks.md's results section from the files just written

# Every mode of every benchmark script once at a tiny scale: it fails on any answer mismatch; its
# timings mean nothing. pytest's slow tests run the same (tests/test_bench*.py, tests/test_demo.py).
bench-quick: $(VENV)/.installed
	$(PY) benchmarks/run.py --quick --out $(QUICK)
	$(PY) benchmarks/run.py --quick --pressure --workload tpch_session --out $(QUICK)
	$(ONE_BLAS) $(PY) benchmarks/ml_workloads.py --quick --out $(QUICK)
	$(ONE_BLAS) $(PY) benchmarks/sklearn_pipelines.py --quick --out $(QUICK)
	$(PY) benchmarks/tracing_overhead.py --quick --out $(QUICK)
	$(ONE_BLAS) $(PY) benchmarks/gpu_tier.py --quick --out $(QUICK)
	$(PY) benchmarks/run_all.py --quick --out $(QUICK)
	$(PY) benchmarks/kmeans_loop.py --quick --out $(QUICK)
	$(PY) benchmarks/broadcast_joins.py --quick --out $(QUICK)
	$(PY) benchmarks/lineage_keys.py --quick --out $(QUICK)
	$(PY) benchmarks/connect_calls.py --quick --out $(QUICK)
	$(PY) benchmarks/connect_calls.py --serve --quick --out $(QUICK)
	$(PY) benchmarks/demo_table.py --rows 20000 --out $(QUICK)

jar: $(JAR_DIR)/.built

$(JAR_DIR)/.built: $(JVM_SOURCES)
	@command -v mvn >/dev/null || { echo "make: Maven (mvn) and a JDK 17 are needed to build the jar"; exit 1; }
	$(call spark_repo,$(DEFAULT_BUILD))
	$(MVN) package -DskipTests
	mkdir -p $(JAR_DIR) && rm -f $(JAR_DIR)/memphis-spark-$(DEFAULT_BUILD)-*.jar
	cp $(DEFAULT_JAR) $(JAR_DIR)/
	touch $@

# The jar of every build, as the wheel ships them (`make jar` builds the default line only).
jars: jar $(addprefix jar-,$(OTHER_BUILDS))

# One other build's jar (jar-<line>_<scala>), built beside the default's and copied into the
# package; with JAR_FLAGS empty (or naming the test JVM), Maven runs its ScalaTest suites first.
JAR_FLAGS ?= -DskipTests
jar-%:
	mkdir -p $(JAR_DIR)
	$(call spark_repo,$*)
	$(MVN) -P $(call profiles,$*) package $(JAR_FLAGS)
	cp jvm/target/spark-$*/memphis-spark-$*-*.jar $(JAR_DIR)/

$(VENV)/.deps: requirements-dev.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -r requirements-dev.txt
	touch $@

$(VENV)/.installed: $(VENV)/.deps $(JAR_DIR)/.built pyproject.toml setup.py
	$(PY) -m pip install -q --disable-pip-version-check --no-build-isolation --no-deps -e .
	touch $@

clean:
	rm -rf $(VENV) .venv-spark-* .java jvm/target $(JAR_DIR) build dist python/*.egg-info
