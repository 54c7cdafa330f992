"""Train the draft model for the embedded default (SmolLM2-135M-Instruct), on this CPU, bounded in time.

No package ships a second model with SmolLM2's tokenizer, so the project trains its own draft:
- architecture: 2 Llama decoder layers (initialised from target layers 0 and last) between the target's own
  frozen embedding and a reduced-vocabulary output layer: the rows of the target's tied embedding for the
  most frequent target predictions (FR-Spec's idea: the 49k-word head was ~70% of a draft step). Only the
  2 layers and the final norm are trained and shipped (bf16, ~14 MB), plus the list of head token ids.
- data: teacher-forced target predictions (top-16 log-probabilities per position) over ShareGPT
  conversations in the chat template: ~1,000 positions/s on 2 cores, ~10x what generation gives.
- loss: cross-entropy against the target's top-16 distribution restricted to the draft's vocabulary.
- learning curve: held-out top-1 agreement with the target's argmax (the greedy first-position acceptance
  under teacher forcing), recorded against training time in `training.json`.

    python -m workers.train_draft --data-minutes 20 --train-minutes 45 --out workers/assets/smollm2-135m-draft
"""
from __future__ import annotations

import argparse
import json
import logging
import math
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from workers.model_store import cache_dir, resolve_model

log = logging.getLogger(__name__)
SEQ = 256  # training window (tokens)
TOPK = 16  # target probabilities kept per position
DRAFT_LAYERS = 2


