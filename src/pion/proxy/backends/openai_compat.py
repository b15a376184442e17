"""Backends that already speak OpenAI chat completions: openai, vllm, llamacpp, max, pion.

Requests pass through unchanged (model overridden when pion-serve has --model); the
credential follows the one rule in ``base`` (operator key first, else the client's).
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, Mapping
from typing import Any

from pion.common.ports import DEFAULT_HOST, PION_LLM_PORT
from pion.proxy.backends.base import Backend, BackendHTTPError, json_object, sse_data

# name -> (default base URL, API-key environment variable)
DEFAULTS: dict[str, tuple[str, str]] = {
    "pion": (f"http://{DEFAULT_HOST}:{PION_LLM_PORT}", ""),
    "openai": ("https://api.openai.com", "OPENAI_API_KEY"),
    "vllm": ("http://127.0.0.1:8000", ""),
    "llamacpp": ("http://127.0.0.1:8080", ""),
    "max": ("http://127.0.0.1:8000", ""),
}


class OpenAICompatBackend(Backend):
    """POST {base}/v1/chat/completions, SSE streaming relayed chunk by chunk."""

    def __init__(self, name: str, base_url: str | None, http: Any) -> None:
        self.default_url, self.key_env = DEFAULTS[name]
        super().__init__(name, base_url, http)
        if self.base_url.endswith("/v1"):
            self.base_url = self.base_url[:-3]

    def _headers(self, client: Mapping[str, str]) -> dict[str, str]:
        return {"content-type": "application/json", **self.credential(client, "authorization", "Bearer ")}

    async def complete(self, body: dict[str, Any], headers: Mapping[str, str]) -> dict[str, Any]:
        response = await self.send("POST", f"{self.base_url}/v1/chat/completions",
                                   headers=self._headers(headers), json_body={**body, "stream": False})
        return json_object(response, self.name)

    async def stream(self, body: dict[str, Any], headers: Mapping[str, str]) -> AsyncGenerator[dict[str, Any], None]:
        response = await self.send("POST", f"{self.base_url}/v1/chat/completions",
                                   headers=self._headers(headers),
                                   json_body={**body, "stream": True}, stream=True)
        try:
            async for data in sse_data(response):
                if data.strip() == "[DONE]":
                    break
                try:
                    chunk = json.loads(data)
                except ValueError:
                    continue
                if isinstance(chunk, dict) and "error" in chunk:
                    raise BackendHTTPError(502, chunk)
                yield chunk
        finally:
            await response.aclose()

    async def models(self, headers: Mapping[str, str]) -> dict[str, Any]:
        response = await self.send("GET", f"{self.base_url}/v1/models", headers=self._headers(headers))
        return json_object(response, self.name)
