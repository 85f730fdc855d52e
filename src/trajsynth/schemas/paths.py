"""Where trajsynth keeps files of its own between runs, outside any run's folder."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["cache_dir"]


def cache_dir() -> Path:
    """``$XDG_CACHE_HOME/trajsynth`` (``~/.cache/trajsynth`` when unset): what can be rebuilt
    (the sandbox image's inputs, the embedding calibration and ONNX graph, the Prefect database
    template, tokenizers and dequantized models read from GGUF files), so deleting it costs
    time and nothing else."""
    root = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(root) / "trajsynth"
