# gpu-stack: the two commands a newcomer needs are `make plan` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STACK  ?= dev
STAMP  := $(VENV)/.installed
# a network namespace with only loopback (root: a new one; otherwise inside a user namespace)
NETNS  := $(if $(filter 0,$(shell id -u)),unshare --net,unshare --map-root-user --net)

.PHONY: plan plan-json reference reference-if-possible test test-unit test-quick golden e2e e2e-tools sandbox sandbox-down docs lint bench bench-engine state-size gpu-check gpu-validate gpu-sharing-bench gpu-node-check nvidia-tools clean

$(STAMP): requirements.txt requirements-dev.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements.txt -r requirements-dev.txt
	touch $(STAMP)

## plan: the offline plan of a stack (default dev): no Pulumi CLI, cluster or credentials
# The object view renders the chart of the reference folder (`make reference`) where it is there,
# checked by sha256 (gpu_stack/offline/chart_files.py reference_chart), else its own pulled copy.
plan: $(STAMP)
	$(PY) -m gpu_stack plan --stack $(STACK)

plan-json: $(STAMP)
	$(PY) -m gpu_stack plan --stack $(STACK) --format json

## reference: the pinned GPU Operator chart v25.10.1 (with its values, CRDs, NVIDIA's default configs), the
##   Prometheus Operator CRDs and the two sources the toolchain builds (pulumi's Python language host,
##   the command provider) into $GPU_STACK_REFERENCE (default ~/.cache/gpu-stack/reference), each file
##   checked by sha256 against toolchain/reference.sha256: from ../shared/reference where there is one,
##   else pulled (Helm's pull of the chart from NVIDIA's chart repository, the rest from upstream at
##   its tag); a wrong sum installs nothing
reference: $(STAMP)
	$(PY) -m sandbox.reference fetch

# Before the tests and the toolchain: the reference data where it can be had; where it cannot (no
# network), the tests that need it skip naming `make reference`, and under CI=true this fails.
reference-if-possible: $(STAMP)
	$(PY) -m sandbox.reference fetch || test "$$CI" != true

## test: the whole test suite: the end-to-end tests (real Pulumi CLI and provider, real API server,
##   simulated GPU nodes; they skip with one line saying how to build the toolchain where it is
##   missing, and must run under CI=true) and, beside them, the unit and integration tiers on two
##   workers: the end-to-end tier waits on its clusters much of its time, and the other tiers use it.
##   Their output follows the end-to-end tier's; `make test-unit` and `make e2e` run one tier alone.
test: $(STAMP) reference-if-possible
	@$(MAKE) --no-print-directory test-unit UNIT_WORKERS=2 > $(VENV)/test-unit.log 2>&1 & unit=$$!; \
	$(MAKE) --no-print-directory e2e; e2e=$$?; \
	wait $$unit; unit=$$?; \
	echo "== the unit and integration tiers (run beside the end-to-end tier):"; cat $(VENV)/test-unit.log; \
	echo "== end-to-end tier: exit $$e2e; unit and integration tiers: exit $$unit"; \
	test $$e2e = 0 && test $$unit = 0

UNIT_WORKERS ?= 4
test-unit: $(STAMP) reference-if-possible
	$(PY) -m pytest -q -n auto --maxprocesses $(UNIT_WORKERS) --ignore=tests/e2e

## e2e: the end-to-end tests alone, in a network namespace of their own with only loopback up
e2e: $(STAMP) reference-if-possible
	$(NETNS) sh -c 'ip link set lo up && exec $(PY) -m pytest -q -rs tests/e2e'

## e2e-tools: build the end-to-end toolchain from Go modules at the pins of toolchain/versions.env
##   (Pulumi CLI, kubernetes provider, kube-apiserver/controller-manager/scheduler, kubectl, etcd,
##   kwok, NVIDIA's nvidia-ctk, nvidia-mig-parted, device plugin) into ~/.cache/gpu-stack/tools
e2e-tools: reference-if-possible
	bash toolchain/build.sh

## sandbox: a simulated cluster for STACK in the background; prints the lines to use pulumi with it
##   (FLEET=1: one per stack of fleet.yaml, one project and backend, for `python -m gpu_stack fleet up`)
sandbox: $(STAMP)
	$(PY) -m sandbox up $(if $(FLEET),--fleet,--stack $(STACK))

sandbox-down: $(STAMP)
	$(PY) -m sandbox down $(if $(FLEET),--fleet,--stack $(STACK))

## test-quick: the quick tier only (pure tests on the design, a few end-to-end plans)
test-quick: $(STAMP) reference-if-possible
	$(PY) -m pytest -q -m "not slow" --ignore=tests/e2e

## golden: rewrite tests/golden/ (the plan and diff text of the committed stacks) after a change meant
##   to alter a plan; review their diff before committing
golden: $(STAMP)
	GPU_STACK_UPDATE_GOLDEN=1 $(PY) -m pytest -q -n 0 tests/cli/test_golden.py

