"""Google Gemini API: models/{model}:generateContent and :streamGenerateContent?alt=sse.

Roles: assistant -> "model", system -> ``systemInstruction``. finishReason STOP -> stop,
MAX_TOKENS -> length, SAFETY / RECITATION / BLOCKLIST / PROHIBITED_CONTENT -> content_filter.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, Mapping
from typing import Any

from pion.proxy.backends.base import (Backend, BackendHTTPError, completion_id, json_object, make_chunk,
                                      make_completion, max_tokens_of, openai_error, sse_data,
                                      stop_list, text_of, usage_of)

_FINISH = {"STOP": "stop", "MAX_TOKENS": "length"}


def _finish(reason: Any) -> str | None:
    if reason in (None, "", "FINISH_REASON_UNSPECIFIED"):
        return None
    return _FINISH.get(str(reason), "content_filter")


def _text(data: Mapping[str, Any]) -> str:
    cands = data.get("candidates") or [{}]
    return "".join(p.get("text", "") for p in cands[0].get("content", {}).get("parts", []))


class GeminiBackend(Backend):
    default_url = "https://generativelanguage.googleapis.com"
    key_env = "GEMINI_API_KEY"

    def _headers(self, client: Mapping[str, str]) -> dict[str, str]:
        return {"content-type": "application/json", **self.credential(client, "x-goog-api-key")}

    def _request(self, body: dict[str, Any]) -> dict[str, Any]:
        msgs = body.get("messages", [])
        system = "\n\n".join(text_of(m.get("content")) for m in msgs if m.get("role") in ("system", "developer"))
        contents = [{"role": "model" if m.get("role") == "assistant" else "user",
                     "parts": [{"text": text_of(m.get("content"))}]}
                    for m in msgs if m.get("role") not in ("system", "developer")]
        config: dict[str, Any] = {}
        for src, dst in (("temperature", "temperature"), ("top_p", "topP"), ("seed", "seed")):
            if body.get(src) is not None:
                config[dst] = body[src]
        if (n := max_tokens_of(body)) is not None:
            config["maxOutputTokens"] = n
        if (stop := stop_list(body)) is not None:
            config["stopSequences"] = stop
        req: dict[str, Any] = {"contents": contents}
        if system:
            req["systemInstruction"] = {"parts": [{"text": system}]}
        if config:
            req["generationConfig"] = config
        return req

    def _url(self, model: str, verb: str) -> str:
        model = model.removeprefix("models/")
        return f"{self.base_url}/v1beta/models/{model}:{verb}"

    async def complete(self, body: dict[str, Any], headers: Mapping[str, str]) -> dict[str, Any]:
        model = str(body.get("model"))
        response = await self.send("POST", self._url(model, "generateContent"), headers=self._headers(headers),
                                   json_body=self._request(body))
        data = json_object(response, self.name)
        usage = data.get("usageMetadata", {})
        cands = data.get("candidates") or [{}]
        return make_completion(model, _text(data), _finish(cands[0].get("finishReason")) or "stop",
                               usage_of(usage.get("promptTokenCount"), usage.get("candidatesTokenCount")))

    async def stream(self, body: dict[str, Any], headers: Mapping[str, str]) -> AsyncGenerator[dict[str, Any], None]:
        model = str(body.get("model"))
        response = await self.send("POST", self._url(model, "streamGenerateContent") + "?alt=sse",
                                   headers=self._headers(headers), json_body=self._request(body), stream=True)
        cid = completion_id()
        try:
            yield make_chunk(cid, model, {"role": "assistant", "content": ""})
            async for data in sse_data(response):
                try:
                    event = json.loads(data)
                except ValueError:
                    continue
                if "error" in event:
                    err = event["error"]
                    raise BackendHTTPError(502, openai_error(str(err.get("message", "backend error")),
                                                             str(err.get("status", "backend_error"))))
                if text := _text(event):
                    yield make_chunk(cid, model, {"content": text})
                cands = event.get("candidates") or [{}]
                if (finish := _finish(cands[0].get("finishReason"))) is not None:
                    yield make_chunk(cid, model, {}, finish)
        finally:
            await response.aclose()

    async def models(self, headers: Mapping[str, str]) -> dict[str, Any]:
        response = await self.send("GET", f"{self.base_url}/v1beta/models", headers=self._headers(headers))
        return {"object": "list", "data": [{"id": str(m.get("name", "")).removeprefix("models/"),
                                             "object": "model", "created": 0, "owned_by": "google"}
                                            for m in json_object(response, self.name).get("models", [])]}
