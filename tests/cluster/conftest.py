"""A loopback-only Ray cluster with fake GPUs and Serve's HTTP proxy, shared by the cluster tests."""
import contextlib
import os

import pytest


@pytest.fixture(scope="session")
def ray_serve_cluster():
    """`with ray_serve_cluster(num_gpus, port):` runs the body on a fresh test cluster."""
    return _ray_serve_cluster


@contextlib.contextmanager
def _ray_serve_cluster(num_gpus: int, port: int):
    ray = pytest.importorskip("ray")
    from ray import serve

    os.environ["RAY_AUTH_MODE"] = "disabled"  # loopback-only test cluster
    if ray.is_initialized():
        ray.shutdown()
    ray.init(num_cpus=8, num_gpus=num_gpus, include_dashboard=False, log_to_driver=False)
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    try:
        yield
    finally:
        serve.shutdown()
        ray.shutdown()
