"""The OpenAI-compatible HTTP API (FastAPI): completions, chat completions, SSE streaming, models, health,
Prometheus metrics; OpenAI error bodies, optional bearer API key, body size limit, overload 503.

`build_api(backend, ...)` works over any `router.backend.Backend`: one in-process engine, or the cluster's
router over Ray Serve replicas. A client that disconnects aborts its request (its KV blocks are freed).
"""
from __future__ import annotations

import hmac
import inspect
import json
import time
import uuid
from collections.abc import AsyncIterator

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, StreamingResponse

from router.backend import Backend, BackendUnavailableError, Delta
from router.errors import APIError, error_body, error_response, install_handlers
from router.metrics_text import prometheus_text
from router.schemas import ChatCompletionRequest, CompletionRequest
from workers.engine import InvalidRequestError


class _AbortingStream(StreamingResponse):
    """Closes its body generator however the response ends, so a client that disconnects mid-stream has its
    request aborted at once (the generator's `finally` aborts it) instead of when garbage is collected."""

    async def __call__(self, scope, receive, send):
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self.body_iterator.aclose()


class BearerAuth:
    """ASGI middleware (not BaseHTTPMiddleware, which would hide client disconnects from streaming
    responses): /v1/* requires `Authorization: Bearer <key>`, compared in constant time."""

    def __init__(self, app, key: str) -> None:
        self.app, self.key = app, key.encode()

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope["path"].startswith("/v1/"):
            header = dict(scope.get("headers") or []).get(b"authorization", b"")
            given = header[7:] if header[:7].lower() == b"bearer " else b""
            if not hmac.compare_digest(given, self.key):
                response = error_response(401, "invalid or missing API key (Authorization: Bearer ...)",
                                          code="invalid_api_key")
                return await response(scope, receive, send)
        return await self.app(scope, receive, send)


