"""Request bodies of the OpenAI-compatible API (pydantic), and their mapping to engine SamplingParams.

Fields OpenAI defines but this server cannot honour (n > 1, logprobs, tools, penalties != 0, ...) are
rejected with a 400 that names them, never silently ignored; unknown fields are ignored, as OpenAI does.
Extensions (as in vLLM): top_k, ignore_eos, stop_token_ids, include_spec_stats.
"""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from router.errors import APIError
from workers.config import SamplingParams


class StreamOptions(BaseModel):
    include_usage: bool = False


class _Common(BaseModel):
    model_config = ConfigDict(extra="ignore")

    model: str = Field(..., description="Model name, as listed by /v1/models.")
    max_tokens: int | None = Field(None, description="Maximum tokens to generate.")
    temperature: float | None = Field(None, description="0 = greedy; default 1.")
    top_p: float | None = None
    top_k: int | None = Field(None, description="Extension: keep the k most likely tokens (0 = off).")
    seed: int | None = None
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = Field(None, description="Extension: token ids that end generation.")
    ignore_eos: bool = Field(False, description="Extension: keep generating past end-of-sequence.")
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: int = 1
    logprobs: bool | int | None = None
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    logit_bias: dict[str, float] | None = None
    user: str | None = None
    include_spec_stats: bool = Field(False, description="Extension: add per-request speculative-decoding "
                                     "stats (drafts, accepted per position) as `metrics.speculative_decoding`.")

    def check_supported(self) -> None:
        if self.n != 1:
            raise APIError(400, "only n=1 is supported", "n")
        if self.logprobs not in (None, False, 0):
            raise APIError(400, "logprobs are not supported", "logprobs")
        if self.presence_penalty or self.frequency_penalty:
            raise APIError(400, "presence/frequency penalties are not supported",
                           "presence_penalty" if self.presence_penalty else "frequency_penalty")
        if self.logit_bias:
            raise APIError(400, "logit_bias is not supported", "logit_bias")

    def sampling_params(self, default_max_tokens: int) -> SamplingParams:
        from pydantic import ValidationError

        fields = {"max_tokens": self.max_tokens if self.max_tokens is not None else default_max_tokens,
                  "temperature": 1.0 if self.temperature is None else self.temperature,
                  "top_p": 1.0 if self.top_p is None else self.top_p, "top_k": self.top_k or 0,
                  "seed": self.seed, "stop": self.stop or [], "stop_token_ids": self.stop_token_ids or [],
                  "ignore_eos": self.ignore_eos}
        try:
            return SamplingParams(**fields)
        except ValidationError as exc:
            e = exc.errors()[0]
            param = ".".join(str(x) for x in e.get("loc", ()))
            raise APIError(400, f"{param}: {e.get('msg')}", param or None) from None


class CompletionRequest(_Common):
    prompt: str | list[int] | list[str] = Field(..., description="Text, or token ids.")
    echo: bool = False
    suffix: str | None = None
    best_of: int | None = None

    def check_supported(self) -> None:
        super().check_supported()
        if isinstance(self.prompt, list) and self.prompt and isinstance(self.prompt[0], str):
            if len(self.prompt) != 1:
                raise APIError(400, "one prompt per request is supported", "prompt")
        if self.echo:
            raise APIError(400, "echo is not supported", "echo")
        if self.suffix:
            raise APIError(400, "suffix is not supported", "suffix")
        if self.best_of not in (None, 1):
            raise APIError(400, "best_of is not supported", "best_of")

    def prompt_input(self) -> str | list[int]:
        if isinstance(self.prompt, list) and self.prompt and isinstance(self.prompt[0], str):
            return self.prompt[0]
        return self.prompt


class ContentPart(BaseModel):
    model_config = ConfigDict(extra="ignore")
    type: Literal["text"]
    text: str


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore")
    role: Literal["system", "user", "assistant", "developer"]
    content: str | list[ContentPart] | None = None

    def text(self) -> str:
        if isinstance(self.content, list):
            return "".join(p.text for p in self.content)
        return self.content or ""


class ChatCompletionRequest(_Common):
    messages: list[ChatMessage] = Field(..., min_length=1)
    max_completion_tokens: int | None = None
    tools: list[dict] | None = None
    response_format: dict | None = None

    def check_supported(self) -> None:
        super().check_supported()
        if self.tools:
            raise APIError(400, "tools are not supported", "tools")
        if self.response_format and self.response_format.get("type") not in (None, "text"):
            raise APIError(400, "only response_format type 'text' is supported", "response_format")
        if self.max_completion_tokens is not None and self.max_tokens is None:
            self.max_tokens = self.max_completion_tokens

    def chat_messages(self) -> list[dict[str, str]]:
        return [{"role": "system" if m.role == "developer" else m.role, "content": m.text()} for m in self.messages]
