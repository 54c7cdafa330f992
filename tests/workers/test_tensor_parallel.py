"""Tensor-parallel target shards (local processes, gloo): same greedy output as one shard."""
import pytest
import torch

from workers.config import EngineConfig, SamplingParams, SpecConfig
from workers.engine import LLMEngine
from workers.tensor_parallel import check_shardable, local_shard_devices, split_evenly


def test_split_evenly_gives_the_larger_parts_first():
    assert [len(r) for r in split_evenly(3, 2)] == [2, 1]
    assert [list(r) for r in split_evenly(4, 2)] == [[0, 1], [2, 3]]
    with pytest.raises(ValueError, match="KV heads"):
        check_shardable(num_kv_heads=2, intermediate=128, world=3)


def _greedy(model, tp: int, spec: SpecConfig | None = None) -> tuple[list[list[int]], dict]:
    eng = LLMEngine(EngineConfig(model=str(model), dtype="float32", tensor_parallel_size=tp, device="cpu",
                                 spec=spec or SpecConfig(), kv_cache_memory_gb=0.05))
    prompts = [[5, 6, 7, 8, 9, 10, 5, 6, 7], [11, 3, 4], list(range(3, 15)) * 3]
    out = [r.output_ids for r in eng.generate(prompts, SamplingParams(max_tokens=24, temperature=0, ignore_eos=True))]
    stats = eng.stats()
    if eng.shard_peers is not None:
        eng.shard_peers.close()
    return out, stats


def test_two_shards_equal_one_shard_greedy(tiny_target):
    one, _ = _greedy(tiny_target, 1)
    two, stats = _greedy(tiny_target, 2, SpecConfig(method="ngram", k=3))  # ragged verify steps across shards
    assert two == one
    assert stats["spec_decode"]["num_drafts"] > 0
    assert stats["kv_blocks_used"] == 0


def test_tensor_parallel_needs_peers_of_the_right_size(tiny_target):
    class Peers:
        world_size, init_method = 3, "tcp://127.0.0.1:1"

    with pytest.raises(ValueError, match="3 shard peers"):
        LLMEngine(EngineConfig(model=str(tiny_target), tensor_parallel_size=2), shard_peers=Peers())


def test_local_shards_take_one_gpu_each_and_refuse_to_share_one():
    """NCCL refuses two ranks on one GPU (the one-GPU H200 machine failed so at the first all-reduce): local
    shard processes get a GPU each, and too few GPUs is a clear error before any process starts."""
    assert local_shard_devices(torch.device("cpu"), 2, 0) == ["cpu", "cpu"]
    assert local_shard_devices(torch.device("cuda"), 2, 2) == ["cuda:0", "cuda:1"]
    assert local_shard_devices(torch.device("cuda:1"), 2, 4) == ["cuda:1", "cuda:2"]
    with pytest.raises(ValueError, match="needs 2 GPUs from cuda:0 .* this machine has 1"):
        local_shard_devices(torch.device("cuda"), 2, 1)


def test_the_shards_process_group_follows_their_device_not_the_machine(monkeypatch):
    """Shards on CPUs join gloo even where CUDA is available (NCCL refused their CPU tensors on the H200
    machine), shards on GPUs NCCL."""
    import workers.tensor_parallel as tp

    joined = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(tp.dist, "is_initialized", lambda: False)
    monkeypatch.setattr(tp.dist, "init_process_group", lambda backend, **kw: joined.append(backend))
    assert tp.init_group(0, 2, "tcp://127.0.0.1:1", torch.device("cpu")) == "gloo"
    assert tp.init_group(0, 2, "tcp://127.0.0.1:1", torch.device("cuda:0")) == "nccl"
    assert joined == ["gloo", "nccl"]
