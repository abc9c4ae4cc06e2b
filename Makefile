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
.PHONY: help install models test test-fast eval bench

help:      ## list targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/:.*## /\t/' | expand -t 14

$(VENV)/.installed: requirements.lock pyproject.toml
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q uv
	$(VENV)/bin/uv pip install -q --python $(PY) --require-hashes -r requirements.lock
	$(VENV)/bin/uv pip install -q --python $(PY) --no-deps -e .
	touch $@

install: $(VENV)/.installed ## create .venv with the locked dependencies (hash-checked)

models: install ## bake the embedding models into models/baked (cached; verified)
	$(MINIRAG) models bake

test: models ## every test (bakes the model first if missing)
	$(PY) -m pytest

test-fast: install ## unit tests only, no baked model needed
	$(PY) -m pytest tests/unit

eval: models ## retrieval quality on SciFact and XQuAD-R (nDCG@10, Recall@10)
	$(PY) scripts/eval_retrieval.py

bench: models ## speed figures: embedding throughput, query latency
	$(PY) scripts/bench_embed.py
	$(PY) scripts/bench_query.py
