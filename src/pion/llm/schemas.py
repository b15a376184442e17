"""OpenAI request validation and response shapes for pion-llm.

Requests are pydantic models (unknown fields are ignored, as OpenAI-compatible servers do, so
SDK-added fields never break a call). Responses are plain dicts in the exact OpenAI shapes:
``chat.completion``, ``chat.completion.chunk`` (SSE, ending ``data: [DONE]``), ``text_completion``
and ``list`` of ``model``. Errors are ``{"error": {"message", "type", "param", "code"}}``.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from pion.llm.defaults import GenerationDefaults
from pion.llm.engine import SamplingParams

DEFAULT_MAX_TOKENS = 256
MAX_STOP_SEQUENCES = 4


class _Request(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=False)

    model: str
    max_tokens: int | None = Field(default=None, gt=0)
    # None (omitted or null): the served model's default, see pion.llm.defaults.
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    stop: str | list[str] | None = None
    seed: int | None = Field(default=None, ge=-(2**63), le=2**63 - 1)  # int64, as OpenAI; torch refuses more
    n: int = Field(default=1, ge=1, le=1)
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    user: str | None = None

    @field_validator("stop")
    @classmethod
    def _check_stop(cls, value: str | list[str] | None) -> str | list[str] | None:
        if isinstance(value, list) and len(value) > MAX_STOP_SEQUENCES:
            raise ValueError(f"at most {MAX_STOP_SEQUENCES} stop sequences")
        return value

    def sampling(self, defaults: GenerationDefaults) -> SamplingParams:
        """The request's decoding settings, with ``defaults`` for what it left out."""
        stops = [self.stop] if isinstance(self.stop, str) else list(self.stop or [])
        temperature = defaults.temperature if self.temperature is None else self.temperature
        top_p = defaults.top_p if self.top_p is None else self.top_p
        return SamplingParams(max_tokens=self.effective_max_tokens(), temperature=temperature,
                              top_p=top_p, stop=tuple(s for s in stops if s), seed=self.seed)

    def effective_max_tokens(self) -> int:
        return self.max_tokens or DEFAULT_MAX_TOKENS

    @property
    def include_usage(self) -> bool:
        return bool((self.stream_options or {}).get("include_usage"))


class ContentPart(BaseModel):
    model_config = ConfigDict(extra="ignore")

    type: Literal["text"]
    text: str


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore")

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[ContentPart] | None = None

    def text(self) -> str:
        if isinstance(self.content, list):
            return "".join(part.text for part in self.content)
        return self.content or ""


def _unsupported(field: str, why: str) -> ValueError:
    return ValueError(f"{field} is not supported by pion-llm ({why}); omit it")


class ChatCompletionRequest(_Request):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(default=None, gt=0)
    logprobs: bool | None = None

    @field_validator("logprobs")
    @classmethod
    def _no_logprobs(cls, value: bool | None) -> bool | None:
        if value:
            raise _unsupported("logprobs", "no token log-probabilities are returned")
        return value

    def effective_max_tokens(self) -> int:
        return self.max_completion_tokens or self.max_tokens or DEFAULT_MAX_TOKENS

    def template_messages(self) -> list[dict[str, str]]:
        """Messages as the chat template wants them (``developer`` is the newer name for ``system``)."""
        return [{"role": "system" if m.role == "developer" else m.role, "content": m.text()} for m in self.messages]


class CompletionRequest(_Request):
    """``/v1/completions``. Fields pion-llm would otherwise ignore are refused (400) when they ask
    for something (``echo: true``, ``best_of > 1``, ``logprobs``, ``suffix``), like ``n > 1``."""

    prompt: str | list[str] | list[int]
    max_tokens: int | None = Field(default=16, gt=0)  # OpenAI's legacy default
    echo: bool = False
    best_of: int | None = None
    logprobs: int | None = None
    suffix: str | None = None

    @field_validator("echo")
    @classmethod
    def _no_echo(cls, value: bool) -> bool:
        if value:
            raise _unsupported("echo", "the prompt is not repeated in the answer")
        return value

    @field_validator("best_of")
    @classmethod
    def _no_best_of(cls, value: int | None) -> int | None:
        if value is not None and value != 1:
            raise _unsupported("best_of other than 1", "one completion is generated per request")
        return value

    @field_validator("logprobs")
    @classmethod
    def _no_logprobs(cls, value: int | None) -> int | None:
        if value is not None:
            raise _unsupported("logprobs", "no token log-probabilities are returned")
        return value

    @field_validator("suffix")
    @classmethod
    def _no_suffix(cls, value: str | None) -> str | None:
        if value:
            raise _unsupported("suffix", "no text is inserted after the completion")
        return value

    @field_validator("prompt")
    @classmethod
    def _one_prompt(cls, value: str | list[str] | list[int]) -> str | list[str] | list[int]:
        if isinstance(value, list) and value and isinstance(value[0], str) and len(value) != 1:
            raise ValueError("only one prompt per request is supported")
        if value == "" or value == []:
            raise ValueError("prompt must not be empty")
        return value


# -- errors -----------------------------------------------------------------------------------------

def error_body(message: str, err_type: str = "invalid_request_error", param: str | None = None,
               code: str | None = None) -> dict[str, Any]:
    """OpenAI's error envelope."""
    return {"error": {"message": message, "type": err_type, "param": param, "code": code}}


# -- responses --------------------------------------------------------------------------------------

def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:24]}"


def usage(prompt_tokens: int, completion_tokens: int, cached_tokens: int) -> dict[str, Any]:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "prompt_tokens_details": {"cached_tokens": cached_tokens}}


def chat_completion(rid: str, model: str, created: int, text: str, finish_reason: str,
                    use: dict[str, Any], fingerprint: str) -> dict[str, Any]:
    return {"id": rid, "object": "chat.completion", "created": created, "model": model,
            "system_fingerprint": fingerprint,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text, "refusal": None},
                         "logprobs": None, "finish_reason": finish_reason}],
            "usage": use}


def chat_chunk(rid: str, model: str, created: int, delta: dict[str, Any], finish_reason: str | None,
               fingerprint: str) -> dict[str, Any]:
    return {"id": rid, "object": "chat.completion.chunk", "created": created, "model": model,
            "system_fingerprint": fingerprint,
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}]}


def usage_chunk(rid: str, obj: str, model: str, created: int, use: dict[str, Any],
                fingerprint: str) -> dict[str, Any]:
    """The final chunk OpenAI sends with ``stream_options.include_usage``: no choices, just usage."""
    return {"id": rid, "object": obj, "created": created, "model": model, "system_fingerprint": fingerprint,
            "choices": [], "usage": use}


def text_completion(rid: str, model: str, created: int, text: str, finish_reason: str | None,
                    use: dict[str, Any] | None, fingerprint: str) -> dict[str, Any]:
    body: dict[str, Any] = {"id": rid, "object": "text_completion", "created": created, "model": model,
                            "system_fingerprint": fingerprint,
                            "choices": [{"index": 0, "text": text, "logprobs": None,
                                         "finish_reason": finish_reason}]}
    if use is not None:
        body["usage"] = use
    return body


def model_list(model_id: str, created: int) -> dict[str, Any]:
    return {"object": "list", "data": [{"id": model_id, "object": "model", "created": created,
                                        "owned_by": "pion"}]}


def sse(payload: dict[str, Any] | str) -> bytes:
    """One server-sent event line pair."""
    data = payload if isinstance(payload, str) else json.dumps(payload, separators=(",", ":"))
    return f"data: {data}\n\n".encode()


def now() -> int:
    return int(time.time())
