# minirag appliance — run `make` for this menu.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
MINIRAG := $(VENV)/bin/minirag
IMAGE ?= minirag:latest
DOCS ?= $(CURDIR)/samples
INDEX ?= minirag-index
export MINIRAG_SHARED ?= $(abspath $(CURDIR)/../shared)

.DEFAULT_GOAL := help
.PHONY: help install models lint test test-all test-fast eval bench bench-scale faults

help:      ## list targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/:.*## /\t/' | expand -t 14

# --compile-bytecode: uv writes no .pyc by default and PYTHONDONTWRITEBYTECODE=1 stops the interpreter
# from caching them, so every process (CLI, servers, conversion workers) recompiled lancedb & co.
$(VENV)/.installed: requirements.lock pyproject.toml
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q uv
	$(VENV)/bin/uv pip install -q --python $(PY) --compile-bytecode --require-hashes -r requirements.lock
	$(VENV)/bin/uv pip install -q --python $(PY) --no-deps -e .
	touch $@

install: $(VENV)/.installed ## create .venv with the locked dependencies (hash-checked)

lint: install ## ruff (rules in pyproject.toml) over appliance/, tests/ and scripts/; mypy --strict over appliance/ and tests/fixtures/
	$(VENV)/bin/ruff check appliance tests scripts
	$(VENV)/bin/mypy

models: install ## bake the embedding models into models/baked (cached; verified)
	$(MINIRAG) models bake

# Markers (pyproject.toml): `slow` (subprocess servers, process kills and stops, the OCR corpus,
# the full-corpus sync), `faults` (tests/faults), `docker` (tests/docker, needs an engine and the image).
FAST_TESTS := not slow and not faults and not docker and not ray
# The tests run in TEST_WORKERS processes (pytest-xdist), each test file in one of them; 0 runs them in
# pytest's own process. Half of a serial run's time the machine waited on subprocesses and timers: two
# workers took the slow and fault tests from 32 to 21 min on 2 cores (docs/BENCHMARKS.md, "The test suite").
# The Ray tests run after the others, alone: each starts a Ray cluster of its own.
TEST_WORKERS ?= 2
PARALLEL := -n $(TEST_WORKERS) --dist loadfile

test: models ## the fast tests (~3 min on 2 cores): unit, adapters (in-memory MCP), a few real-model end-to-end tests
	$(PY) -m pytest -m "$(FAST_TESTS)" $(PARALLEL)

test-all: models cluster-install ## every test: `test` plus slow, faults (CI size), `sync --ray` (installs the [cluster] extra) and, when a Docker engine answers, `image`, `image-cluster` and the image tests
	$(PY) -m pytest -m "not docker and not ray" $(PARALLEL)
	$(MAKE) --no-print-directory test-ray
	@if $(DOCKER) info >/dev/null 2>&1; then $(MAKE) --no-print-directory image image-cluster docker-test; \
	else echo "test-all: no Docker engine ($(DOCKER) info failed): the image tests (tests/docker) did not run"; fi

test-fast: install ## unit tests only, no baked model or dictionaries needed
	$(PY) -m pytest tests/unit -m "not model"

# ---- the [cluster] extra: `minirag sync --ray` (appliance/cluster); the default install and image have no Ray ----
.PHONY: cluster-install test-ray lock-cluster
$(VENV)/.cluster: requirements-cluster.lock | install
	$(VENV)/bin/uv pip install -q --python $(PY) --compile-bytecode --require-hashes -r requirements-cluster.lock
	touch $@

cluster-install: $(VENV)/.cluster ## add the [cluster] extra to .venv: Ray, from requirements-cluster.lock (hash-checked)

test-ray: models cluster-install ## the `sync --ray` tests (marker `ray`) on a local Ray cluster of 2 CPUs the tests start
	$(PY) -m pytest -m "ray and not docker"