class BodyLimit:
    """ASGI middleware: refuse bodies over `limit` bytes with a 413 (by Content-Length, or while reading)."""

    def __init__(self, app, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        length = dict(scope.get("headers") or []).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.limit:
            return await error_response(413, f"request body over {self.limit} bytes")(scope, receive, send)
        seen = 0

        async def limited():
            nonlocal seen
            msg = await receive()
            seen += len(msg.get("body", b""))
            if seen > self.limit:
                raise APIError(413, f"request body over {self.limit} bytes")
            return msg

        return await self.app(scope, limited, send)


def build_api(backend: Backend, api_key: str | None = None, max_body_bytes: int = 1 << 20,
              max_inflight: int = 256, default_max_tokens: int = 256) -> FastAPI:
    app = FastAPI(title="specfleet", description="OpenAI-compatible API with speculative decoding")
    install_handlers(app)
    app.add_middleware(BodyLimit, limit=max_body_bytes)

    if api_key is not None:
        app.add_middleware(BearerAuth, key=api_key)

    app.state.draining = False  # set on SIGTERM (cluster: Ingress.drain): new requests get 503

    def _admit(model: str) -> None:
        if app.state.draining:
            raise APIError(503, "server is shutting down; retry on another instance", headers={"Retry-After": "1"})
        if model != backend.model_name:
            raise APIError(404, f"model {model!r} not found; this server serves {backend.model_name!r}", "model",
                           "model_not_found")
        if backend.num_inflight() >= max_inflight:
            raise APIError(503, f"server overloaded ({max_inflight} requests in flight); retry shortly",
                           headers={"Retry-After": "1"})

    @app.get("/health")
    async def health():
        """200 only when requests can be served: not while draining, and (cluster) not before a target
        replica answers, so a readiness probe does not send traffic to an ingress whose replicas still load."""
        if app.state.draining:
            return error_response(503, "draining")
        ready = getattr(backend, "ready", None)
        if ready is not None and not await ready():
            return error_response(503, "no target replica is ready yet")
        return {"status": "ok"}

    @app.get("/v1/models")
    async def models() -> dict:
        return {"object": "list", "data": [{"id": backend.model_name, "object": "model", "created": 0,
                                            "owned_by": "specfleet"}]}

    @app.get("/metrics")
    async def metrics() -> PlainTextResponse:
        stats = backend.stats()
        if inspect.isawaitable(stats):  # the cluster's backend asks its replicas
            stats = await stats
        return PlainTextResponse(prometheus_text(stats), media_type="text/plain; version=0.0.4")

    @app.post("/v1/completions")
    async def completions(body: CompletionRequest, request: Request):
        body.check_supported()
        _admit(body.model)
        return await _serve(request, body, body.prompt_input(), None, "text_completion")

    @app.post("/v1/chat/completions")
    async def chat(body: ChatCompletionRequest, request: Request):
        body.check_supported()
        _admit(body.model)
        return await _serve(request, body, None, body.chat_messages(), "chat.completion")

    async def _serve(request: Request, body, prompt, messages, kind: str):
        params = body.sampling_params(default_max_tokens)
        rid = f"{'chatcmpl' if messages is not None else 'cmpl'}-{uuid.uuid4().hex[:24]}"
        stream = backend.generate(prompt, messages, params, rid)
        try:
            first = await anext(stream)  # invalid input (too long, bad token ids) fails here, before any byte
        except InvalidRequestError as exc:
            raise APIError(400, str(exc), "prompt" if messages is None else "messages") from None
        except BackendUnavailableError as exc:
            raise APIError(503, str(exc), headers={"Retry-After": "1"}) from None
        created = int(time.time())
        if body.stream:
            include_usage = bool(body.stream_options and body.stream_options.include_usage)
            return _AbortingStream(_sse(request, first, stream, rid, created, kind, body, include_usage),
                                     media_type="text/event-stream")
        try:
            out = await _collect(request, first, stream, rid, created, kind, body)
        except BackendUnavailableError:
            # its replica died mid-request; the client has seen nothing yet, so run it once more from the
            # start (another replica; a seeded or greedy request gives the same answer)
            stream = backend.generate(prompt, messages, params, rid + "-retry")
            try:
                out = await _collect(request, await anext(stream), stream, rid, created, kind, body)
            except BackendUnavailableError as exc:
                raise APIError(503, str(exc), headers={"Retry-After": "1"}) from None
        return JSONResponse(out)

    async def _collect(request, first: Delta, stream, rid, created, kind, body) -> dict:
        text, last = first.text, first
        try:
            if not first.finished:
                async for d in stream:
                    text += d.text
                    last = d
                    if await request.is_disconnected():
                        break
        finally:
            await stream.aclose()  # aborts the request if it is still running
        choice = ({"index": 0, "message": {"role": "assistant", "content": text}} if kind == "chat.completion"
                  else {"index": 0, "text": text, "logprobs": None})
        choice["finish_reason"] = last.finish_reason
        out = {"id": rid, "object": kind, "created": created, "model": backend.model_name, "choices": [choice],
               "usage": _usage(last)}
        if body.include_spec_stats and last.spec_decode is not None:
            out["metrics"] = {"speculative_decoding": last.spec_decode}
        return out

    async def _sse(request: Request, first: Delta, stream, rid, created, kind, body,
                   include_usage) -> AsyncIterator[bytes]:
        chat = kind == "chat.completion"
        obj = "chat.completion.chunk" if chat else "text_completion"

        def chunk(d: Delta, role: bool = False) -> bytes:
            if chat:
                delta = {"role": "assistant", "content": d.text} if role else {"content": d.text}
                choice = {"index": 0, "delta": delta, "finish_reason": d.finish_reason}
            else:
                choice = {"index": 0, "text": d.text, "logprobs": None, "finish_reason": d.finish_reason}
            msg = {"id": rid, "object": obj, "created": created, "model": backend.model_name, "choices": [choice]}
            if d.finished and body.include_spec_stats and d.spec_decode is not None:
                msg["metrics"] = {"speculative_decoding": d.spec_decode}
            return f"data: {json.dumps(msg)}\n\n".encode()

        try:
            yield chunk(first, role=True)
            last = first
            if not first.finished:
                async for d in stream:
                    last = d
                    yield chunk(d)
                    if await request.is_disconnected():  # the server may not fail our sends: ask
                        return
            if include_usage:
                usage = {"id": rid, "object": obj, "created": created, "model": backend.model_name, "choices": [],
                         "usage": _usage(last)}
                yield f"data: {json.dumps(usage)}\n\n".encode()
            yield b"data: [DONE]\n\n"
        except RuntimeError as exc:  # the engine or its replica failed mid-stream: say so, then end the stream
            status = 503 if isinstance(exc, BackendUnavailableError) else 500
            yield f"data: {json.dumps(error_body(status, str(exc)))}\n\n".encode()
        finally:
            await stream.aclose()  # a disconnected client lands here: the request is aborted

    return app


def _usage(d: Delta) -> dict:
    return {"prompt_tokens": d.prompt_tokens, "completion_tokens": d.completion_tokens,
            "total_tokens": d.prompt_tokens + d.completion_tokens}
