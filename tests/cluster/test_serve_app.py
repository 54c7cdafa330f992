"""The Ray Serve application end to end: 2 target replicas behind the ingress, real HTTP, the openai client."""

import openai
import pytest

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@pytest.fixture(scope="module")
def serve_app(tiny_full_vocab, free_port, ray_serve_cluster):
    from ray import serve

    from cluster.app import build_app

    port = free_port()
    with ray_serve_cluster(num_gpus=4, port=port):
        args = {"replicas": 2, "placement": {"replica_cpus": 1, "ingress_cpus": 0.5}, "model_name": "tiny",
                "engine": {"model": str(tiny_full_vocab), "spec": {"method": "ngram", "k": 4}}}
        serve.run(build_app(args), name="specfleet", route_prefix="/")
        yield f"http://127.0.0.1:{port}"


@pytest.fixture(scope="module")
def served(serve_app):
    """Some traffic through both replicas, so the counters the metrics tests read do not depend on which tests
    ran before them (`-k metrics` alone)."""
    client = openai.OpenAI(base_url=serve_app + "/v1", api_key="none", max_retries=0)
    for i in range(6):
        client.completions.create(model="tiny", prompt=f"request {i} request {i}", max_tokens=8, temperature=0,
                                  extra_body={"ignore_eos": True})
    return serve_app


def test_openai_client_through_the_cluster(serve_app):
    client = openai.OpenAI(base_url=serve_app + "/v1", api_key="none", max_retries=0)
    assert [m.id for m in client.models.list().data] == ["tiny"]
    chunks = list(client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hello"}],
                                                 max_tokens=10, temperature=0, stream=True,
                                                 stream_options={"include_usage": True},
                                                 extra_body={"ignore_eos": True}))
    assert chunks[-1].usage.completion_tokens == 10
    texts = {client.completions.create(model="tiny", prompt=f"request {i}", max_tokens=4, temperature=0,
                                       extra_body={"ignore_eos": True}).usage.completion_tokens for i in range(6)}
    assert texts == {4}
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model="tiny", prompt="x", max_tokens=4, temperature=-2)


def test_replica_stats_and_metrics(served):
    from ray import serve

    from cluster.metrics import ReplicaMetrics

    stats = [serve.get_deployment_handle(f"target-{i}", "specfleet").stats.remote().result() for i in range(2)]
    assert {s["replica_id"] for s in stats} == {"target-0", "target-1"}
    assert sum(s["spec_decode"]["num_drafts"] for s in stats) > 0
    m = ReplicaMetrics("test")  # exported through ray.util.metrics; no GPU here: GPU metrics omitted, no crash
    m.update(stats[0])
    m.observe_latency(0.05, [0.01, 0.02])
    assert m.gpu.handles == []


def test_ingress_metrics_sum_the_replicas(served):
    import httpx

    lines = dict(ln.rsplit(" ", 1) for ln in httpx.get(served + "/metrics", timeout=30).text.splitlines()
                 if ln and not ln.startswith("#"))
    assert float(lines["specfleet:kv_cache_usage_perc"]) == 0.0  # idle: every request's blocks are back
    assert float(lines["specfleet:replicas_unreachable"]) == 0.0
    assert float(lines["specfleet:spec_decode_num_drafts"]) > 0  # both replicas' counters, summed


def test_a_configuration_that_cannot_be_placed_fails_fast(serve_app):
    from cluster.app import PlacementError, build_app

    with pytest.raises(PlacementError, match="GPU: needs 8"):
        build_app({"replicas": 4, "placement": {"replica_cpus": 0.1, "gpus_per_shard": 1}, "engine": {"tensor_parallel_size": 2}})
    with pytest.raises(PlacementError, match="CPU: needs"):
        build_app({"replicas": 20, "placement": {"replica_cpus": 1}})


def test_a_killed_replica_fails_nothing_silently_and_comes_back(serve_app):
    """target-1's Serve actor is killed while 8 requests run: every request completes or ends with a clean
    503 (none hangs, none gets a bare 500); Serve brings target-1 back and it serves again."""
    import concurrent.futures
    import time

    import httpx
    import ray
    from ray import serve

    def actor_name():
        return next((a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
                     if a["name"].startswith("SERVE_REPLICA") and "#target-1#" in a["name"]), None)

    def ask(i: int) -> int:
        r = httpx.post(serve_app + "/v1/completions", timeout=120,
                       json={"model": "tiny", "prompt": f"kill {i}", "max_tokens": 48, "ignore_eos": True})
        assert r.status_code == 200 or (r.status_code == 503 and r.json()["error"]["type"] == "service_unavailable")
        return r.status_code

    old = actor_name()
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        futures = [pool.submit(ask, i) for i in range(8)]
        time.sleep(0.5)
        ray.kill(ray.get_actor(old, namespace="serve"), no_restart=True)
        codes = [f.result(timeout=180) for f in futures]
    assert codes.count(200) >= 4, codes  # requests on target-0 (and re-run ones) are untouched
    deadline = time.time() + 120
    while time.time() < deadline:
        status = serve.status().applications["specfleet"].deployments["target-1"].status
        if str(status).endswith("HEALTHY") and actor_name() not in (None, old):
            break
        time.sleep(1)
    target = serve.get_deployment_handle("target-1", "specfleet")
    assert target.stats.remote().result(timeout_s=60)["replica_id"] == "target-1"
    assert actor_name() != old