lock-cluster: ## re-pin requirements-cluster.lock: the runtime lock plus the [cluster] extra, with hashes
	$(VENV)/bin/uv pip compile pyproject.toml --extra cluster --generate-hashes -c requirements-runtime.lock \
	  -o requirements-cluster.lock --python-version 3.11

eval: models ## retrieval quality, every shared set (SciFact, Cranfield, XQuAD-R en/de/ru/multi), our cross-lingual corpus set and the answer passages of our long-manual set (Debian doc packages via apt-get download): vector, BM25, default; slow, not in CI
	$(PY) scripts/eval_retrieval.py --all --out .cache/eval/quality.json
	$(PY) scripts/eval_manuals.py --out .cache/eval/manuals.json

bench: models ## speed figures: embedding throughput, query latency
	$(PY) scripts/bench_embed.py
	$(PY) scripts/bench_query.py
	$(PY) scripts/bench_sync.py --files 2000
	$(PY) scripts/bench_mcp.py

# 10k and 100k chunks take ~15 min here; SCALE_SIZES=10000,100000,1000000 adds the 1M row (~40 min more).
SCALE_SIZES ?= 10000,100000
bench-scale: models ## growth: query p50/p95, recall@10, RSS, disk, build and no-change sync at 10k and 100k chunks; plot in .cache
	mkdir -p .cache/bench_scale
	$(PY) scripts/bench_scale.py --sizes $(SCALE_SIZES) --plot .cache/bench_scale/growth.png --json > .cache/bench_scale/growth.json
	$(PY) scripts/bench_scale.py --flat 20000 --json > .cache/bench_scale/flat.json

faults: models ## the fault suite at full size (about an hour): kill -9 trials, disk full/read-only/corruption, hostile files, load, fuzzing, security
	$(PY) scripts/faults_crash.py --trials 50
	$(PY) scripts/faults_storage.py
	$(PY) scripts/faults_hostile.py --big
	$(PY) scripts/faults_load.py --clients 20 --seconds 60 --files 3000
	$(PY) scripts/faults_writers.py --seconds 600
	FAULTS_FULL=1 $(PY) -m pytest -m faults tests/faults

# ---- the container image (see Dockerfile; scripts/docker_ci.sh runs the image tests) ----
.PHONY: base wheelhouse image image-if-stale demo serve sync save load docker-test wheelhouse-cluster image-cluster
# Debian's docker CLI (/usr/bin/docker) can use the daemon's BuildKit; the v28 one here has no buildx.
DOCKER ?= $(shell test -x /usr/bin/docker && echo /usr/bin/docker || echo docker)
BASE_IMAGE ?= local/base:bookworm-3
BUNDLE ?= dist/minirag-image.tar.gz
DOCKER_RUN = $(DOCKER) run --rm --pull never

