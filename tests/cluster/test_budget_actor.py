"""The global budget actor: allocation across replicas, the engine using it, and falling back when it dies."""
import os

import pytest
import torch

from cluster.budget_actor import BudgetActor
from workers.budget import survival

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def test_capacity_goes_to_the_replica_whose_drafts_survive():
    actor = BudgetActor({"mps-gpu-0": 6})
    actor.register("confident", "mps-gpu-0")
    actor.register("doubtful", "mps-gpu-0")
    doubtful = actor.plan("doubtful", ["d0", "d1"], survival(torch.full((2, 4), 0.3), torch.full((2,), 4)).numpy())
    assert sum(doubtful.values()) == 6  # alone in the group so far: it gets all of it
    confident = actor.plan("confident", ["c0", "c1"], survival(torch.full((2, 4), 0.9), torch.full((2,), 4)).numpy())
    assert confident == {"c0": 3, "c1": 3}  # 0.9^3 = 0.73 beats every doubtful position
    assert sum(actor.plan("doubtful", ["d0", "d1"], survival(torch.full((2, 4), 0.3),
                                                              torch.full((2,), 4)).numpy()).values()) == 0
    assert actor.plan("solo", ["s"], torch.ones(1, 4).numpy()) == {"s": 4}  # a group without a shared drafter


@pytest.fixture(scope="module")
def ray_local():
    ray = pytest.importorskip("ray")
    os.environ["RAY_AUTH_MODE"] = "disabled"  # loopback-only test cluster
    ray.init(num_cpus=2, include_dashboard=False, namespace="specfleet", log_to_driver=False)
    yield ray
    ray.shutdown()


def test_engine_plans_globally_and_falls_back_when_the_actor_dies(ray_local, tiny_target, tiny_draft, tmp_path,
                                                                  monkeypatch):
    from cluster.budget_actor import ACTOR_NAME, NAMESPACE
    from cluster.budget_client import attach_global_budget
    from workers.config import EngineConfig, SamplingParams, SpecConfig
    from workers.engine import LLMEngine

    monkeypatch.setenv("SPECFLEET_CACHE", str(tmp_path))
    prompts = [[1, 5, 6, 7, 5, 6, 7, 5, 6], [3, 4], [9, 10, 11, 12, 13] * 4, [7] * 30]
    sp = SamplingParams(max_tokens=40, temperature=0.0, ignore_eos=True)
    base = [r.output_ids for r in LLMEngine(EngineConfig(model=str(tiny_target))).generate(prompts, sp)]
    spec = SpecConfig(method="draft", k=4, draft_model=str(tiny_draft), verify="adaptive-global", cost_table_budget_s=3)
    eng = LLMEngine(EngineConfig(model=str(tiny_target), spec=spec))
    planner = attach_global_budget(eng, "replica-0", group="gpu-3", local_capacity=4, group_capacity=6,
                                   retry_s=0.0)  # the serving deadline (2 ms): answers arrive a step late
    assert planner is not None and eng.adaptive.capacity_planner is planner
    assert [r.output_ids for r in eng.generate(prompts, sp)] == base  # lossless under global caps
    assert planner.global_plans > 0
    ray_local.kill(ray_local.get_actor(ACTOR_NAME, namespace=NAMESPACE), no_restart=True)
    before = planner.stats()
    assert [r.output_ids for r in eng.generate(prompts, sp)] == base  # no request fails
    after = planner.stats()
    assert after["local_plans"] > before["local_plans"]  # the steps without the actor planned locally
    import time

    deadline = time.time() + 120  # re-created by name by the next step that asks, with no help from outside
    while planner.stats()["global_plans"] <= after["global_plans"] and time.time() < deadline:
        eng.generate(prompts, sp)
    assert planner.stats()["global_plans"] > after["global_plans"]
    state = ray_local.get(ray_local.get_actor(ACTOR_NAME, namespace=NAMESPACE).state.remote())
    assert state["replicas"]["replica-0"]["has_cost_table"]  # the new actor holds the replica's cost table again
    assert eng.runner.pool.num_used == 0
