"""ClusterConfig: the one schema for `serve deploy` YAML (application args), `specfleet serve` and KubeRay.

Every field is described; choices are `Literal`s. `serve_config.yaml` and the KubeRay manifests are checked
against it in the tests.
"""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

from cluster.mps import MPSConfig
from workers.config import EngineConfig


class PlacementConfig(BaseModel):
    """Where replicas run. On CPU-only clusters leave the GPU counts at 0.

    A replica is a placement group of engine.tensor_parallel_size bundles on one node: bundle 0 holds the
    replica itself (shard 0, the engine loop), bundle r shard r."""

    model_config = ConfigDict(extra="forbid")

    replica_cpus: float = Field(1.0, ge=0, description="Logical CPUs of a target replica (its engine loop and "
                                "shard 0); its torch threads too (ceil), unless engine.num_threads is set.")
    gpus_per_shard: float = Field(0.0, ge=0, le=1, description="GPUs of each target shard: 1 on GPU clusters "
                                  "(a shard is pinned to its own GPU), 0 on CPU.")
    shard_cpus: float = Field(1.0, ge=0, description="Logical CPUs of each further shard (ranks 1..).")
    ingress_cpus: float = Field(0.5, ge=0, description="Logical CPUs reserved for the HTTP ingress.")


class DrafterConfig(BaseModel):
    """Draft models in their own processes, on GPUs apart from the target shards (engine.spec.method 'draft').
    0 drafters: each replica drafts in its own process."""

    model_config = ConfigDict(extra="forbid")

    count: int = Field(0, ge=0, le=64, description="Drafter deployments. Fewer than replicas: replica i drafts on "
                       "drafter i % count (replicas share it); more: replica i spreads its requests over drafters "
                       "j with j % replicas == i.")
    gpus: float = Field(0.0, ge=0, le=1, description="GPU fraction per drafter: 0.5 puts two drafters on one GPU "
                        "(with MPS, see mps), 0 on CPU. Ray never gives them a GPU a target shard holds.")
    cpus: float = Field(0.5, ge=0, description="Logical CPUs per drafter.")
    node_resource: str | None = Field(None, description="A custom Ray resource each drafter requests one unit of, "
                                      "so drafters land on the nodes that advertise it (the MPS-shared drafter "
                                      "worker group of k8s/overlays/gpu); None: any node with the GPU fraction.")
    mps: MPSConfig = Field(default_factory=MPSConfig, description="NVIDIA MPS for drafters sharing a GPU.")


class HTTPConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    host: str = Field("127.0.0.1", description="Bind address of the HTTP proxy (0.0.0.0 only behind a gateway).")
    port: int = Field(8000, ge=1, le=65535, description="HTTP port.")
    api_key_env: str | None = Field(None, description="Name of an environment variable holding the API key; "
                                    "when set, /v1 requires 'Authorization: Bearer <key>'. The key itself never "
                                    "appears in config files, logs or metrics.")
    max_body_bytes: int = Field(1 << 20, ge=1024, description="Largest accepted request body.")
    max_inflight: int = Field(256, ge=1, description="Requests in flight per ingress before answering 503.")
    default_max_tokens: int = Field(256, ge=1, description="max_tokens when a request gives none.")
    drain_timeout_s: float = Field(30.0, ge=0, description="On SIGTERM: stop taking requests and give in-flight "
                                   "ones this long to finish.")


class BudgetConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    drafter_group: str = Field("default", description="Budget group of replicas drafting in-process (with "
                               "drafters.count > 0 each drafter is its own group).")
    group_capacity: int | None = Field(None, ge=1, description="Draft positions per step the shared drafter "
                                       "serves for the whole group (None: drafters are not shared).")


class ClusterConfig(BaseModel):
    """A specfleet deployment: the served model, its engine, how many replicas, where they run."""

    model_config = ConfigDict(extra="forbid")

    model_name: str | None = Field(None, description="Name clients use in 'model'; default: the engine's model.")
    engine: EngineConfig = Field(default_factory=EngineConfig, description="Engine of every replica.")
    replicas: int = Field(1, ge=1, le=64, description="Target replicas (each owns an engine loop).")
    placement: PlacementConfig = Field(default_factory=PlacementConfig)
    http: HTTPConfig = Field(default_factory=HTTPConfig)
    drafters: DrafterConfig = Field(default_factory=DrafterConfig)
    budget: BudgetConfig = Field(default_factory=BudgetConfig)
    prefix_affinity_tokens: int = Field(64, ge=0, description="Prompt tokens hashed for prefix affinity in the "
                                        "router (0 disables it).")

    @model_validator(mode="after")
    def _check(self) -> "ClusterConfig":
        if self.engine.spec.verify == "adaptive-global" and self.engine.spec.method == "off":
            raise ValueError("verify 'adaptive-global' needs speculation (engine.spec.method ngram or draft)")
        if self.drafters.count and self.engine.spec.method != "draft":
            raise ValueError("drafters.count > 0 needs engine.spec.method 'draft' (n-gram drafting is free and "
                             "runs in the replica)")
        return self

    def drafters_of(self, replica: int) -> list[int]:
        """Drafter indices replica `replica` drafts on: drafter i % count with fewer drafters than replicas,
        else every drafter j with j % replicas == replica (a replica may then spread its requests)."""
        n = self.drafters.count
        if n == 0:
            return []
        if n <= self.replicas:
            return [replica % n]
        return [j for j in range(n) if j % self.replicas == replica]

    @property
    def served_name(self) -> str:
        return self.model_name or self.engine.model
