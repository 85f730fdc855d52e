"""What a model and the verifier see of each bundled cluster, held byte for byte to a fixture.

For every bundled server: each tool as ``tools/list`` returns it (name, title, description,
input and output schemas, annotations, in listing order), the state hash of its seeded state
at two seeds, and a replay of call scripts (every tool, failures included: the calls the
every-tool tests of ``test_servers.py`` make, recorded in ``fixtures/bundled_calls.json``)
with each result as the wire carries it and the state hash after each call. The expected
values in ``fixtures/bundled_surface.json`` were captured at 9ff7fe2, before the cluster
servers were split into state and tools; a change to how a server is laid out in modules must
leave every byte of this the same.

``python tests/mcp_servers/test_bundled_surface.py --write`` captures it again (only when a
tool is meant to change).
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.metadata
import json
import logging
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from trajsynth.mcp_servers.registry import ENTRY_POINT_GROUP
from trajsynth.mcp_servers.servers._backend import SEED_ENV, WORKDIR_ENV
from trajsynth.mcp_servers.servers._state import dump_state

FIXTURES = Path(__file__).with_name("fixtures")
CALLS = FIXTURES / "bundled_calls.json"
SURFACE = FIXTURES / "bundled_surface.json"
SEEDS = (0, 7)


def _bundled() -> dict[str, str]:
    """Bundled cluster name -> its server module, read from trajsynth's entry points."""
    return {
        ep.name: ep.load().server_module
        for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)
        if ep.dist is not None and ep.dist.name == "trajsynth"
    }


def _scrub(value: Any, workdir: str) -> Any:
    """The value with the work directory's path (a temporary folder) written as ``<workdir>``."""
    if isinstance(value, dict):
        return {k: _scrub(v, workdir) for k, v in value.items()}
    if isinstance(value, list):
        return [_scrub(v, workdir) for v in value]
    if isinstance(value, str):
        return value.replace(workdir, "<workdir>")
    return value


async def _session(module: Any, workdir: Path, seed: int, calls: list[dict[str, Any]]) -> Any:
    """List the tools and replay ``calls`` against a fresh state seeded with ``seed``."""
    saved = {k: os.environ.get(k) for k in (WORKDIR_ENV, SEED_ENV)}
    os.environ[WORKDIR_ENV], os.environ[SEED_ENV] = str(workdir), str(seed)
    try:
        module.STORE.ensure()
        steps = []
        async with Client(module.server, read_timeout_seconds=60) as client:
            listed = await client.list_tools()
            tools = [t.model_dump(mode="json", by_alias=True, exclude_none=True)
                     for t in listed.tools]  # fmt: skip
            for call in calls:
                result = await client.call_tool(call["tool"], call["arguments"])
                dumped = result.model_dump(mode="json", by_alias=True, exclude_none=True)
                steps.append({"call": call, "result": _scrub(dumped, str(workdir)),
                              "state_hash": module.STORE.dump()["state_hash"]})  # fmt: skip
        return tools, steps
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def surface(name: str, server_module: str, scripts: dict[str, Any]) -> dict[str, Any]:
    """Bundled cluster ``name``'s tools, seeded state hashes and replayed calls."""
    module = importlib.import_module(server_module)
    out: dict[str, Any] = {"tools": None, "seed_state_hash": {}, "sessions": {}}
    with tempfile.TemporaryDirectory(prefix=f"surface-{name}-") as tmp:
        for seed in SEEDS:
            state = dump_state(name, Path(tmp) / f"seed-{seed}", init=True, seed=seed)
            out["seed_state_hash"][str(seed)] = state["state_hash"]
        mine = {k: s for k, s in sorted(scripts.items()) if s["server"] == name}
        if not mine:  # still list the tools
            mine = {"listing": {"server": name, "seed": 0, "calls": []}}
        for key, script in mine.items():
            workdir = Path(tmp) / key.rsplit("::", 1)[-1]
            workdir.mkdir()
            tools, steps = asyncio.run(_session(module, workdir, script["seed"], script["calls"]))
            if out["tools"] is None:
                out["tools"] = tools
            assert tools == out["tools"]
            out["sessions"][key] = {"seed": script["seed"], "steps": steps}
    return out


def _scripts() -> dict[str, Any]:
    scripts: dict[str, Any] = json.loads(CALLS.read_text(encoding="utf-8"))
    return scripts


def _params() -> list[Any]:
    # the code cluster's replay runs programs and test suites (subprocesses): slow tier
    return [
        pytest.param(name, marks=pytest.mark.slow) if name == "code" else name
        for name in sorted(_bundled())
    ]


@pytest.mark.parametrize("name", _params())
def test_bundled_server_surface_is_unchanged(name: str) -> None:
    expected = json.loads(SURFACE.read_text(encoding="utf-8"))[name]
    got = json.loads(json.dumps(surface(name, _bundled()[name], _scripts())))
    assert [t["name"] for t in got["tools"]] == [t["name"] for t in expected["tools"]]
    for mine, theirs in zip(got["tools"], expected["tools"], strict=True):
        assert mine == theirs, mine["name"]
    assert got["seed_state_hash"] == expected["seed_state_hash"]
    assert got["sessions"].keys() == expected["sessions"].keys()
    for key, session in got["sessions"].items():
        for n, (mine, theirs) in enumerate(
            zip(session["steps"], expected["sessions"][key]["steps"], strict=True)
        ):
            assert mine == theirs, f"{key} call {n}: {mine['call']['tool']}"


def test_every_bundled_cluster_has_a_recorded_surface() -> None:
    recorded = json.loads(SURFACE.read_text(encoding="utf-8"))
    assert sorted(recorded) == sorted(_bundled())
    assert all(recorded[n]["sessions"] and recorded[n]["tools"] for n in recorded)


if __name__ == "__main__":
    logging.getLogger("mcp").setLevel(logging.WARNING)  # each failed call is logged at INFO
    if sys.argv[1:] != ["--write"]:
        raise SystemExit(f"usage: python {sys.argv[0]} --write")
    everything = {n: surface(n, m, _scripts()) for n, m in sorted(_bundled().items())}
    SURFACE.write_text(json.dumps(everything, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    counts = ", ".join(f"{n} {len(s['tools'])} tools" for n, s in everything.items())
    print(f"wrote {SURFACE}: {counts}")
