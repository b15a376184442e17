"""Namespaces: the spec's make_namespace and the derived namespace_for."""

from __future__ import annotations

import hashlib
from typing import Any

from pion import PionPromptCache
from pion.client.namespaces import config_hash, rope_settings, tokenizer_hash
from support.procs import free_port


def test_make_namespace_is_the_spec_sha256_of_the_joined_parts() -> None:
    expected = hashlib.sha256(b"smollm2-135m|fp16|You are helpful.").hexdigest()[:32]
    assert PionPromptCache.make_namespace("smollm2-135m", "fp16", "You are helpful.") == expected


def _local_cache(model: Any, caplog: Any, **kwargs: Any) -> PionPromptCache:
    with caplog.at_level("WARNING"):
        return PionPromptCache(model, port=free_port(), **kwargs)


def test_namespace_for_is_stable_across_instances(smollm: tuple[Any, Any], caplog: Any) -> None:
    model, tok = smollm
    a = _local_cache(model, caplog, tokenizer=tok)
    b = _local_cache(model, caplog, tokenizer=tok)
    assert a.namespace_for([1, 2, 3]) == b.namespace_for([1, 2, 3])


def test_namespace_for_changes_with_tokens_format_protection_and_extra_parts(smollm: tuple[Any, Any],
                                                                             caplog: Any) -> None:
    model, tok = smollm
    fp16 = _local_cache(model, caplog, tokenizer=tok)
    names = {
        fp16.namespace_for([1, 2, 3]),
        fp16.namespace_for([1, 2, 4]),
        fp16.namespace_for([1, 2, 3], "adapter=x"),
        _local_cache(model, caplog, vquant="fp32", tokenizer=tok).namespace_for([1, 2, 3]),
        _local_cache(model, caplog, vquant="fp16", boundary_protect=2, tokenizer=tok).namespace_for([1, 2, 3]),
        _local_cache(model, caplog).namespace_for([1, 2, 3]),
    }
    assert len(names) == 6


def test_model_fingerprint_parts_name_the_smollm2_architecture(smollm: tuple[Any, Any]) -> None:
    model, tok = smollm
    assert rope_settings(model.config) == '{"rope_theta": 100000.0, "rope_type": "default"}'
    assert len(config_hash(model.config)) == 16
    assert tokenizer_hash(tok) == tokenizer_hash(tok)
    assert model.pion_model_id.startswith("smollm2-135m@")
