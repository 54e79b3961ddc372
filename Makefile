# `make demo` and `make test` work on a fresh machine: they create .venv when it is missing.
PYTHON ?= python3
VENV := .venv
# make demo's stamp: the converter and what it needs at run time (requirements.txt).
INSTALLED := $(VENV)/.installed
# make test's: the tests' own packages too (tests/requirements.txt), installed after those.
TEST_INSTALLED := $(VENV)/.test-installed

BENCH_INSTALLED := $(VENV)/.bench-installed
# Airflow has its own venv: its Google provider needs google-api-python-client >= 2.194,
# tf.Transform's tfx-bsl < 2. Its DAGs run the pipeline with $(VENV)'s interpreter.
AIRFLOW_VENV := .venv-airflow
AIRFLOW_INSTALLED := $(AIRFLOW_VENV)/.installed

# The documentation site (mkdocs.yml, docs/) has its own venv, from docs/requirements.txt.
DOCS_VENV := .venv-docs
DOCS_INSTALLED := $(DOCS_VENV)/.installed

.PHONY: demo test test-fast compat compat-test guard lint bench clean job-servers airflow docs \
	docs-serve

# The pinned sets are installed by uv (into venvs made by Python's venv, so pip is there
# too): the same pins as pip installs, downloaded in parallel: the converter's set in about
# 30 s where pip takes 2 minutes on a quiet machine (it caches nothing from this index) and
# 8 on a busy one. uv shows its progress on a terminal; the time and size are the README's.
UV_PIN := uv==0.13.8
UV := $(VENV)/bin/uv
# Every install compiles its bytecode (uv does not by default): where Python may not write
# it (PYTHONDONTWRITEBYTECODE=1, set by many Docker images and CI machines) every process
# would otherwise compile Beam and TensorFlow again, ~7 s each (bench/RESULTS.md, issue 53).
UV_INSTALL = $(UV) pip install --compile-bytecode

$(UV):
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check $(UV_PIN)

$(INSTALLED): requirements.txt setup.py pyproject.toml | $(UV)
	@echo "Installing the converter's pinned packages (requirements.txt) into $(VENV): about 1 GB" \
		"to download, 3 GB installed; under a minute on a quiet machine"
	$(UV_INSTALL) --python $(VENV)/bin/python -r requirements.txt
	$(VENV)/bin/pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e .
	$(VENV)/bin/python -m compileall -q -j 0 core pipeline transforms image_tfrecords
	touch $@

$(TEST_INSTALLED): $(INSTALLED) tests/requirements.txt
	@echo "Installing the tests' own packages (tests/requirements.txt) into $(VENV)"
	$(UV_INSTALL) --python $(VENV)/bin/python -r tests/requirements.txt
	touch $@

# The sample set has broken rows on purpose (see sample_data/README.md), hence the
# higher error threshold.
demo: $(INSTALLED)
	$(VENV)/bin/image-tfrecords convert --manifest sample_data/manifest.csv \
		--output_dir demo-output --overwrite --max_error_fraction 0.25

$(AIRFLOW_INSTALLED): templates/airflow/requirements.txt | $(UV)
	test -x $(AIRFLOW_VENV)/bin/python || $(PYTHON) -m venv $(AIRFLOW_VENV)
	$(UV_INSTALL) --python $(AIRFLOW_VENV)/bin/python -r templates/airflow/requirements.txt
	touch $@

# The Beam DAG (templates/airflow/) run once by hand, as tests/test_airflow.py runs it: the
# sample set into airflow-output/<date>/, Airflow's own files in .airflow-home/.
AIRFLOW_DATE ?= $(shell date +%Y-%m-%d)
AIRFLOW_ENV := AIRFLOW_HOME=$(CURDIR)/.airflow-home \
	AIRFLOW__CORE__DAGS_FOLDER=$(CURDIR)/templates/airflow AIRFLOW__CORE__LOAD_EXAMPLES=False \
	IMAGE_TFRECORDS_PYTHON=$(CURDIR)/$(VENV)/bin/python

