"""Placement on fake GPUs (ray.init(num_gpus=5)): target shards pinned one GPU each in their replica's
placement group, drafters sharing one GPU apart from every shard, and the whole thing serving real requests
whose greedy output equals a single-shard engine without speculation."""
import os

import openai
import pytest

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def _args(model, draft, replicas: int) -> dict:
    return {"replicas": replicas, "model_name": "tiny",
            "placement": {"replica_cpus": 0.5, "shard_cpus": 0.5, "gpus_per_shard": 1, "ingress_cpus": 0.25},
            "drafters": {"count": 2, "gpus": 0.5, "cpus": 0.25, "mps": {"enabled": True}},
            "engine": {"model": str(model), "dtype": "float32", "tensor_parallel_size": 2,
                       "kv_cache_memory_gb": 0.05, "spec": {"method": "draft", "k": 3, "draft_model": str(draft)}}}


@pytest.fixture(scope="module")
def ray_gpus(free_port, ray_serve_cluster):
    """A Ray cluster with 5 fake GPUs and Serve's HTTP proxy on a free port; yields that port."""
    port = free_port()
    with ray_serve_cluster(num_gpus=5, port=port):
        yield port


def _deploy(args: dict, port: int) -> str:
    from ray import serve

    from cluster.app import build_app

    serve.run(build_app(args), name="specfleet", route_prefix="/")
    return f"http://127.0.0.1:{port}"


def _placements(replicas: int) -> list[dict]:
    from ray import serve

    return [serve.get_deployment_handle(f"target-{i}", "specfleet").placement.remote().result()
            for i in range(replicas)]


def _check_pinning(placements: list[dict]) -> None:
    shard_gpus = []
    for p in placements:
        own = p["replica"]["cuda_visible_devices"]
        shards = [s["cuda_visible_devices"] for s in p["shards"]]
        assert own is not None and len(own.split(",")) == 1, p  # shard 0 = the replica: one GPU
        assert len(shards) == 1 and len(shards[0].split(",")) == 1 and shards[0] != own
        assert {s["node_id"] for s in p["shards"]} == {p["replica"]["node_id"]}  # STRICT_PACK: one node
        assert p["shards"][0]["kv_blocks"] > 0 and p["shards"][0]["backend"] == "gloo"
        shard_gpus += [own] + shards
    assert len(set(shard_gpus)) == len(shard_gpus)  # every shard on its own GPU
    drafters = [d for p in placements for d in p["drafters"]]
    assert len({d["instance"] for d in drafters}) == 2  # both drafters in use
    drafter_gpus = {d["cuda_visible_devices"] for d in drafters}
    assert len(drafter_gpus) == 1 and not drafter_gpus & set(shard_gpus)  # drafters share one other GPU
    mps = drafters[0]["mps"]
    assert mps["enabled"] and mps["daemon_running"] is False  # asked for, reported, no crash without it


def test_two_replicas_of_two_shards_and_two_drafters_sharing_a_gpu(ray_gpus, tiny_full_vocab,
                                                                    tiny_full_vocab_draft):
    from ray import serve

    from workers.config import EngineConfig, SamplingParams
    from workers.engine import LLMEngine

    url = _deploy(_args(tiny_full_vocab, tiny_full_vocab_draft, replicas=2), ray_gpus)
    placements = _placements(2)
    _check_pinning(placements)  # replica i drafts on drafter i

    client = openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0)
    prompts = ["hello there", "the cluster", "one more", "and a fourth"]
    got = [client.completions.create(model="tiny", prompt=p, max_tokens=12, temperature=0,
                                     extra_body={"ignore_eos": True}).choices[0].text for p in prompts]
    single = LLMEngine(EngineConfig(model=str(tiny_full_vocab), dtype="float32", kv_cache_memory_gb=0.05))
    want = [r.text for r in single.generate(prompts, SamplingParams(max_tokens=12, temperature=0, ignore_eos=True))]
    assert got == want  # 2 shards + remote drafts = 1 shard without speculation
    stats = [serve.get_deployment_handle(f"target-{i}", "specfleet").stats.remote().result() for i in range(2)]
    assert sum(s["spec_decode"]["num_drafts"] for s in stats) > 0
    assert all(s["drafter"]["failures"] == 0 for s in stats)
    serve.delete("specfleet")


