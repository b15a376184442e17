"""Generated token ids → text pieces, the same way for every runtime.

A piece is emitted only once the ids decode to whole characters (a trailing partial UTF-8
sequence decodes to U+FFFD and is held back); a ``stop`` string ends generation and is not
emitted. Used by the transformers and MLX runtimes' ``generate_steps``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass
class GenerationStep:
    """One generated token: its id, the new text it completed, and seconds since the call began."""

    token: int
    text: str
    elapsed_s: float


class TextEmitter:
    """Feed one token at a time; get the new text piece, or None once a stop string was reached.

    Args:
        tokenizer: anything with ``decode(ids, skip_special_tokens=True)``.
        stop: string(s) that end generation.
    """

    def __init__(self, tokenizer: Any, stop: Sequence[str] | str | None) -> None:
        self.tokenizer = tokenizer
        self.stops = [stop] if isinstance(stop, str) else list(stop or [])
        self.ids: list[int] = []
        self.emitted = ""
        self.tail = ""  # on a stop: the text before it not yet emitted

    def feed(self, token: int) -> str | None:
        """The text ``token`` completes ("" while a character is partial); None when a stop was hit."""
        self.ids.append(token)
        text = self.tokenizer.decode(self.ids, skip_special_tokens=True)
        hit = min((text.find(s) for s in self.stops if s and s in text), default=-1)
        if hit >= 0:
            self.tail = text[len(self.emitted):hit] if hit > len(self.emitted) else ""
            return None
        piece = "" if text.endswith("\ufffd") else text[len(self.emitted):]
        self.emitted += piece
        return piece
