"""``pion.load_model``: one entry point, the runtime chosen by name and imported lazily.

``runtime="transformers"`` (default) returns a transformers model and tokenizer;
``runtime="mlx"`` an mlx-lm model and its ``TokenizerWrapper`` (the ``[mlx]`` extra). Both read
the same converted safetensors directory (``model_files.resolve_model``), never the network.
"""

from __future__ import annotations

import os
from typing import Any

RUNTIMES = ("transformers", "mlx")


def load_model(name_or_path: str | os.PathLike[str] | None = None, device: Any | None = None,
               dtype: Any | None = None, *, runtime: str = "transformers") -> tuple[Any, Any]:
    """Load ``(model, tokenizer)`` for ``runtime``.

    Args:
        name_or_path: ``"smollm2-135m"`` (default), a ``.gguf`` file or a local model directory.
        device: transformers only (``"cpu"``, ``"cuda"``...); MLX picks its own default device.
        dtype: the weights dtype (``torch.float32`` default; strings such as ``"float16"`` work
            for both runtimes).
        runtime: ``"transformers"`` or ``"mlx"``.

    Raises:
        ValueError: an unknown runtime, or a ``device`` given to the MLX runtime.
    """
    if runtime == "transformers":
        from pion.client.runtimes.transformers_runtime import load_model as load_transformers

        return load_transformers(name_or_path, device=device, dtype=dtype)
    if runtime == "mlx":
        if device is not None:
            raise ValueError("runtime='mlx' takes no device (MLX uses its default device: Metal, else CPU)")
        from pion.client.runtimes.mlx_runtime import load_model as load_mlx

        return load_mlx(name_or_path, dtype=None if dtype is None else str(dtype).removeprefix("torch."))
    raise ValueError(f"unknown runtime {runtime!r}; expected one of {', '.join(RUNTIMES)}")
