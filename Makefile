# shardwise: Keras 3.15.1 (JAX) as a patch series. `make help` lists targets.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
TREE ?= fork
CHUNK ?= 1/1
CONFIG ?= jax
MP_SIZE ?= 250
BLOCKS ?= 8
REPEATS ?= 1
SCENARIOS ?=
BASE ?=

.DEFAULT_GOAL := help
.PHONY: help venv tree patches hub-patches check-series api wheel test \
	test-full gate gate-pending \
	compare-full bench multiprocess demo plan lint clean next next-patches \
	next-test device-wheels device-check

help: ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | \
		awk -F':.*## ' '{printf "  make %-14s %s\n", $$1, $$2}'
	@echo "  Variables: TREE=fork|upstream (test, test-full; also"
	@echo "  next|next-upstream for test-full), CHUNK=i/N,"
	@echo "  CONFIG=jax|jax-1|jax-4|jax-nnx|tensorflow|torch|numpy (test-full),"
	@echo "  SIZE=MiB BLOCKS=N REPEATS=N SCENARIOS=a,b BASE=next (bench),"
	@echo "  MP_SIZE=MiB TREE=fork|upstream (multiprocess)"

$(VENV)/.installed: requirements.txt requirements-test.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --no-deps -r requirements-test.txt
	touch $@

venv: $(VENV)/.installed ## Create .venv from the pinned requirements

tree: venv ## Materialize build/keras and build/keras-hub from their series
	$(PY) -m tools.tree
	$(PY) -m tools.hub tree

patches: venv ## Export upstream..HEAD of build/keras into patches/
	$(PY) -m tools.export

hub-patches: venv ## Export upstream..HEAD of build/keras-hub into patches-hub/
	$(PY) -m tools.hub export

check-series: venv ## Each patch in turn, each fix alone (base, master), hub
	$(PY) -m tools.check_series
	$(PY) -m tools.hub check

api: venv ## Regenerate keras/api of build/keras from its `keras_export` calls
	$(PY) -m tools.api_gen build/keras

wheel: venv ## Build the fork's and keras-hub's wheels in dist/, check they install
	$(PY) -m tools.wheel --verify

test: venv ## The test command: upstream suites on 8 devices + our tests
	$(PY) -m tools.suite test --tree $(TREE)

test-full: venv ## One chunk of the whole upstream suite (CHUNK=i/N TREE=... CONFIG=...)
	$(PY) -m tools.suite full --chunk $(CHUNK) --tree $(TREE) --config $(CONFIG)

compare-full: venv ## Diff the fork's full-suite failures against upstream's
	$(PY) -m tools.suite compare

gate: venv ## Every test-full chunk missing or stale, one at a time, then compare-full
	$(PY) -m tools.suite gate

gate-pending: venv ## List the chunks that make gate would run
	$(PY) -m tools.suite pending

# The bench runs from a venv of its own, not the test venv: Matplotlib
# for the chart, setuptools for the fork's wheel. SIZE is passed only when
# given: the runner's default is 250, or 1000 with SCENARIOS=all.
BENCH_VENV := build/bench/venv-runner
BENCH_RUN = $(BENCH_VENV)/bin/python -m benchmarks.run --blocks $(BLOCKS) \
	$(if $(SIZE),--size $(SIZE)) \
	--repeats $(REPEATS) $(if $(BASE),--base $(BASE))

$(BENCH_VENV)/.installed: benchmarks/requirements-runner.txt
	test -x $(BENCH_VENV)/bin/python || $(PYTHON) -m venv $(BENCH_VENV)
	$(BENCH_VENV)/bin/python -m pip install -q --no-deps -r $<
	touch $@

bench: $(BENCH_VENV)/.installed ## The main command: fork vs upstream memory and time, side by side
	$(BENCH_RUN) $(if $(SCENARIOS),--scenarios $(SCENARIOS))

.PHONY: bench-all
bench-all: $(BENCH_VENV)/.installed ## Every scenario, at SIZE=1000 unless given
	$(BENCH_RUN) --scenarios all

multiprocess: tree ## 2 JAX processes x 4 devices: bytes read/held, memory
ifeq ($(TREE),upstream)
	$(PY) -m tools.tree build/keras-upstream --base-only
endif
	$(PY) -m integration_tests.multiprocess --size $(MP_SIZE) \
		$(if $(filter upstream,$(TREE)),--tree build/keras-upstream) \
		build load assign save save_model save_fails bad_shape deferred_load \
		orbax hub_hf

next: venv ## build/keras-next: keras-nightly + patches-next/; status line
	$(PY) -m tools.next tree
	$(PY) -m tools.next status

next-patches: venv ## Export next..HEAD of build/keras-next into patches-next/
	$(PY) -m tools.next export

next-test: venv ## The touched suites on the nightly base vs the nightly fork
	$(PY) -m tools.next test

demo: tree ## Build a sharded model on 8 CPU devices and show its layout
	KERAS_BACKEND=jax XLA_FLAGS=--xla_force_host_platform_device_count=8 \
		PYTHONPATH=build/keras $(PY) -m tools.demo

plan: tree ## Per-device memory plan of Llama-3-8B/70B, Gemma-7B on 8 devices
	KERAS_BACKEND=jax XLA_FLAGS=--xla_force_host_platform_device_count=8 \
		PYTHONPATH=build/keras $(PY) -m tools.plan

device-wheels: tree ## Wheels and both trees for an accelerator run, in build/device/
	$(PY) -m tools.tree build/keras-upstream --base-only
	$(PY) -m tools.device

device-check: tree ## Load, init and tests on one device: table + JSON
	$(PY) -m tools.tree build/keras-upstream --base-only
	$(PY) -m benchmarks.device_check --upstream build/keras-upstream \
		--fork build/keras --out benchmarks/results/device-check.json

lint: venv ## ruff on the project's own code
	$(PY) -m ruff check tools integration_tests benchmarks hub
	$(PY) -m ruff format --check tools integration_tests benchmarks hub

clean: ## Remove dist/ and scratch trees (keeps build/keras and its commits)
	rm -rf dist build/check-series build/check-series-next \
		build/check-series-hub build/keras-upstream
