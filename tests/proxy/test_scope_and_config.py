"""Scope hashing, cache policy and pion-serve's configuration, without processes."""

from __future__ import annotations

import pytest

from pion.common.errors import ConfigError
from pion.proxy.config import ServeConfig, load_config
from pion.proxy.scope import cache_policy, last_user_text, scope_of, storable


def _body(*messages: tuple[str, str], **extra: object) -> dict:
    return {"model": "m", "messages": [{"role": r, "content": c} for r, c in messages], **extra}


def test_scope_ignores_the_conversation_but_not_the_system_prompt() -> None:
    a = scope_of(_body(("system", "S"), ("user", "q1")), "pion", "m")
    b = scope_of(_body(("system", "S"), ("user", "q2")), "pion", "m")
    c = scope_of(_body(("system", "S"), ("user", "x"), ("assistant", "y"), ("user", "q1")), "pion", "m")
    d = scope_of(_body(("system", "T"), ("user", "x"), ("assistant", "y"), ("user", "q1")), "pion", "m")
    # scope v2: plain earlier turns resolve into the compared text (test_conversation_scope.py)
    assert (a == b, a == c, a == d) == (True, True, False)


@pytest.mark.parametrize("change", [
    {"backend": "ollama"}, {"model": "other"}, {"system": "T"},
    {"extra": {"tools": [{"type": "function", "function": {"name": "f"}}]}},
    {"extra": {"response_format": {"type": "json_object"}}},
])
def test_scope_changes_with_backend_model_system_tools_and_format(change: dict) -> None:
    base = scope_of(_body(("system", "S"), ("user", "q")), "pion", "m")
    body = _body(("system", change.get("system", "S")), ("user", "q"), **change.get("extra", {}))
    assert scope_of(body, change.get("backend", "pion"), change.get("model", "m")) != base


def test_sampling_knobs_do_not_change_the_scope() -> None:
    plain = scope_of(_body(("user", "q")), "pion", "m")
    assert scope_of(_body(("user", "q"), temperature=0.1, max_tokens=9), "pion", "m") == plain


@pytest.mark.parametrize("headers, body_extra, lookup, store", [
    ({}, {}, True, True),
    ({"cache-control": "no-cache"}, {}, False, True),
    ({"cache-control": "no-store"}, {}, True, False),
    ({"cache-control": "no-cache, no-store"}, {}, False, False),
    ({}, {"cache": {"no-cache": True}}, False, True),
    ({}, {"cache": {"no-store": True}}, True, False),
    ({}, {"n": 2}, False, False),
])
def test_cache_policy_follows_headers_body_and_n(headers: dict, body_extra: dict, lookup: bool, store: bool) -> None:
    policy = cache_policy(_body(("user", "q"), **body_extra), headers, cache_on=True)
    assert (policy.lookup, policy.store) == (lookup, store)