airflow: $(INSTALLED) $(AIRFLOW_INSTALLED)
	$(AIRFLOW_ENV) $(AIRFLOW_VENV)/bin/airflow db migrate
	$(AIRFLOW_ENV) $(AIRFLOW_VENV)/bin/airflow dags test image_tfrecords_beam $(AIRFLOW_DATE) \
		-c '{"max_error_fraction": 0.25}'

# Beam's Flink and Spark job servers, from Maven Central (job_servers/pom.xml says which
# and why): FlinkRunner and SparkRunner runs are handed these jars by path
# (pipeline/engines.py), so none depends on the download Beam would make at run time.
JOB_SERVER_JARS := job_servers/flink/target/beam-flink-1.19-job-server.jar \
	job_servers/spark/target/beam-spark-3-job-server.jar

$(JOB_SERVER_JARS) &: job_servers/pom.xml job_servers/flink/pom.xml job_servers/spark/pom.xml \
		job_servers/java/imagetfrecords/NoJarsToStage.java
	mvn --batch-mode --quiet --file job_servers/pom.xml package
	touch $(JOB_SERVER_JARS)

job-servers: $(JOB_SERVER_JARS)

# Hadoop's MiniDFSCluster, for the tests that run the job against HDFS (tests/hdfs_cluster/).
HDFS_CLUSTER_JAR := tests/hdfs_cluster/target/hdfs-minicluster.jar

$(HDFS_CLUSTER_JAR): tests/hdfs_cluster/pom.xml tests/hdfs_cluster/src/main/java/HdfsMiniCluster.java
	mvn --batch-mode --quiet --file tests/hdfs_cluster/pom.xml package
	touch $@

# A Flink 1.19 installation's lib/, laid out as the distribution's, for the tests that run
# the job on a real session cluster (tests/flink_cluster/, started by tests/clusters.py).
FLINK_CLUSTER_JAR := tests/flink_cluster/target/flink/lib/flink-dist-1.19.0.jar

$(FLINK_CLUSTER_JAR): tests/flink_cluster/pom.xml
	mvn --batch-mode --quiet --file tests/flink_cluster/pom.xml package
	touch $@

# A Spark 3.5.0 standalone cluster's jars, for the tests that run the job on a real cluster
# (tests/spark_cluster/, started by tests/clusters.py).
SPARK_CLUSTER_JAR := tests/spark_cluster/target/spark-cluster.jar

$(SPARK_CLUSTER_JAR): tests/spark_cluster/pom.xml
	mvn --batch-mode --quiet --file tests/spark_cluster/pom.xml package
	touch $@

# The report tests render report.html in Debian's headless Chromium.
CHROMIUM := /usr/bin/chromium
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)

$(CHROMIUM):
	$(SUDO) apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends chromium

$(DOCS_INSTALLED): docs/requirements.txt | $(UV)
	test -x $(DOCS_VENV)/bin/python || $(PYTHON) -m venv $(DOCS_VENV)
	$(UV_INSTALL) --python $(DOCS_VENV)/bin/python -r docs/requirements.txt
	touch $@

# The site, built strictly (a warning, such as a broken link or anchor, is an error) into
# site/. The reference pages are committed: docs/gen_reference.py rewrites them, and
# tests/test_docs.py fails when they differ from the code.
docs: $(DOCS_INSTALLED)
	NO_MKDOCS_2_WARNING=1 $(DOCS_VENV)/bin/mkdocs build --strict --site-dir site

# The site on http://127.0.0.1:8000/, rebuilt on every change.
docs-serve: $(DOCS_INSTALLED)
	NO_MKDOCS_2_WARNING=1 $(DOCS_VENV)/bin/mkdocs serve --dev-addr 127.0.0.1:8000

# ruff's rules and its formatter (pyproject.toml), in seconds: `make test` runs it first.
lint: $(TEST_INSTALLED)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