def test_one_replica_of_two_shards_with_drafters_sharing_a_gpu_and_one_killed(ray_gpus, tiny_full_vocab, tiny_full_vocab_draft):
    from ray import serve

    url = _deploy(_args(tiny_full_vocab, tiny_full_vocab_draft, replicas=1), ray_gpus)
    _check_pinning(_placements(1))  # the replica spreads its requests over both drafters
    client = openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0)
    for i in range(6):
        client.completions.create(model="tiny", prompt=f"request {i}", max_tokens=6, temperature=0)
    calls = [serve.get_deployment_handle(f"drafter-{j}", "specfleet").describe.remote().result()["calls"]
             for j in range(2)]
    assert min(calls) > 0, calls
    _kill_a_drafter_under_load(client)
    serve.delete("specfleet")


def _kill_a_drafter_under_load(client) -> None:
    """No request fails while drafter-0 is dead; its requests decode without speculation; Serve restarts it and
    the replica resends whole contexts to the new process (resync), after which it drafts again."""
    import concurrent.futures
    import time

    import ray
    from ray import serve

    target = serve.get_deployment_handle("target-0", "specfleet")
    name = next(a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
                if "drafter-0" in a["name"] and a["name"].startswith("SERVE_REPLICA"))
    old = serve.get_deployment_handle("drafter-0", "specfleet").describe.remote().result()["instance"]

    def ask(i: int) -> int:
        return client.completions.create(model="tiny", prompt=f"load {i}", max_tokens=16, temperature=0,
                                         extra_body={"ignore_eos": True}).usage.completion_tokens

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        futures = [pool.submit(ask, i) for i in range(8)]
        ray.kill(ray.get_actor(name, namespace="serve"), no_restart=True)
        futures += [pool.submit(ask, i) for i in range(8, 16)]
        assert [f.result(timeout=120) for f in futures] == [16] * 16  # every request completes in full
    deadline = time.time() + 120
    while time.time() < deadline:  # the controller replaces the drafter; the replica comes back to it
        ask(99)
        if target.stats.remote().result()["drafter"]["resyncs"] > 0:
            break
        time.sleep(1)
    stats = target.stats.remote().result()["drafter"]
    assert stats["resyncs"] > 0, stats  # (calls in flight at the kill either failed or Serve retried them)
    new = serve.get_deployment_handle("drafter-0", "specfleet").describe.remote().result()
    assert new["instance"] != old and new["calls"] > 0


def test_configurations_that_cannot_be_placed_fail_fast(ray_gpus, tiny_full_vocab, tiny_full_vocab_draft):
    from cluster.app import PlacementError, build_app

    too_many = _args(tiny_full_vocab, tiny_full_vocab_draft, replicas=3)  # 6 shard GPUs + 1 drafter GPU > 5
    with pytest.raises(PlacementError, match="GPU: needs 7"):
        build_app(too_many)
    wide = _args(tiny_full_vocab, tiny_full_vocab_draft, replicas=1)
    wide["engine"]["tensor_parallel_size"] = 8  # more GPUs than the one node has: STRICT_PACK cannot hold
    wide["drafters"]["count"] = 0
    with pytest.raises(PlacementError, match="GPU"):
        build_app(wide)


def test_a_dead_shard_makes_its_replica_unhealthy_and_serve_replaces_it(ray_gpus, tiny_full_vocab,
                                                                         tiny_full_vocab_draft):
    """The shard process is killed (SIGKILL): requests fail cleanly or complete, none hangs; Serve's health
    check replaces the replica, which comes back with new shards and serves again."""
    import signal
    import time

    from ray import serve

    args = _args(tiny_full_vocab, tiny_full_vocab_draft, replicas=1)
    args["drafters"]["count"] = 0
    args["engine"]["spec"] = {"method": "ngram", "k": 3}
    url = _deploy(args, ray_gpus)
    client = openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=120)
    assert client.completions.create(model="tiny", prompt="before", max_tokens=4).usage.completion_tokens == 4
    old = _placements(1)[0]["shards"][0]["pid"]
    os.kill(old, signal.SIGKILL)
    deadline, served = time.time() + 240, False
    while time.time() < deadline and not served:
        try:
            served = client.completions.create(model="tiny", prompt="after", max_tokens=4).usage.completion_tokens == 4
        except openai.APIError:  # a clean HTTP error while the replica is replaced, never a hang
            time.sleep(2)
    assert served
    assert _placements(1)[0]["shards"][0]["pid"] != old
    serve.delete("specfleet")