def test_requests_not_ending_in_user_text_are_not_cached() -> None:
    assert last_user_text(_body(("user", "q"), ("assistant", "a"))) is None
    assert last_user_text({"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]}) == "hi"
    assert cache_policy(_body(("user", "   ")), {}, cache_on=True).lookup is False


def test_only_single_stop_answers_without_tool_calls_are_storable() -> None:
    ok = {"choices": [{"message": {"content": "x"}, "finish_reason": "stop"}]}
    assert storable(ok) == "x"
    assert storable({"choices": [{"message": {"content": "x"}, "finish_reason": "length"}]}) is None
    assert storable({"choices": [{"message": {"content": None, "tool_calls": [{}]}, "finish_reason": "stop"}]}) is None
    assert storable({"choices": ok["choices"] * 2}) is None


def test_config_defaults_match_the_spec_but_for_the_verifier_and_its_threshold() -> None:
    config = load_config([], env={})
    assert (config.backend, config.port, config.pion_port) == ("pion", 8321, 1974)
    # The spec's 0.85 is the guard's threshold; the default verifier is cross (issue 18).
    assert (config.verifier, config.cache_threshold) == ("cross", 0.65)
    assert load_config(["--verifier", "guard"], env={}).cache_threshold == 0.85
    assert (config.host, config.embed_backend, config.cache_active) == ("127.0.0.1", "auto", True)


def test_the_lookup_threshold_defaults_to_the_one_each_verifier_was_measured_with() -> None:
    chosen = {v: load_config(["--verifier", v], env={}).cache_threshold for v in ("guard", "aligned", "learned", "cross")}
    assert chosen == {"guard": 0.85, "aligned": 0.8, "learned": 0.65, "cross": 0.65}
    assert load_config(["--verifier", "cross", "--cache-threshold", "0.75"], env={}).lookup_threshold == 0.75
    assert load_config([], env={"PION_SERVE_VERIFIER": "cross"}).lookup_threshold == 0.65


def test_every_cli_reference_flag_of_this_layer_parses() -> None:
    config = load_config(["--backend", "ollama", "--backend-url", "http://127.0.0.1:9", "--model", "m",
                          "--port", "9001", "--pion-host", "127.0.0.2", "--pion-port", "9002",
                          "--pion-password", "pw", "--cache-threshold", "0.9", "--no-cache",
                          "--ollama-url", "http://127.0.0.1:10", "--embed-backend", "sie",
                          "--sie-url", "http://127.0.0.1:11", "--sie-model", "bge"], env={})
    assert (config.backend, config.backend_url, config.model, config.port, config.pion_host, config.pion_port,
            config.pion_password, config.cache_threshold, config.cache_enabled, config.ollama_url,
            config.embed_backend, config.sie_url, config.sie_model) == (
        "ollama", "http://127.0.0.1:9", "m", 9001, "127.0.0.2", 9002, "pw", 0.9, False, "http://127.0.0.1:10",
        "sie", "http://127.0.0.1:11", "bge")


def test_ollama_backend_uses_ollama_url_unless_backend_url_is_given() -> None:
    assert load_config(["--backend", "ollama", "--ollama-url", "http://127.0.0.1:7"], env={}
                       ).effective_backend_url == "http://127.0.0.1:7"
    assert load_config(["--backend", "ollama", "--ollama-url", "http://127.0.0.1:7", "--backend-url",
                        "http://127.0.0.1:8"], env={}).effective_backend_url == "http://127.0.0.1:8"
    assert load_config(["--backend", "vllm", "--ollama-url", "http://127.0.0.1:7"], env={}
                       ).effective_backend_url is None


def test_flags_override_environment_which_overrides_defaults() -> None:
    env = {"PION_SERVE_BACKEND": "ollama", "PION_SERVE_CACHE_THRESHOLD": "0.9", "PION_SERVE_CACHE_ENABLED": "0"}
    config = load_config(["--backend", "claude", "--model", "claude-3-5-sonnet-20241022"], env=env)
    assert (config.backend, config.model, config.cache_threshold, config.cache_enabled) == (
        "claude", "claude-3-5-sonnet-20241022", 0.9, False)
    assert load_config(["--no-cache"], env={}).cache_active is False
    assert load_config(["--embed-backend", "none"], env={}).cache_active is False


@pytest.mark.parametrize("kwargs, message", [
    ({"backend": "bard"}, "backend: unknown backend 'bard'"),
    ({"cache_threshold": 1.5}, "cache_threshold: 1.5 is not between -1 and 1"),
    ({"port": 0}, "port: 0 is not a TCP port"),
    ({"embed_backend": "sie"}, "embed_backend: 'sie' needs --sie-url"),
])
def test_bad_config_values_name_the_key(kwargs: dict, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        ServeConfig(**kwargs)
    assert str(info.value).startswith(message)


def test_bad_environment_value_names_the_variable() -> None:
    with pytest.raises(ConfigError) as info:
        load_config([], env={"PION_SERVE_PORT": "eighty"})
    assert str(info.value) == "PION_SERVE_PORT: expected an integer, got 'eighty'"