base:      ## the local Debian base images, runtime and -build (debootstrap; only for BASE_IMAGE=local/...)
	@case "$(BASE_IMAGE)" in local/*) scripts/make_base_image.sh $(BASE_IMAGE);; *) echo "base: using $(BASE_IMAGE)";; esac

wheelhouse/.complete: requirements-runtime.lock
	$(PY) -m pip download -qq --only-binary :all: --require-hashes -r requirements-runtime.lock -d wheelhouse/ && touch $@

# The project's wheel is rebuilt only when its sources change, and reproducibly (zip times from the
# last commit), so an unchanged project gives an identical wheel and Docker's layer cache holds.
PROJECT_SOURCES := pyproject.toml $(shell find appliance -type f ! -path '*/__pycache__/*' 2>/dev/null)
PROJECT_WHEEL := .cache/stamps/project-wheel
IMAGE_STAMP := .cache/stamps/image-$(subst /,_,$(subst :,_,$(IMAGE)))
IMAGE_INPUTS := Dockerfile .dockerignore $(shell find docker -type f 2>/dev/null) requirements-runtime.lock \
  $(PROJECT_WHEEL) models/manifest.toml

# build/ goes first: setuptools copies into it and never removes a module deleted since, so a
# stale build/ put old files (a removed module, a recorded snapshot) into the wheel and the image.
$(PROJECT_WHEEL): $(PROJECT_SOURCES) | install
	rm -rf wheelhouse/project build && SOURCE_DATE_EPOCH=$$(git log -1 --format=%ct 2>/dev/null || echo 315532800) \
	  $(PY) -m pip wheel -qq --no-deps . -w wheelhouse/project/
	mkdir -p $(dir $@) && touch $@

wheelhouse: install wheelhouse/.complete $(PROJECT_WHEEL) ## wheels for the image: the runtime lock (hash-checked) and this project

DOCKER_BUILD = DOCKER_BUILDKIT=1 $(DOCKER) build --progress=plain --build-arg BASE_IMAGE=$(BASE_IMAGE) \
  $$(case "$(BASE_IMAGE)" in local/*) echo --build-arg BUILD_IMAGE=$(BASE_IMAGE)-build;; esac) --build-arg REVISION=$$(git rev-parse --short HEAD)

image: base wheelhouse models ## build the image $(IMAGE) offline from the wheelhouse and baked models
	$(DOCKER_BUILD) -t $(IMAGE) .
	mkdir -p $(dir $(IMAGE_STAMP)) && touch $(IMAGE_STAMP)

CLUSTER_IMAGE ?= minirag:cluster
wheelhouse/.complete-cluster: requirements-cluster.lock
	$(PY) -m pip download -qq --only-binary :all: --require-hashes -r requirements-cluster.lock -d wheelhouse/ && touch $@

wheelhouse-cluster: wheelhouse wheelhouse/.complete-cluster ## the image's wheels plus Ray's (requirements-cluster.lock, hash-checked)

image-cluster: base wheelhouse-cluster models ## build $(CLUSTER_IMAGE): the image plus Ray, for cluster nodes (`ray start`) and `sync --ray`
	$(DOCKER_BUILD) --build-arg LOCK=requirements-cluster.lock -t $(CLUSTER_IMAGE) .

$(IMAGE_STAMP): $(IMAGE_INPUTS)
	$(MAKE) image

image-if-stale: $(IMAGE_STAMP) ## build the image only when its inputs changed or it is missing (what demo uses)
	@$(DOCKER) image inspect $(IMAGE) >/dev/null 2>&1 || $(MAKE) image

demo: image-if-stale ## index samples/ in the container (no network) and search it in English and Russian
	$(DOCKER_RUN) --network none -v $(CURDIR)/samples:/docs:ro -v minirag-demo:/index $(IMAGE) sync
	for q in "how often should solar panels be cleaned" "как долго варить пельмени" "Kaffeemaschine entkalken Essig"; do echo "== $$q"; $(DOCKER_RUN) --network none -v $(CURDIR)/samples:/docs:ro -v minirag-demo:/index $(IMAGE) query --top-k 3 "$$q"; done

serve:     ## MCP on stdio from the image over DOCS, index in the INDEX volume
	$(DOCKER_RUN) -i --network none -v $(DOCS):/docs:ro -v $(INDEX):/index $(IMAGE)

sync:      ## one reconcile in the image: make sync DOCS=/path INDEX=volume-or-dir [SYNC_ARGS=--allow-deletions]
	$(DOCKER_RUN) --network none -v $(DOCS):/docs:ro -v $(INDEX):/index $(IMAGE) sync $(SYNC_ARGS)

save:      ## air-gap bundle: BUNDLE (docker save | gzip), its sha256 and LOAD.txt
	scripts/image_bundle.sh save $(IMAGE) $(BUNDLE)

load:      ## load BUNDLE after checking its sha256
	scripts/image_bundle.sh load $(IMAGE) $(BUNDLE)

docker-test: ## the image tests against IMAGE (needs a Docker engine and `make image`)
	MINIRAG_DOCKER=1 DOCKER=$(DOCKER) MINIRAG_IMAGE=$(IMAGE) MINIRAG_CLUSTER_IMAGE=$(CLUSTER_IMAGE) \
	  $(PY) -m pytest -m docker tests/docker
