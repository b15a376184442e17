"""Anthropic Messages API: POST /v1/messages, translated both ways, streaming included.

System messages become the top-level ``system`` string; ``max_tokens`` is required by
Anthropic (default 1024). Streaming events map to OpenAI chunks natively:
message_start -> role chunk, content_block_delta(text_delta) -> content chunk,
message_delta(stop_reason) -> finish chunk; ``error`` events raise.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, Mapping
from typing import Any

from pion.proxy.backends.base import (Backend, BackendHTTPError, completion_id, json_object, make_chunk,
                                      make_completion, max_tokens_of, openai_error, sse_data,
                                      stop_list, text_of, usage_of)

ANTHROPIC_VERSION = "2023-06-01"
DEFAULT_MAX_TOKENS = 1024
_FINISH = {"end_turn": "stop", "stop_sequence": "stop", "max_tokens": "length", "tool_use": "tool_calls",
           "refusal": "content_filter"}


class ClaudeBackend(Backend):
    default_url = "https://api.anthropic.com"
    key_env = "ANTHROPIC_API_KEY"

    def _headers(self, client: Mapping[str, str]) -> dict[str, str]:
        return {"content-type": "application/json", "anthropic-version": ANTHROPIC_VERSION,
                **self.credential(client, "x-api-key")}

    def _request(self, body: dict[str, Any], stream: bool) -> dict[str, Any]:
        system = "\n\n".join(text_of(m.get("content")) for m in body.get("messages", [])
                             if m.get("role") in ("system", "developer"))
        messages = [{"role": "assistant" if m.get("role") == "assistant" else "user",
                     "content": text_of(m.get("content"))}
                    for m in body.get("messages", []) if m.get("role") not in ("system", "developer")]
        req: dict[str, Any] = {"model": body.get("model"), "messages": messages,
                               "max_tokens": max_tokens_of(body) or DEFAULT_MAX_TOKENS, "stream": stream}
        if system:
            req["system"] = system
        for key in ("temperature", "top_p"):
            if body.get(key) is not None:
                req[key] = body[key]
        if (stop := stop_list(body)) is not None:
            req["stop_sequences"] = stop
        return req

    async def complete(self, body: dict[str, Any], headers: Mapping[str, str]) -> dict[str, Any]:
        response = await self.send("POST", f"{self.base_url}/v1/messages", headers=self._headers(headers),
                                   json_body=self._request(body, False))
        data = json_object(response, self.name)
        content = "".join(b.get("text", "") for b in data.get("content", []) if b.get("type") == "text")
        usage = data.get("usage", {})
        return make_completion(str(data.get("model", body.get("model"))), content,
                               _FINISH.get(str(data.get("stop_reason")), "stop"),
                               usage_of(usage.get("input_tokens"), usage.get("output_tokens")))

    async def stream(self, body: dict[str, Any], headers: Mapping[str, str]) -> AsyncGenerator[dict[str, Any], None]:
        response = await self.send("POST", f"{self.base_url}/v1/messages", headers=self._headers(headers),
                                   json_body=self._request(body, True), stream=True)
        cid, model = completion_id(), str(body.get("model"))
        try:
            async for data in sse_data(response):
                try:
                    event = json.loads(data)
                except ValueError:
                    continue
                kind = event.get("type")
                if kind == "message_start":
                    msg = event.get("message", {})
                    model = str(msg.get("model", model))
                    yield make_chunk(cid, model, {"role": "assistant", "content": ""})
                elif kind == "content_block_delta" and event.get("delta", {}).get("type") == "text_delta":
                    yield make_chunk(cid, model, {"content": event["delta"].get("text", "")})
                elif kind == "message_delta" and event.get("delta", {}).get("stop_reason"):
                    yield make_chunk(cid, model, {}, _FINISH.get(event["delta"]["stop_reason"], "stop"))
                elif kind == "message_stop":
                    break
                elif kind == "error":
                    err = event.get("error", {})
                    raise BackendHTTPError(502, openai_error(str(err.get("message", "backend error")),
                                                             str(err.get("type", "backend_error"))))
        finally:
            await response.aclose()

    async def models(self, headers: Mapping[str, str]) -> dict[str, Any]:
        response = await self.send("GET", f"{self.base_url}/v1/models", headers=self._headers(headers))
        return {"object": "list", "data": [{"id": m.get("id", ""), "object": "model", "created": 0,
                                             "owned_by": "anthropic"} for m in json_object(response, self.name).get("data", [])]}
