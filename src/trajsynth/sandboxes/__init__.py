"""Where model-written code and the MCP servers run: Docker when it is there, else local.

``open_sandbox(kind, limits)`` gives a started ``Sandbox``; see ``base.Sandbox`` for the
interface, ``DockerSandbox`` and ``LocalSandbox`` for the two kinds, and ``image`` for how the
Docker image is built with no registry.

The names below are imported on first use: a server running inside the Docker sandbox imports
``trajsynth.sandboxes._agent`` (standard library only), and the image has no ``docker`` SDK.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trajsynth.sandboxes.base import WORKDIR_ENV, Sandbox
    from trajsynth.sandboxes.docker_sandbox import DockerSandbox
    from trajsynth.sandboxes.engine import docker_client, engine_available
    from trajsynth.sandboxes.factory import docker_unusable, open_sandbox
    from trajsynth.sandboxes.image import ensure_image, image_exists, image_tag
    from trajsynth.sandboxes.local_sandbox import LocalSandbox, bwrap_usable, unenforced_limits

__all__ = [
    "WORKDIR_ENV",
    "DockerSandbox",
    "LocalSandbox",
    "Sandbox",
    "bwrap_usable",
    "docker_client",
    "docker_unusable",
    "engine_available",
    "ensure_image",
    "image_exists",
    "image_tag",
    "open_sandbox",
    "unenforced_limits",
]

_WHERE = {
    "WORKDIR_ENV": "base",
    "Sandbox": "base",
    "DockerSandbox": "docker_sandbox",
    "docker_client": "engine",
    "engine_available": "engine",
    "docker_unusable": "factory",
    "open_sandbox": "factory",
    "ensure_image": "image",
    "image_exists": "image",
    "image_tag": "image",
    "LocalSandbox": "local_sandbox",
    "bwrap_usable": "local_sandbox",
    "unenforced_limits": "local_sandbox",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
