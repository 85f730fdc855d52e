"""A bundled cluster's real tools and state, run in this process: no sandbox, no server process.

For fast-tier tests of code that drives an ``Environment`` (the planner's gold run, the
verifier's replay): the tool functions, the SQLite state and the canonical state dump are the
bundled server's own; only the sandbox and the stdio transport are left out. The server module
reads ``$TRAJSYNTH_WORKDIR``, so every call sets it to this environment's work directory.

    async with InProcessEnvironment("shop", tmp_path) as env:
        await env.call_tool("search_products", {"query": "blender"})
"""

from __future__ import annotations

import importlib
import itertools
import json
import os
import shutil
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from mcp.server.mcpserver.exceptions import ToolError

from trajsynth.mcp_servers.environment import ToolResult
from trajsynth.mcp_servers.servers._state import dump_state
from trajsynth.schemas import EnvState, SnapshotHandle

__all__ = ["InProcessEnvironment"]

_ids = itertools.count()


class InProcessEnvironment:
    """The Environment interface over a bundled server module imported in-process."""

    def __init__(self, name: str, workdir: Path, *, seed: int = 0) -> None:
        self.name = name
        self.workdir = Path(workdir) / f"env{next(_ids)}"
        self.workdir.mkdir(parents=True)
        self.seed = seed
        self.module = importlib.import_module(f"trajsynth.mcp_servers.servers.{name}.server")
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self._snapshots: dict[str, Path] = {}
        self.closed = False

    @contextmanager
    def _here(self) -> Iterator[None]:
        saved = {k: os.environ.get(k) for k in ("TRAJSYNTH_WORKDIR", "TRAJSYNTH_SEED")}
        os.environ["TRAJSYNTH_WORKDIR"] = str(self.workdir)
        os.environ["TRAJSYNTH_SEED"] = str(self.seed)
        try:
            yield
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value

    async def __aenter__(self) -> InProcessEnvironment:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.closed = True

    async def start(self) -> EnvState:
        with self._here():
            return EnvState.model_validate(
                dump_state(self.name, self.workdir, init=True, seed=self.seed)
            )

    async def call_tool(self, name: str, arguments: Mapping[str, Any] | None) -> ToolResult:
        args = dict(arguments or {})
        self.calls.append((name, args))
        with self._here():
            try:
                raw = await self.module.server.call_tool(name, args)
            except ToolError as exc:
                return ToolResult(text=str(exc), is_error=True, error_type="tool_error")
        structured = raw.structured_content
        text = "\n".join(getattr(b, "text", "") for b in raw.content) or json.dumps(structured)
        return ToolResult(
            text=text,
            structured=structured,
            is_error=bool(raw.is_error),
            error_type="tool_error" if raw.is_error else None,
        )

    async def state(self) -> EnvState:
        with self._here():
            return EnvState.model_validate(dump_state(self.name, self.workdir))

    async def snapshot(self) -> SnapshotHandle:
        snapshot_id = f"snap{len(self._snapshots)}"
        target = self.workdir.parent / f"{self.workdir.name}-{snapshot_id}"
        shutil.copytree(self.workdir, target)
        self._snapshots[snapshot_id] = target
        return SnapshotHandle(snapshot_id=snapshot_id, sandbox_id=str(self.workdir))

    async def restore(self, handle: SnapshotHandle) -> None:
        source = self._snapshots[handle.snapshot_id]
        shutil.rmtree(self.workdir)
        shutil.copytree(source, self.workdir)
