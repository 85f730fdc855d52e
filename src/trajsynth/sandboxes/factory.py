"""``open_sandbox``: the sandbox a run asked for, or the best one this machine has."""

from __future__ import annotations

import logging
from typing import TypeVar

from trajsynth.sandboxes.base import Sandbox
from trajsynth.sandboxes.docker_sandbox import DockerSandbox
from trajsynth.sandboxes.engine import engine_available
from trajsynth.sandboxes.image import image_exists, image_tag
from trajsynth.sandboxes.local_sandbox import LocalSandbox
from trajsynth.schemas import SandboxError, SandboxKind, SandboxLimits

__all__ = ["docker_unusable", "open_sandbox", "started"]

log = logging.getLogger(__name__)

_noticed: set[str] = set()


def docker_unusable(image: str | None = None) -> str | None:
    """Why the Docker sandbox cannot run here now, or ``None`` when it can."""
    if not engine_available():
        return "the Docker engine does not answer"
    tag = image or image_tag()
    try:
        if not image_exists(tag):
            return f"the image {tag} is not built (run `synth sandbox build`)"
    except SandboxError as exc:
        return str(exc)
    return None


def open_sandbox(
    kind: SandboxKind | str, limits: SandboxLimits | None = None, image: str | None = None
) -> Sandbox:
    """A started sandbox of ``kind``; use it as a context manager so it is closed.

    ``auto`` is Docker when the engine answers and the image exists, else ``LocalSandbox``
    with a logged notice (once per reason per process).
    """
    kind = SandboxKind(kind)
    limits = limits or SandboxLimits()
    if kind is SandboxKind.AUTO:
        reason = docker_unusable(image)
        if reason is None:
            kind = SandboxKind.DOCKER
        else:
            kind = SandboxKind.LOCAL
            level = logging.DEBUG if reason in _noticed else logging.WARNING
            _noticed.add(reason)
            log.log(level, "sandbox: using LocalSandbox because %s", reason)
    sandbox: Sandbox
    if kind is SandboxKind.DOCKER:
        sandbox = DockerSandbox(limits, image=image)
    else:
        sandbox = LocalSandbox(limits)
    return started(sandbox)


S = TypeVar("S", bound=Sandbox)


def started(sandbox: S) -> S:
    """``sandbox`` started; closed again (whatever it had made) when it does not start."""
    try:
        sandbox.start()
    except BaseException:
        sandbox.close()
        raise
    return sandbox
