# Every target creates and uses the project's own venv (.venv); nothing is assumed installed.
# Every target takes PROTOCOL=, RESULTS= (default: results/ under the project root) and DEVICE=.
PROTOCOL ?= main
ARM ?= A
SEED ?= 1
DEVICE ?= cpu
RESULTS ?=
PY ?= python3
VENV := .venv
PYTHON := $(VENV)/bin/python
STAMP := $(VENV)/.installed
COMMON = --protocol $(PROTOCOL) --device $(DEVICE) $(if $(RESULTS),--results-dir $(RESULTS),)
# make experiment without PROTOCOL= is the verdict about the recipe (protocols/recipe: every registered base, the
# sequential plan); every other target's default is main, the one-base protocol (make experiment PROTOCOL=main runs it)
EXPERIMENT_PROTOCOL = $(if $(filter command line environment,$(origin PROTOCOL)),$(PROTOCOL),recipe)
# pilot, freeze, experiment take JOBS=: arm x seed runs at once (default: one per core on CPU, one on a GPU)
JOBS_ARG = $(if $(JOBS),--jobs $(JOBS),)

.PHONY: setup test check-long bench pilot freeze run runs readout archive audit replicate deviation experiment fingerprint profile gpu-check wheels ui conformance

setup: $(STAMP)

$(STAMP): pyproject.toml
	@$(PY) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python 3.11 or newer is needed: make PY=python3.11 ...")'
	test -x $(PYTHON) || $(PY) -m venv $(VENV)
	$(PYTHON) -m pip install -q --upgrade pip
	$(PYTHON) -m pip install -q -e '.[dev]'
	touch $(STAMP)

test: $(STAMP)
	$(PYTHON) -m pytest -q -n auto --dist loadfile --durations=15

check-long: $(STAMP)
	$(PYTHON) -m pytest -q -n auto -m long

# tools beside the library (tools/, benchmarks/): run from the repository root, never hashed by the lock
bench: $(STAMP)
	$(PYTHON) -m benchmarks.run_all

pilot: $(STAMP)
	$(PYTHON) -m harness pilot $(COMMON) $(JOBS_ARG)

freeze: $(STAMP)
	$(PYTHON) -m harness freeze $(COMMON) $(JOBS_ARG)

run: $(STAMP)
	$(PYTHON) -m harness run protocol=$(PROTOCOL) arm=$(ARM) seed=$(SEED) device=$(DEVICE) $(if $(RESULTS),results_dir=$(RESULTS),)

runs: $(STAMP)
	$(PYTHON) -m harness runs $(COMMON)

readout: $(STAMP)
	$(PYTHON) -m harness readout $(COMMON)

archive: $(STAMP)
	$(PYTHON) -m harness archive $(COMMON) $(if $(WITH_CHECKPOINTS),--with-checkpoints,)

audit: $(STAMP)
	$(PYTHON) -m harness audit $(COMMON) $(if $(ARCHIVE),--archive $(ARCHIVE),) $(if $(TRUST_FAMILY_MODULES),--trust-family-modules,)

# re-run one sealed run (from ROUND= on) from the frozen inputs and compare: prints identical, or the first difference;
# a protocol about the recipe names the run's base: make replicate PROTOCOL=recipe BASE=2 ARM=B SEED=1
replicate: $(STAMP)
	$(PYTHON) -m harness replicate $(COMMON) --arm $(ARM) --seed $(SEED) $(if $(ROUND),--round $(ROUND),) $(if $(BASE),--base $(BASE),)

# after freeze, before the readout: make deviation WHAT='...' WHY='...' WHO='...' OUTCOME_SEEN=no
deviation: $(STAMP)
	$(PYTHON) -m harness deviation $(COMMON) --what "$(WHAT)" --why "$(WHY)" --who "$(WHO)" --outcome-seen "$(OUTCOME_SEEN)"

# the task-family conformance suite alone: make conformance FAMILY=<name> [PROTOCOL=<protocol>] (without PROTOCOL:
# the family's defaults at a small protocol's sizes); freeze runs it on the protocol's family before drawing
conformance: $(STAMP)
	$(PYTHON) -m harness conformance --family $(FAMILY) $(if $(filter command line,$(origin PROTOCOL)),--protocol $(PROTOCOL),)

experiment: $(STAMP)
	$(PYTHON) -m harness experiment $(subst --protocol $(PROTOCOL),--protocol $(EXPERIMENT_PROTOCOL),$(COMMON)) $(JOBS_ARG)

# this host's numerics fingerprint for PROTOCOL, against the protocol's sized_on_numerics.json and docs/reproducibility.md
fingerprint: $(STAMP)
	$(PYTHON) -m tools.fingerprint --protocol $(PROTOCOL) $(if $(MKL_CBWR),--mkl-cbwr $(MKL_CBWR),)

profile: $(STAMP)
	$(PYTHON) -m tools.profile --protocol $(PROTOCOL) --arm $(ARM) $(if $(RESULTS),--results-dir $(RESULTS),) --device $(DEVICE)

# the GPU machine has no registry and its own python3 + torch: no venv, only carried wheels (make wheels)
GPU_PY ?= python3
gpu-check:
	PY=$(GPU_PY) bash tools/gpu_check.sh $(GPU_CHECK_ARGS)

wheels:
	REQUIREMENTS=$(REQUIREMENTS) bash tools/make_wheels.sh

# the MLflow UI on the results folder's store and its artifacts (mlartifacts/, which the store's locations are
# relative to), opening in MLflow's model-training view (harness.running.mlflow_ui); PORT= (default 5000), on
# loopback; read-only (no upload, no write through the API) unless UI_WRITABLE=1
UI_DIR = $(if $(RESULTS),$(abspath $(RESULTS)),$(CURDIR)/results)
ui: export HARNESS_UI_WRITABLE = $(if $(filter 1,$(UI_WRITABLE)),1,0)
ui: export MLFLOW_DISABLE_TELEMETRY = true
ui: $(STAMP)
	$(VENV)/bin/mlflow ui --app-name harness --backend-store-uri sqlite:///$(UI_DIR)/mlflow.db \
		--artifacts-destination $(UI_DIR)/mlartifacts $(if $(PORT),--port $(PORT),)
