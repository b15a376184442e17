"""Ollama's native API: POST /api/chat (NDJSON streaming), GET /api/tags.

Translation: OpenAI sampling fields go to ``options`` (max_tokens -> num_predict);
the reply's ``done_reason`` "length" becomes finish_reason "length", anything else "stop".
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, Mapping
from typing import Any

from pion.proxy.backends.base import (Backend, BackendHTTPError, completion_id, json_object, make_chunk,
                                      make_completion, max_tokens_of, openai_error, stop_list,
                                      text_of, usage_of)


def _finish(done_reason: Any) -> str:
    return "length" if done_reason == "length" else "stop"


class OllamaBackend(Backend):
    default_url = "http://127.0.0.1:11434"

    def _request(self, body: dict[str, Any], stream: bool) -> dict[str, Any]:
        options: dict[str, Any] = {}
        for src, dst in (("temperature", "temperature"), ("top_p", "top_p"), ("seed", "seed"),
                         ("presence_penalty", "presence_penalty"), ("frequency_penalty", "frequency_penalty")):
            if body.get(src) is not None:
                options[dst] = body[src]
        if (n := max_tokens_of(body)) is not None:
            options["num_predict"] = n
        if (stop := stop_list(body)) is not None:
            options["stop"] = stop
        messages = [{"role": m.get("role", "user"), "content": text_of(m.get("content"))}
                    for m in body.get("messages", [])]
        req: dict[str, Any] = {"model": body.get("model"), "messages": messages, "stream": stream}
        if options:
            req["options"] = options
        if isinstance(body.get("response_format"), dict) and body["response_format"].get("type") == "json_object":
            req["format"] = "json"
        return req

    async def complete(self, body: dict[str, Any], headers: Mapping[str, str]) -> dict[str, Any]:
        response = await self.send("POST", f"{self.base_url}/api/chat", headers=self.credential(headers, "authorization"),
                                   json_body=self._request(body, False))
        data = json_object(response, self.name)
        content = text_of(data.get("message", {}).get("content"))
        return make_completion(str(data.get("model", body.get("model"))), content,
                               _finish(data.get("done_reason")),
                               usage_of(data.get("prompt_eval_count"), data.get("eval_count")))

    async def stream(self, body: dict[str, Any], headers: Mapping[str, str]) -> AsyncGenerator[dict[str, Any], None]:
        response = await self.send("POST", f"{self.base_url}/api/chat", headers=self.credential(headers, "authorization"),
                                   json_body=self._request(body, True), stream=True)
        cid, model, started = completion_id(), str(body.get("model")), False
        try:
            async for line in response.aiter_lines():
                if not line.strip():
                    continue
                try:
                    data = json.loads(line)
                except ValueError:
                    continue
                if "error" in data:
                    raise BackendHTTPError(502, openai_error(str(data["error"]), "backend_error"))
                if not started:
                    started = True
                    yield make_chunk(cid, model, {"role": "assistant", "content": ""})
                text = data.get("message", {}).get("content", "")
                if text:
                    yield make_chunk(cid, model, {"content": text})
                if data.get("done"):
                    yield make_chunk(cid, model, {}, _finish(data.get("done_reason")))
                    break
        finally:
            await response.aclose()

    async def models(self, headers: Mapping[str, str]) -> dict[str, Any]:
        response = await self.send("GET", f"{self.base_url}/api/tags", headers=self.credential(headers, "authorization"))
        data = json_object(response, self.name)
        return {"object": "list", "data": [{"id": m.get("name", ""), "object": "model", "created": 0,
                                             "owned_by": "ollama"} for m in data.get("models", [])]}
