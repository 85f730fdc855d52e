"""An environment's own costs: an MCP tool call through the sandbox, a state read, and an
environment's opening (new sandbox vs one from the pool), per sandbox kind.

    python bench/environment.py [--cluster shop] [--calls 200] [--opens 5] [--json PATH]

Per sandbox kind (Docker when the engine and image are there; the local sandbox) it opens the
cluster's environment, calls a read tool ``--calls`` times with arguments that make it
succeed (the round trip a rollout pays per tool call: the SDK's JSON-RPC over the server's
stdio, relayed into the sandbox, and the tool's query), then a read tool without its required
arguments as often (the tool-error path, no target), reads the state as the verifier does
(``Environment.state``), then opens and closes ``--opens`` environments with a new sandbox
each and through a ``SandboxPool`` (a reused sandbox, reset when given back).
``--tool NAME --args JSON`` times that call instead (e.g. ``--tool get_order --args
'{"order_id": "#W1001"}'``: an order with its items, what a rollout reads). Prints median
and p90 beside each target: call <= 1 ms, state read <= 10 ms, open from the pool <= 1 s.
Report the machine's load.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from trajsynth.mcp_servers.arguments import generate_arguments
from trajsynth.mcp_servers.environment import Environment, open_environment
from trajsynth.mcp_servers.registry import get_cluster
from trajsynth.sandboxes import docker_unusable
from trajsynth.sandboxes.pool import SandboxPool
from trajsynth.schemas import SandboxKind, SandboxLimits, ToolAccess, ToolCluster

TARGETS_MS = {"tool call": 1.0, "state read": 10.0, "open (pool)": 1000.0}


async def _read_calls(
    env: Environment, chosen: tuple[str, dict] | None
) -> tuple[tuple[str, dict], tuple[str, dict] | None]:
    """A read tool call that succeeds (the round trip a rollout pays per tool call) and, where
    one exists, a read tool called without its required arguments (the tool-error path).

    Arguments come from ``generate_arguments`` (the planner's schema-based filling); the
    first read tool whose generated call succeeds is timed."""
    reads = [t for t in env.tools if t.access is ToolAccess.READ]
    failing = next(((t.name, {}) for t in reads if t.input_schema.get("required")), None)
    if chosen is not None:
        if (await env.call_tool(*chosen)).is_error:
            raise SystemExit(f"{chosen[0]}({json.dumps(chosen[1])}) is a tool error")
        return chosen, failing
    for tool in sorted(reads, key=lambda t: t.name):
        args = generate_arguments(tool.input_schema, tool.name)
        if not (await env.call_tool(tool.name, args)).is_error:
            return (tool.name, args), failing
    raise SystemExit(f"{env.cluster.cluster_id}: no read tool succeeds with generated arguments")


async def _timed(fn: Any, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        await fn()
        out.append((time.perf_counter() - t0) * 1000)
    return out


async def bench_kind(
    cluster: ToolCluster,
    kind: SandboxKind,
    calls: int,
    opens: int,
    chosen: tuple[str, dict] | None = None,
) -> dict:
    async with open_environment(cluster, sandbox_kind=kind) as env:
        (tool, args), failing = await _read_calls(env, chosen)  # also warms: imports, SQL plans
        call = await _timed(lambda: env.call_tool(tool, args), calls)
        error = await _timed(lambda: env.call_tool(*failing), calls) if failing else []
        state = await _timed(env.state, max(10, calls // 10))
    fresh = await _timed(lambda: _open_close(cluster, kind, None), opens)
    pool = SandboxPool(kind, SandboxLimits(), None, max_idle=1)
    try:
        await _open_close(cluster, kind, pool)  # the pool's first sandbox
        pooled = await _timed(lambda: _open_close(cluster, kind, pool), opens)
    finally:
        await asyncio.to_thread(pool.close)
    return {
        "tool": tool,
        "tool call": call,
        "tool call, tool error": error,
        "error tool": failing[0] if failing else "",
        "state read": state,
        "open (new sandbox)": fresh,
        "open (pool)": pooled,
    }


async def _open_close(cluster: ToolCluster, kind: SandboxKind, pool: SandboxPool | None) -> None:
    env = await open_environment(cluster, sandbox_kind=kind, pool=pool)
    await env.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cluster", default="shop")
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--opens", type=int, default=5)
    ap.add_argument("--kinds", default="docker,local")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--tool", default=None, help="time this read tool (with --args)")
    ap.add_argument("--args", default="{}", help="its arguments, a JSON object")
    args = ap.parse_args()
    chosen = (args.tool, json.loads(args.args)) if args.tool else None
    console = Console()
    cluster = get_cluster(args.cluster)
    results: dict[str, dict] = {}
    for name in [k.strip() for k in args.kinds.split(",") if k.strip()]:
        kind = SandboxKind(name)
        if kind is SandboxKind.DOCKER and (reason := docker_unusable()) is not None:
            console.log(f"[yellow]docker skipped: {reason}[/]")
            continue
        console.log(f"{name}: {args.calls} calls, {args.opens} opens")
        results[name] = asyncio.run(bench_kind(cluster, kind, args.calls, args.opens, chosen))

    table = Table(title=f"environment benchmark, cluster {args.cluster} (ms; load {_load()})")
    for col in ("sandbox", "operation", "n", "median", "p90", "target", ""):
        table.add_column(col, justify="left" if col in ("sandbox", "operation", "") else "right")
    for kind, ops in results.items():
        for op, samples in ops.items():
            if op in ("tool", "error tool") or not samples:
                continue
            med = statistics.median(samples)
            p90 = statistics.quantiles(samples, n=10)[-1] if len(samples) > 1 else med
            target = TARGETS_MS.get(op)
            met = target is not None and med <= target
            verdict = "" if target is None else ("[green]ok[/]" if met else "[red]over[/]")
            label = {
                "tool call": f"{op} ({ops['tool']})",
                "tool call, tool error": f"{op} ({ops['error tool']}, no arguments)",
            }.get(op, op)
            table.add_row(
                kind, label, str(len(samples)), f"{med:.2f}", f"{p90:.2f}",
                "" if target is None else f"<= {target:g}", verdict,
            )  # fmt: skip
    console.print(table)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=1))
    return 0


def _load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


if __name__ == "__main__":
    sys.exit(main())
