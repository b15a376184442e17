"""The request body of ``POST /v1/chat/completions`` in pion-serve's OpenAPI document.

Why by hand: the route reads the raw body (it forwards fields it does not know to the backend
untouched, as an OpenAI-compatible proxy must), so FastAPI cannot derive a schema from it. This
is OpenAI's chat request reduced to what pion-serve itself reads; ``additionalProperties`` stays
open for everything it passes through. Schemathesis fuzzes the proxy from this document
(tests/llm/test_openapi_fuzz.py).
"""

from __future__ import annotations

from typing import Any

_CONTENT_PART: dict[str, Any] = {
    "type": "object",
    "required": ["type"],
    "properties": {"type": {"type": "string"}, "text": {"type": "string"}},
}
_MESSAGE: dict[str, Any] = {
    "type": "object",
    "required": ["role"],
    "properties": {
        "role": {"type": "string", "enum": ["system", "developer", "user", "assistant", "tool"]},
        "content": {"anyOf": [{"type": "string"}, {"type": "array", "items": _CONTENT_PART}, {"type": "null"}]},
        "name": {"type": "string"},
        "tool_call_id": {"type": "string"},
    },
}
CHAT_REQUEST_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["model", "messages"],
    "properties": {
        "model": {"type": "string"},
        "messages": {"type": "array", "items": _MESSAGE, "minItems": 1},
        "stream": {"type": "boolean"},
        "max_tokens": {"type": "integer", "minimum": 1},
        "max_completion_tokens": {"type": "integer", "minimum": 1},
        "temperature": {"type": "number", "minimum": 0, "maximum": 2},
        "top_p": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
        "stop": {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}, "maxItems": 4}]},
        "seed": {"type": "integer"},
        "user": {"type": "string"},
    },
    "additionalProperties": True,
}
# FastAPI ``openapi_extra`` for the route: the body is JSON, required.
CHAT_REQUEST_OPENAPI: dict[str, Any] = {
    "requestBody": {"required": True, "content": {"application/json": {"schema": CHAT_REQUEST_SCHEMA}}},
}
