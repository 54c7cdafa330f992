"""Serve the API from one in-process engine with uvicorn (no Ray): `specfleet serve --local`."""
from __future__ import annotations

import logging
import time

log = logging.getLogger(__name__)


def serve_local(engine_config, host: str = "127.0.0.1", port: int = 8000, api_key: str | None = None,
                model_name: str | None = None, drain_timeout_s: float = 30.0, **api_kw) -> None:
    """On SIGTERM uvicorn stops accepting connections and waits up to `drain_timeout_s` for in-flight ones."""
    import uvicorn

    from router.api import build_api
    from router.backend import LocalBackend
    from workers.async_engine import AsyncLLMEngine
    from workers.engine import LLMEngine

    t0 = time.perf_counter()
    engine = LLMEngine(engine_config)
    name = model_name or engine_config.model
    app = build_api(LocalBackend(AsyncLLMEngine(engine), name), api_key=api_key, **api_kw)
    print(f"specfleet: {name} ready in {time.perf_counter() - t0:.1f} s; OpenAI API on http://{host}:{port}/v1 "
          f"(speculation: {engine_config.spec.method}, verify: {engine_config.spec.verify})", flush=True)
    uvicorn.run(app, host=host, port=port, log_level="warning", timeout_graceful_shutdown=drain_timeout_s)
