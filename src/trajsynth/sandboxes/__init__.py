"""Where model-written code and the MCP servers run: Docker when it is there, else local.

``open_sandbox(kind, limits)`` gives a started ``Sandbox``; see ``base.Sandbox`` for the
interface, ``DockerSandbox`` and ``LocalSandbox`` for the two kinds, and ``image`` for how the
Docker image is built with no registry.
"""

from trajsynth.sandboxes.base import WORKDIR_ENV, Sandbox
from trajsynth.sandboxes.docker_sandbox import DockerSandbox
from trajsynth.sandboxes.engine import docker_client, engine_available
from trajsynth.sandboxes.factory import docker_unusable, open_sandbox
from trajsynth.sandboxes.image import ensure_image, image_exists, image_tag
from trajsynth.sandboxes.local_sandbox import LocalSandbox, bwrap_usable

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
]
