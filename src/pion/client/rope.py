"""Exact RoPE re-rotation of cached keys with the model's own rotary embedding.

A chunk prefilled at positions ``base .. base+n-1`` holds keys ``rope(k, p)``. RoPE is a
rotation by an angle linear in the position, so the same keys at positions
``new .. new+n-1`` are ``rope(rope(k, base+i), Δ)`` with ``Δ = new - base`` for every token:
one rotation by the constant offset Δ. Values carry no position and are untouched.

Two ways this goes wrong, both handled here:

* scaling: rotary modules may multiply cos/sin by ``attention_scaling`` (YaRN, longrope);
  applying them twice scales the keys twice, so cos/sin are divided by it first;
* position-dependent frequencies: dynamic NTK (and longrope, whose frequencies switch at
  the original context length) recompute ``inv_freq`` from the sequence length, so a key
  rotated at one length is not a pure rotation of one rotated at another. Those are
  refused with ``UnsupportedRope``.

Checked in the tests: ``rerotate(rope(k, p1), Δ) == rope(k, p1 + Δ)`` to 1e-5 in fp32.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import torch

# Rope types whose inverse frequencies do not depend on the sequence length.
PURE_ROTATION_TYPES = frozenset({"default", "linear", "yarn", "llama3"})


class UnsupportedRope(ValueError):
    """The model's positional encoding cannot be moved by a pure rotation."""


def _default_rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class KeyRotator:
    """Rotates cached keys by a position offset, the way the model's attention would have.

    Args:
        model: a transformers decoder whose base model has a ``rotary_emb`` module (Llama,
            SmolLM2, Qwen2/3, Mistral ...).

    Raises:
        UnsupportedRope: no rotary module, or a rope type that is not a pure rotation.
    """

    def __init__(self, model: Any) -> None:
        self.rotary = find_rotary_embedding(model)
        rope_type = str(getattr(self.rotary, "rope_type", "default"))
        if rope_type not in PURE_ROTATION_TYPES:
            raise UnsupportedRope(
                f"rope_type '{rope_type}' recomputes its frequencies from the sequence length, so a cached "
                f"key cannot be moved to a new position by one rotation; re-prefill instead "
                f"(supported: {', '.join(sorted(PURE_ROTATION_TYPES))})")
        self.rope_type = rope_type
        self.attention_scaling = float(getattr(self.rotary, "attention_scaling", 1.0) or 1.0)
        module = sys.modules.get(type(self.rotary).__module__)
        self._rotate_half: Callable[[torch.Tensor], torch.Tensor] = getattr(
            module, "rotate_half", _default_rotate_half)

    def cos_sin(self, positions: torch.Tensor, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """Unscaled fp32 cos/sin ``[1, n, head_dim]`` for integer positions (negative allowed)."""
        probe = torch.zeros(1, dtype=torch.float32, device=device)
        pos = positions.to(device=device, dtype=torch.long).reshape(1, -1)
        cos, sin = self.rotary(probe, pos)
        return cos.float() / self.attention_scaling, sin.float() / self.attention_scaling

    def rotate(self, keys: torch.Tensor, delta: int) -> torch.Tensor:
        """``keys`` ``[batch, heads, n, head_dim]`` moved by ``delta`` positions (fp32 maths).

        Returns a new tensor of the input dtype; ``delta == 0`` returns the input unchanged.
        """
        if delta == 0:
            return keys
        cos, sin = self.cos_sin(torch.tensor([delta]), keys.device)
        k = keys.float()
        rotated = k * cos[:, None] + self._rotate_half(k) * sin[:, None]
        return rotated.to(keys.dtype)

    def apply(self, keys: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Rotate unrotated ``keys`` ``[batch, heads, n, head_dim]`` to ``positions`` (tests, recompute)."""
        cos, sin = self.cos_sin(positions, keys.device)
        k = keys.float()
        return (k * cos[:, None] + self._rotate_half(k) * sin[:, None]).to(keys.dtype)


def find_rotary_embedding(model: Any) -> torch.nn.Module:
    """The decoder's shared rotary module (``model.model.rotary_emb`` in most families)."""
    base = getattr(model, "model", model)
    rotary = getattr(base, "rotary_emb", None)
    if isinstance(rotary, torch.nn.Module):
        return rotary
    for module in model.modules():
        if type(module).__name__.endswith("RotaryEmbedding"):
            return module
    raise UnsupportedRope(f"{type(model).__name__} has no rotary embedding module to re-rotate keys with")
