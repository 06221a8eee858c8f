# gpu-stack: the two commands a newcomer needs are `make plan` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STACK  ?= dev
STAMP  := $(VENV)/.installed

.PHONY: plan plan-json test test-quick docs lint bench state-size gpu-check gpu-validate clean

$(STAMP): requirements.txt requirements-dev.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements.txt -r requirements-dev.txt
	touch $(STAMP)

## plan: the offline plan of a stack (default dev): no Pulumi CLI, cluster or credentials
plan: $(STAMP)
	$(PY) -m gpu_stack plan --stack $(STACK)

plan-json: $(STAMP)
	$(PY) -m gpu_stack plan --stack $(STACK) --format json

## test: the whole test suite (both tiers, in parallel on up to 4 cores)
test: $(STAMP)
	$(PY) -m pytest -q -n auto --maxprocesses 4

## test-quick: the quick tier only (pure tests on the design, a few end-to-end plans)
test-quick: $(STAMP)
	$(PY) -m pytest -q -m "not slow"

## docs: regenerate the generated docs: docs/configuration.md and docs/stack-config.schema.json (from the
##   settings models), docs/plan.schema.json (from the plan document); tests fail when they are stale
docs: $(STAMP)
	$(PY) -m gpu_stack.config_docs
	$(PY) -m gpu_stack.offline.plan

## lint: shellcheck every shell script the stack ships (node preparation, validation payloads, MIG rollout)
lint: $(STAMP)
	$(VENV)/bin/shellcheck -S warning config/node-scripts/*.sh config/validation/*.sh config/mig-rollout/*.sh

## bench: offline plan of 1..1000 synthetic GPU nodes vs a bare-SDK floor (wall time, peak RSS)
bench: $(STAMP)
	$(PY) bench/plan_scaling.py

## state-size: the Pulumi state one node costs, estimated offline from the plan (BENCHMARKS.md)
state-size: $(STAMP)
	$(PY) bench/state_size.py

## gpu-check: read-only node preflight on this machine (driver, GPUs, MIG, runtime; changes nothing)
##   optional: GPU_STACK_EXPECT_COUNT=8 GPU_STACK_EXPECT_NAMES=H100 GPU_STACK_RUNTIME=containerd make gpu-check
gpu-check:
	GPU_STACK_PHASES=preflight bash config/node-scripts/node-prep.sh

## gpu-validate: the validation payloads that need no Kubernetes, on this machine's GPU(s):
##   GPU listing and UUIDs, vectorAdd built with nvcc, SHARERS processes sharing one GPU at once
##   optional: GPUS=1 SHARERS=4 make gpu-validate
gpu-validate:
	bash config/validation/gpu-local.sh

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