TEST_NEEDS := $(TEST_INSTALLED) $(AIRFLOW_INSTALLED) $(DOCS_INSTALLED) $(CHROMIUM) \
	$(JOB_SERVER_JARS) $(HDFS_CLUSTER_JAR) $(FLINK_CLUSTER_JAR) $(SPARK_CLUSTER_JAR)

# Every test (what CI runs), in two processes, each taking a test file at a time (so a
# file's cluster or server starts once): many tests wait on a subprocess's imports, a JVM
# or a storage server's retries, and the other process uses the core meanwhile (a file
# set that takes 370 s in one process took 257 s in two, on 2 cores). Each test's time
# goes to .test-durations.json, from which the fast tier is chosen (tests/tiers.py).
PYTEST_PROCESSES := -n 2 --dist loadfile

test: lint $(TEST_NEEDS)
	$(VENV)/bin/python -m pytest tests $(PYTEST_PROCESSES) --record-durations .test-durations.json

# The fast tier, for every commit: each module's unit tests and an end-to-end conversion
# per input family, in a few minutes (tests/tiers.py says how it is chosen).
test-fast: lint $(TEST_NEEDS)
	$(VENV)/bin/python -m pytest -m fast tests $(PYTEST_PROCESSES)

# The compatibility tier (CI runs it after `make test`): what setup.py admits, as a user's
# `pip install .` gets it with no constraints file, in three fresh venvs under
# .venv-compat/: Python 3.11 and 3.13 (pyenv's) with the newest versions that day, and
# Python 3.11 with the oldest Beam setup.py admits (its floor, read from setup.py).
# tests/compat/venvs.py builds them anew on every run, at once (uv resolves as pip does:
# the newest version of each package that fits; each venv's versions are recorded in
# .venv-compat/NAME/versions.json and printed); tests/compat/test_compat.py then runs each
# venv's `image-tfrecords` from outside the checkout: the sample job against the pinned
# set's bytes, a VOC export from S3 to HDFS read back with TFDS, Flink and Spark. About
# 5 minutes on 2 cores (docs/development.md). `make compat-test` runs the tests again on
# the venvs as they are.
COMPAT_NEEDS := $(TEST_INSTALLED) $(JOB_SERVER_JARS) $(HDFS_CLUSTER_JAR)
# Two processes, as `make test`: the runs wait on JVMs, servers and imports. The runs
# both compare with are made once (tests/compat/test_compat.py's shared_run), and each
# process takes whole scopes (the S3 and HDFS tests' class: one process starts the servers).
COMPAT_TESTS := $(VENV)/bin/python -m pytest tests/compat -n 2 --dist loadscope

compat: $(COMPAT_NEEDS)
	$(VENV)/bin/python tests/compat/venvs.py
	$(COMPAT_TESTS)

compat-test: $(COMPAT_NEEDS)
	$(COMPAT_TESTS)

# The guard against a slowdown: ours beside the one-loop script on 100 and 5,000 photos,
# failing on a ratio (bench/guard.py); about two minutes. CI runs it after the tests.
guard: $(BENCH_INSTALLED)
	$(VENV)/bin/python bench/guard.py

$(BENCH_INSTALLED): $(TEST_INSTALLED) bench/requirements.txt
	$(UV_INSTALL) --python $(VENV)/bin/python -r bench/requirements.txt
	touch $@

# Ours against bench/handwritten.py and bench/process_pool.py, side by side, and ours at 1
# and 2 worker processes: see bench/RESULTS.md (about 30 minutes).
bench: $(BENCH_INSTALLED)
	$(VENV)/bin/python bench/write_bench.py --ours_worker_processes 1 2 --json bench/results.json

clean:
	rm -rf $(VENV) $(AIRFLOW_VENV) $(DOCS_VENV) site ./*-output .airflow-home *.egg-info \
		.venv-compat .test-durations.json \
		job_servers/*/target \
		tests/hdfs_cluster/target tests/flink_cluster/target tests/spark_cluster/target