def _windows(tokenizer, max_windows_per_conv: int = 4):
    """Token windows of SEQ tokens from ShareGPT conversations formatted with the chat template."""
    from workers.workloads import sharegpt_records

    roles = {"human": "user", "gpt": "assistant"}
    for turns in sharegpt_records():
        msgs = [{"role": roles[t["from"]], "content": t.get("value", "")} for t in turns[:6] if t.get("from") in roles]
        if len(msgs) < 2 or msgs[0]["role"] != "user":
            continue
        ids = tokenizer.apply_chat_template(msgs, tokenize=True, return_dict=False)
        for w in range(min(max_windows_per_conv, len(ids) // SEQ)):
            yield ids[w * SEQ:(w + 1) * SEQ]


def collect(minutes: float, out_dir: Path, batch: int = 16) -> Path:
    """Teacher-force the target over ShareGPT windows for `minutes`; save ids and top-K log-probs."""
    from tqdm import tqdm
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = out_dir / "teacher.pt"
    folder = resolve_model(None)
    tok = AutoTokenizer.from_pretrained(str(folder))
    target = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.bfloat16).eval()
    ids_l, lp_l, ix_l = [], [], []
    gen, t_end = _windows(tok), time.monotonic() + minutes * 60
    bar = tqdm(total=int(minutes * 60), desc="teacher-forcing the target (s)", unit="s")
    t0 = time.monotonic()
    with torch.inference_mode():
        while time.monotonic() < t_end:
            rows = [w for _, w in zip(range(batch), gen)]
            if not rows:
                break
            x = torch.tensor(rows)
            logp = target(x).logits.float().log_softmax(-1)
            top = logp.topk(TOPK, dim=-1)
            ids_l.append(x.to(torch.int32))
            ix_l.append(top.indices.to(torch.int32))
            lp_l.append(top.values.to(torch.float16))
            bar.update(int(time.monotonic() - t0) - bar.n)
    bar.close()
    data = {"ids": torch.cat(ids_l), "top_idx": torch.cat(ix_l), "top_logp": torch.cat(lp_l),
            "seconds": time.monotonic() - t0}
    out_dir.mkdir(parents=True, exist_ok=True)
    torch.save(data, path)
    log.info("teacher data: %d windows x %d tokens in %.0f s", len(data["ids"]), SEQ, data["seconds"])
    return path


class Draft(torch.nn.Module):
    """Trainable part (decoder layers + final norm) around the target's frozen embedding and head rows."""

    def __init__(self, target, head_ids: torch.Tensor) -> None:
        from transformers import LlamaConfig, LlamaModel

        super().__init__()
        cfg = LlamaConfig(**{**target.config.to_dict(), "num_hidden_layers": DRAFT_LAYERS})
        self.config = cfg
        self.body = LlamaModel(cfg)
        src = target.model
        self.body.embed_tokens.weight = torch.nn.Parameter(src.embed_tokens.weight.detach().float(), requires_grad=False)
        for mine, theirs in zip(self.body.layers, (src.layers[0], src.layers[-1])):
            mine.load_state_dict(theirs.state_dict())
        self.body.norm.load_state_dict(src.norm.state_dict())
        self.register_buffer("head_ids", head_ids)
        self.register_buffer("head", src.embed_tokens.weight.detach().float()[head_ids].clone())

    def forward(self, ids: torch.Tensor) -> torch.Tensor:  # [B, T] -> logits [B, T, V_draft]
        return self.body(input_ids=ids).last_hidden_state @ self.head.T

    def shipped_state(self) -> dict[str, torch.Tensor]:
        return {k: v.detach().to(torch.bfloat16).contiguous() for k, v in self.body.state_dict().items()
                if not k.startswith("embed_tokens")}


def choose_vocab(data: dict, size: int) -> torch.Tensor:
    """The `size` tokens the target predicts most often (top-1 counts, then top-K mass as tie-break)."""
    V = 49152
    counts = torch.bincount(data["top_idx"][..., 0].flatten().long(), minlength=V).double()
    mass = torch.zeros(V, dtype=torch.float64).index_add_(0, data["top_idx"].flatten().long(),
                                                          data["top_logp"].flatten().double().exp())
    return (counts + 1e-3 * mass).argsort(descending=True)[:size].sort().values


def _targets(top_idx: torch.Tensor, top_logp: torch.Tensor, remap: torch.Tensor):
    """Target top-K -> (draft-vocab indices [.., K] with -1 outside, probabilities [.., K])."""
    return remap[top_idx.long()], top_logp.float().exp()


def _loss(logits: torch.Tensor, idx: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    logq = logits.float().log_softmax(-1)
    inside = idx >= 0
    picked = logq.gather(-1, idx.clamp_min(0)) * inside
    return -(picked * p).sum(-1).mean()


@torch.no_grad()
def evaluate(model: Draft, data: dict, remap: torch.Tensor, rows: torch.Tensor) -> float:
    """Held-out top-1 agreement with the target's argmax (positions after the first 16 of a window)."""
    agree = total = 0
    for chunk in rows.split(16):
        ids = data["ids"][chunk].long()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            pred = model(ids).argmax(-1)
        want = remap[data["top_idx"][chunk, :, 0].long()]
        agree += int((pred == want)[:, 16:].sum())
        total += want[:, 16:].numel()
    return agree / total


def train(data_path: Path, out: Path, minutes: float, vocab_size: int = 8192, batch: int = 16, lr: float = 1e-3,
          eval_every_s: float = 180.0) -> dict:
    from tqdm import tqdm
    from transformers import AutoModelForCausalLM

    data = torch.load(data_path)
    n = len(data["ids"])
    gen = torch.Generator().manual_seed(0)
    perm = torch.randperm(n, generator=gen)
    held, train_rows = perm[: max(32, n // 40)], perm[max(32, n // 40):]
    head_ids = choose_vocab({k: data[k][train_rows] for k in ("top_idx", "top_logp")}, vocab_size)
    remap = torch.full((49152,), -1, dtype=torch.long)
    remap[head_ids] = torch.arange(len(head_ids))
    top1 = data["top_idx"][held, :, 0].flatten().long()
    coverage = float((remap[top1] >= 0).float().mean())
    target = AutoModelForCausalLM.from_pretrained(str(resolve_model(None)), dtype=torch.float32)
    model = Draft(target, head_ids)
    del target
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.01, betas=(0.9, 0.98))
    curve = [{"seconds": 0.0, "tokens": 0, "agreement": evaluate(model, data, remap, held)}]
    log.info("draft vocab %d covers %.3f of held-out target top-1; start agreement %.3f", vocab_size, coverage,
             curve[0]["agreement"])
    t0 = time.monotonic()
    budget = minutes * 60
    seen = step = 0
    next_eval = eval_every_s
    bar = tqdm(total=int(budget), desc="training the draft (s)", unit="s")
    while (elapsed := time.monotonic() - t0) < budget:
        frac = elapsed / budget
        for g in opt.param_groups:  # linear warm-up over 3%, cosine decay to 10%
            g["lr"] = lr * min(1.0, frac / 0.03) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))
        rows = train_rows[torch.randint(len(train_rows), (batch,), generator=gen)]
        ids = data["ids"][rows].long()
        idx, p = _targets(data["top_idx"][rows], data["top_logp"][rows], remap)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = model(ids)
        loss = _loss(logits, idx, p)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        seen += ids.numel()
        step += 1
        bar.update(int(time.monotonic() - t0) - bar.n)
        bar.set_postfix(loss=f"{loss.item():.3f}", agree=f"{curve[-1]['agreement']:.3f}")
        if time.monotonic() - t0 >= next_eval:
            next_eval += eval_every_s
            model.eval()
            curve.append({"seconds": round(time.monotonic() - t0, 1), "tokens": seen,
                          "agreement": evaluate(model, data, remap, held)})
            model.train()
            log.info("%.0f s, %d tokens: held-out agreement %.3f", curve[-1]["seconds"], seen, curve[-1]["agreement"])
    bar.close()
    model.eval()
    curve.append({"seconds": round(time.monotonic() - t0, 1), "tokens": seen,
                  "agreement": evaluate(model, data, remap, held)})
    report = {"layers": DRAFT_LAYERS, "init_from_target_layers": [0, target_layers(model)],
              "vocab_size": vocab_size, "heldout_top1_coverage": round(coverage, 4),
              "teacher_windows": n, "teacher_tokens": n * SEQ, "teacher_seconds": round(data["seconds"], 1),
              "train_seconds": round(time.monotonic() - t0, 1), "train_steps": step, "train_tokens": seen,
              "batch": batch, "seq": SEQ, "lr": lr, "heldout_windows": len(held), "curve": curve}
    save(model, out, report)
    return report


def target_layers(model: Draft) -> int:
    return 29  # SmolLM2-135M has 30 layers: the draft starts from the first and the last


def save(model: Draft, out: Path, report: dict) -> None:
    from safetensors.torch import save_file

    out.mkdir(parents=True, exist_ok=True)
    save_file(model.shipped_state(), str(out / "draft.safetensors"))
    (out / "head_ids.json").write_text(json.dumps(model.head_ids.tolist()))
    cfg = model.config.to_dict()
    (out / "config.json").write_text(json.dumps({k: cfg[k] for k in sorted(cfg) if not k.startswith("_")}, indent=1,
                                                default=str))
    (out / "training.json").write_text(json.dumps(report, indent=1))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data-minutes", type=float, default=20.0)
    ap.add_argument("--train-minutes", type=float, default=45.0)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "assets" / "smollm2-135m-draft")
    ap.add_argument("--reuse-data", action="store_true", help="train on the teacher data already collected")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    work = cache_dir() / "draft_training"
    path = work / "teacher.pt"
    if not (args.reuse_data and path.exists()):
        path = collect(args.data_minutes, work)
    report = train(path, args.out, args.train_minutes, args.vocab)
    print(json.dumps({k: v for k, v in report.items() if k != "curve"}, indent=1))


if __name__ == "__main__":
    main()
