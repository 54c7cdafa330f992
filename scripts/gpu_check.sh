#!/usr/bin/env bash
# Run on the GPU machine (Python 3.12, torch 2.11, transformers 5.17, no Ray, no network).
# Before sending: `make gpu-assets` here puts pydantic wheels and the default model's tokenizer in .gpu/,
# then the device call carries .gpu and runs `bash scripts/gpu_check.sh`.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! python3 -c "import pydantic" 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --target /tmp/site .gpu/whl/*.whl
  export PYTHONPATH=/tmp/site:${PYTHONPATH:-}
fi
export PYTHONPATH=$PWD:${PYTHONPATH:-} HF_HUB_OFFLINE=1 SPECFLEET_TOKENIZER_DIR=$PWD/.gpu/tokenizer
python3 -u scripts/gpu_check.py
