"""TextEmitter: the one token-ids-to-text rule both runtimes' generate_steps use (SmolLM2's tokenizer)."""

from __future__ import annotations

from typing import Any

import pytest

from pion.client.runtimes.text_steps import TextEmitter


@pytest.fixture(scope="module")
def tok() -> Any:
    from transformers import AutoTokenizer

    from pion.client.runtimes.model_files import resolve_model

    return AutoTokenizer.from_pretrained(resolve_model(None).path, local_files_only=True)


def test_pieces_join_to_the_decoded_text(tok: Any) -> None:
    ids = tok.encode("Paris is the capital of France.", add_special_tokens=False)
    emitter = TextEmitter(tok, None)
    assert "".join(emitter.feed(t) or "" for t in ids) == "Paris is the capital of France."


def test_a_stop_string_ends_with_the_text_before_it_and_nothing_after(tok: Any) -> None:
    ids = tok.encode("one two three four", add_special_tokens=False)
    emitter = TextEmitter(tok, ["three"])
    pieces = []
    for t in ids:
        piece = emitter.feed(t)
        if piece is None:
            break
        pieces.append(piece)
    assert ("".join(pieces) + emitter.tail, piece) == ("one two ", None)


def test_a_partial_utf8_character_is_held_back_until_it_completes(tok: Any) -> None:
    ids = tok.encode("日本", add_special_tokens=False)
    emitter = TextEmitter(tok, None)
    pieces = [emitter.feed(t) for t in ids]
    assert "".join(p or "" for p in pieces) == "日本"
    assert all("\ufffd" not in (p or "") for p in pieces) is True
