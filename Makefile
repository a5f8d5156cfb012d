# One entry point for people and CI. Every target creates .venv/ from the lock file when missing.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
STATE ?= examples/cluster
HOST ?= 127.0.0.1
PORT ?= 8888

.PHONY: run test lint unit known-fields e2e e2e-bin e2e-up e2e-down simulate bench bench-cel bench-cli bench-frag bench-k8s bench-placement chaos chaos-e2e lock clean oracle-bin oracle upstream-table kustomize-bin helm-bin manifests loadtest

# The upstream allocator as a test oracle (tests/oracle, Go): built into .cache/ (git-ignored) when go is on
# PATH and its sources changed; without go the differential tests skip.
GO := $(shell command -v go 2>/dev/null)
ORACLE := .cache/oracle/oracle
ORACLE_SRC := $(wildcard tests/oracle/*.go) tests/oracle/go.mod tests/oracle/go.sum
# Upstream's DRA CEL environment alone (compile + evaluate one selector on one device), for the CEL
# conformance battery (tests/allocator/test_cel_conformance.py).
CEL_ORACLE := .cache/oracle/celoracle
CEL_ORACLE_SRC := $(wildcard tests/oracle/celoracle/*.go) tests/oracle/go.mod tests/oracle/go.sum
# Upstream's own allocator table, exported as oracle states (tests/oracle/upstreamtable: the module copied
# from the Go module cache into .cache/ with our exporter added; nothing of upstream is committed).
UPSTREAM_TABLE := .cache/upstream-table/cases.jsonl
UPSTREAM_TABLE_SRC := $(wildcard tests/oracle/upstreamtable/*) tests/oracle/go.mod tests/oracle/go.sum
# kustomize, to render manifests/ and its overlays in the tests: built from its Go module into .cache/ when
# go is on PATH (about a minute, once); without go the tests use `kubectl kustomize`, or skip.
KUSTOMIZE_VERSION := v5.7.1
KUSTOMIZE := .cache/kustomize-$(KUSTOMIZE_VERSION)/kustomize
# helm, to lint and render charts/dra-extender (the source of manifests/) in the tests: built the same way
# (a few minutes, once); without go the chart tests skip. e2e/chart.py names the same version.
HELM_VERSION := v4.3.2
HELM := .cache/helm-$(HELM_VERSION)/helm
N ?= 100000
SEED ?= 0
JOBS ?= 2

$(STAMP): pyproject.toml requirements.lock
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements.lock
	$(BIN)/python -m pip install --quiet --no-deps -e .
	touch $(STAMP)

run: $(STAMP)
	@echo "dra-extender: starting on $(STATE); in another shell try the requests in examples/requests/ (docs/getting-started.md)"
	$(BIN)/dra-extender serve --state $(STATE) --host $(HOST) --port $(PORT)

lint: $(STAMP)
	$(BIN)/ruff check app allocator tests bench loadtests e2e
	$(BIN)/ruff format --check app allocator tests bench loadtests e2e
	$(BIN)/lint-imports --no-cache
	$(BIN)/mypy

unit: $(STAMP) oracle-bin upstream-table kustomize-bin helm-bin
	$(BIN)/python -m pytest -q

$(ORACLE): $(ORACLE_SRC)
	cd tests/oracle && go build -o ../../$(ORACLE) .

$(CEL_ORACLE): $(CEL_ORACLE_SRC)
	cd tests/oracle && go build -o ../../$(CEL_ORACLE) ./celoracle

ifneq ($(GO),)
oracle-bin: $(ORACLE) $(CEL_ORACLE)
else
oracle-bin:
	@echo "go not on PATH: the differential tests against the upstream allocator will skip"
endif

$(UPSTREAM_TABLE): $(UPSTREAM_TABLE_SRC)
	bash tests/oracle/upstreamtable/export.sh $@

ifneq ($(GO),)
upstream-table: $(UPSTREAM_TABLE)
else
upstream-table:
	@echo "go not on PATH: the tests on upstream's allocator table will skip"
endif

ifneq ($(GO),)
kustomize-bin: $(KUSTOMIZE)
else
kustomize-bin:
	@echo "go not on PATH: the manifest tests render with kubectl kustomize, or skip"
endif

$(KUSTOMIZE):
	GOBIN=$(CURDIR)/$(dir $(KUSTOMIZE)) go install sigs.k8s.io/kustomize/kustomize/v5@$(KUSTOMIZE_VERSION)

ifneq ($(GO),)
helm-bin: $(HELM)
else
helm-bin:
	@echo "go not on PATH: the Helm chart tests will skip"
endif

$(HELM):
	GOBIN=$(CURDIR)/$(dir $(HELM)) go install helm.sh/helm/v4/cmd/helm@$(HELM_VERSION)

# manifests/base and manifests/components/monitoring are charts/dra-extender rendered (e2e/chart.py);
# a test fails when they differ from the chart.
manifests: $(STAMP) helm-bin
	$(BIN)/python -m e2e.chart

# A long differential run against the upstream allocator: prints feature coverage, outcome kinds and
# disagreements.
oracle: $(STAMP) oracle-bin
	$(BIN)/python -m tests.oracle.run --states $(N) --seed $(SEED) --jobs $(JOBS)

test: lint unit

# Second tier: etcd, kube-apiserver, kube-controller-manager and kube-scheduler built from their Go modules
# (e2e/build.sh, cached in .cache/), the extender and kube-scheduler run with the shipped manifests/.
e2e-bin:
	@bash e2e/build.sh >/dev/null

e2e: $(STAMP) e2e-bin
	$(BIN)/python -m pytest -m e2e -p no:cacheprovider tests/e2e $(E2E_ARGS)

# The same control plane for trying things by hand (stops by itself after 2 hours).
e2e-up: $(STAMP) e2e-bin
	$(BIN)/python -m e2e.launcher up

e2e-down: $(STAMP)
	$(BIN)/python -m e2e.launcher down

# Cluster-scale benchmark against the parse-and-echo floor (a script, not tests): prints one table.
bench: $(STAMP)
	$(BIN)/python -m bench.bench $(BENCH_ARGS)

# CEL: us per evaluation (cold/warm) on each engine, and one filter at 5000 nodes x 8 devices; prints tables.
bench-cel: $(STAMP)
	$(BIN)/python -m bench.bench_cel $(BENCH_CEL_ARGS)

# The operator tools at scale: explain of one pod and simulate of every pending pod on a synthetic state
# (default 5000 nodes x 8 GPUs, 10,000 pods; BENCH_CLI_ARGS="--nodes 1000 --pods 1000" for a quick run).
bench-cli: $(STAMP)
	$(BIN)/python -m bench.bench_cli $(BENCH_CLI_ARGS)

# Device selection aligned vs first-fit: do later NUMA- / PCIe-aligned pods still fit? Prints one table.
bench-frag: $(STAMP)
	$(BIN)/python -m bench.fragmentation $(BENCH_FRAG_ARGS)

# kube-scheduler v1.37.2 with its in-tree DynamicResources plugin vs with the extender, on the e2e control
# plane: pods/s and per-pod latency (BENCH_K8S_ARGS="--nodes 5000" for the large run; "--modes
# in-tree,extender,null" adds the ceiling, bench/nullextender built with go). Prints one table per API budget.
bench-k8s: $(STAMP) e2e-bin
	$(BIN)/python -m bench.bench_k8s $(BENCH_K8S_ARGS)

# Placement quality on the same control plane: extender vs the in-tree plugin, one seeded churn workload on
# 8-GPU nodes with NUMA / PCIe topology, then a wave of large pods (docs/performance.md).
bench-placement: $(STAMP) e2e-bin
	$(BIN)/python -m bench.bench_placement $(BENCH_PLACEMENT_ARGS)

# Concurrent binds with retries under faults against the fake API server (loopback, stops by itself):
# prints a JSON report; exit 1 on a double allocation or an orphan.
chaos: $(STAMP)
	$(BIN)/python -m loadtests.chaos $(CHAOS_ARGS)

# The same against the e2e control plane (kube-apiserver restarts, a proxy's faults; needs Go, as make e2e).
chaos-e2e: $(STAMP) e2e-bin
	$(BIN)/python -m loadtests.chaos --e2e $(CHAOS_ARGS)

# Load test: locust in its own environment (.cache/loadtest-venv, from loadtests/requirements.lock: it patches
# the standard library on import), against the synthetic-cluster extender it starts on a free loopback port.
LOADTEST_VENV := .cache/loadtest-venv
LOADTEST_STAMP := $(LOADTEST_VENV)/.installed
LOADTEST_ARGS ?= --seconds 30 --users 1 --nodes 500 --gpus 10

$(LOADTEST_STAMP): loadtests/requirements.lock
	test -x $(LOADTEST_VENV)/bin/python || $(PYTHON) -m venv $(LOADTEST_VENV)
	$(LOADTEST_VENV)/bin/python -m pip install --quiet -r loadtests/requirements.lock
	touch $@

loadtest: $(STAMP) $(LOADTEST_STAMP)
	$(BIN)/python -m loadtests.run --locust $(LOADTEST_VENV)/bin/locust $(LOADTEST_ARGS)

simulate: $(STAMP)
	$(BIN)/dra-extender simulate --state $(STATE)

# The field names of the Kubernetes kinds the state loader keeps (app/state/knownfields.json), reduced from
# kubernetes-validate's OpenAPI schemas; rerun when that package moves to a new Kubernetes version.
known-fields: $(STAMP)
	$(BIN)/python -m app.state.knownfields

# Re-resolve the pinned dependency sets after editing pyproject.toml (the runtime set, for the image, is the
# full set without the dev tools, with the hash of every file, which the image build requires).
lock: $(STAMP)
	$(BIN)/pip-compile --quiet --extra dev --strip-extras --no-emit-index-url --no-emit-find-links \
		-o requirements.lock pyproject.toml
	$(BIN)/pip-compile --quiet --strip-extras --no-emit-index-url --no-emit-find-links --generate-hashes \
		-c requirements.lock -o requirements-runtime.lock pyproject.toml

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .mypy_cache *.egg-info .cache/oracle .cache/upstream-table  # the built e2e components are kept