## docs: regenerate the generated docs: docs/configuration.md and docs/stack-config.schema.json (from the
##   settings models), docs/plan.schema.json (from the plan document); tests fail when they are stale
docs: $(STAMP)
	$(PY) -m gpu_stack.design.docs
	$(PY) -m gpu_stack.offline.plan

## lint: shellcheck every shell script the stack ships (node preparation, validation payloads, MIG and DRA rollouts),
##   ruff and mypy over the Python (pyproject.toml: the rules, and mypy strict on config/ and design/)
lint: $(STAMP)
	$(VENV)/bin/shellcheck -x -S warning config/node-scripts/*.sh config/validation/*.sh config/mig-rollout/*.sh config/dra-rollout/*.sh
	for f in $$(grep -l '^# shellcheck shell=busybox' config/validation/*.sh config/mig-rollout/*.sh config/dra-rollout/*.sh); do busybox sh -n "$$f" || exit 1; done
	$(VENV)/bin/ruff check --no-fix .
	$(VENV)/bin/mypy

## bench: offline plan of 1..1000 synthetic GPU nodes vs a bare-SDK floor (wall time, peak RSS)
bench: $(STAMP)
	$(PY) bench/plan_scaling.py

## state-size: the Pulumi state one node costs, estimated offline from the plan (BENCHMARKS.md)
state-size: $(STAMP)
	$(PY) bench/state_size.py

## nvidia-tools: build NVIDIA's binaries the tests run (nvidia-ctk, nvidia-container-runtime and its hook,
##   nvidia-mig-parted) from their Go modules at the chart's pins, cached by version (toolchain/build.sh);
##   without them those tests skip, under CI=true they fail; a subset of e2e-tools
nvidia-tools:
	bash toolchain/build.sh nvidia-ctk mig-parted

## gpu-check: read-only node preflight on this machine (driver, GPUs, MIG, runtime; changes nothing)
##   optional: GPU_STACK_EXPECT_COUNT=8 GPU_STACK_EXPECT_NAMES=H100 GPU_STACK_RUNTIME=containerd make gpu-check
gpu-check:
	GPU_STACK_PHASES=preflight bash config/node-scripts/node-prep.sh

## gpu-validate: the validation payloads that need no Kubernetes, on this machine's GPU(s):
##   GPU listing and UUIDs, vectorAdd built with nvcc, SHARERS processes sharing one GPU at once
##   optional: GPUS=1 SHARERS=4 make gpu-validate
gpu-validate:
	bash config/validation/gpu-local.sh

## gpu-node-check: the node script, containerd and GPU containers for real on this GPU machine (root; it
##   installs packages and rewrites /etc/containerd: a machine for testing; docs/node-preparation.md,
##   "One real GPU node"): bundles Debian's containerd and runc (apt-get download, or DEBS=<folder of
##   .debs>; containerd 1.7+ for CDI), the toolchain's toolkit binaries and crictl (make e2e-tools, then
##   bash sandbox/gpu_node_check/build-node-tools.sh), runs the stack's node command twice and CUDA,
##   no-GPU and isolation containers through containerd's CRI; STAGES=...,kubelet adds the kubelet stage
##   optional: DEBS=/tmp/debs ALT_DEBS=/tmp/alt STAGES=machine,install,containerd,node OUT=/tmp/check
GPU_NODE_CHECK_SUDO := $(if $(filter 0,$(shell id -u)),,sudo)
gpu-node-check: $(STAMP)
	$(PY) -m sandbox.gpu_node_check.bundle .gpu-node-check $(if $(DEBS),--debs $(DEBS)) $(if $(ALT_DEBS),--alt-debs $(ALT_DEBS)) $(if $(findstring kubelet,$(STAGES)),,--no-kube)
	$(GPU_NODE_CHECK_SUDO) python3 -m sandbox.gpu_node_check.run --bundle .gpu-node-check --out $(or $(OUT),.gpu-node-check/out) $(if $(STAGES),--stages $(STAGES))

## bench-engine: the real engine at 10, 100, 1000 simulated nodes: `pulumi preview` against a bare
##   program with the same resources, and the state per node after `up` (needs make e2e-tools)
bench-engine: $(STAMP)
	$(NETNS) sh -c 'ip link set lo up && exec $(PY) bench/engine_scaling.py'

## gpu-sharing-bench: what time-slicing and MPS cost on this machine's GPU 0 (as root: MPS is
##   started the way the device plugin starts it); feed the log to `python -m gpu_stack advise`
##   optional: RUNS="time-slicing:8:1,2,4,8 mps:4:1,2,4" SECONDS_PER_WINDOW=10 MEMORY_REPLICAS=4 make gpu-sharing-bench
gpu-sharing-bench:
	bash config/validation/sharing-bench-local.sh

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis .sandbox .mypy_cache .ruff_cache
