"""The one Docker SDK client this process shares, and a cheap check that the engine answers."""

from __future__ import annotations

import logging
import threading

import docker
from docker.errors import DockerException

from trajsynth.schemas import SandboxError, SandboxStartError

__all__ = ["docker_client", "engine_available"]

log = logging.getLogger(__name__)

_lock = threading.Lock()
_client: docker.DockerClient | None = None

ENGINE_HINT = "start the Docker engine (`make docker`, or `dockerd` as root) or use --sandbox local"


def docker_client() -> docker.DockerClient:
    """The shared client (created and pinged once); ``SandboxError`` when the engine is down."""
    global _client
    with _lock:
        if _client is not None:
            return _client
        try:
            client = docker.from_env(timeout=60)
            client.ping()
        except (DockerException, OSError) as exc:  # requests' errors are OSErrors
            first = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
            raise SandboxStartError(
                f"Docker engine not reachable ({first}): {ENGINE_HINT}"
            ) from exc
        _client = client
        return client


def engine_available() -> bool:
    """Whether the Docker engine answers a ping now."""
    try:
        docker_client().ping()
    except SandboxError:
        return False
    except (DockerException, OSError) as exc:
        log.debug("docker ping failed: %s", exc)
        return False
    return True
