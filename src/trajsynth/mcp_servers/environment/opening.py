"""Opening an environment: ``open_environment`` starts one in a sandbox of its own (an outside
stdio server gets its own files mounted read-only) or in one borrowed from a pool, and hands it
back as ``OpenEnvironment``, to await or to use as ``async with``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Generator, Mapping
from typing import TYPE_CHECKING, Any

from trajsynth.mcp_servers.environment.facade import Environment
from trajsynth.mcp_servers.launch import open_mounted_sandbox, server_mounts
from trajsynth.schemas import SandboxKind, SandboxLimits, ServerKind, ToolCluster

if TYPE_CHECKING:
    from trajsynth.sandboxes.pool import SandboxPool

__all__ = ["OpenEnvironment", "open_environment"]


class OpenEnvironment(Coroutine[Any, Any, Environment]):
    """What ``open_environment`` returns: a coroutine (await it, or hand it to
    ``asyncio.create_task``) for a started ``Environment``, and an async context manager
    (``async with open_environment(...) as env``) that closes the environment at the end."""

    def __init__(self, opener: Callable[[], Coroutine[Any, Any, Environment]]) -> None:
        self._opener = opener
        self._coro: Coroutine[Any, Any, Environment] | None = None
        self._env: Environment | None = None

    def _inner(self) -> Coroutine[Any, Any, Environment]:
        if self._coro is None:
            self._coro = self._opener()
        return self._coro

    def send(self, value: Any) -> Any:
        return self._inner().send(value)

    def throw(self, *args: Any) -> Any:
        return self._inner().throw(*args)

    def close(self) -> None:
        if self._coro is not None:
            self._coro.close()

    def __await__(self) -> Generator[Any, None, Environment]:
        return self._inner().__await__()

    async def __aenter__(self) -> Environment:
        self._env = await self._opener()
        return self._env

    async def __aexit__(self, *exc: object) -> None:
        env, self._env = self._env, None
        if env is not None:
            await env.close()


def open_environment(
    cluster: ToolCluster,
    *,
    sandbox_kind: SandboxKind = SandboxKind.AUTO,
    limits: SandboxLimits | None = None,
    seed: int = 0,
    tool_timeout_s: float = 20.0,
    image: str | None = None,
    start_timeout_s: float = 60.0,
    pool: SandboxPool | None = None,
    environ: Mapping[str, str] | None = None,
) -> OpenEnvironment:
    """A started environment for ``cluster`` in a new sandbox that it owns, or in one
    borrowed from ``pool`` (given back, reset, when the environment closes).

    ``env = await open_environment(...)`` (then ``await env.close()``), or
    ``async with open_environment(...) as env:``.
    """

    async def opener() -> Environment:
        from trajsynth.sandboxes import open_sandbox

        spec = cluster.server
        if spec.kind is ServerKind.STDIO and not spec.on_host:
            # an outside server needs its own files mounted: a sandbox of its own, not pooled
            pool_ = None
            mounts = server_mounts(spec.command or [], spec.mounts)
            sandbox = await asyncio.to_thread(
                open_mounted_sandbox,
                sandbox_kind,
                limits or SandboxLimits(),
                image,
                mounts,
                spec.command or [],
            )
        elif pool is not None:
            pool_ = pool
            sandbox = await asyncio.to_thread(pool.acquire)
        else:
            pool_ = None
            sandbox = await asyncio.to_thread(
                open_sandbox, sandbox_kind, limits or SandboxLimits(), image
            )
        env = Environment(
            cluster,
            sandbox,
            seed=seed,
            tool_timeout_s=tool_timeout_s,
            start_timeout_s=start_timeout_s,
            pool=pool_,
            environ=environ,
        )
        try:
            await env.start()
        except BaseException:
            await env.close()
            raise
        return env

    return OpenEnvironment(opener)
