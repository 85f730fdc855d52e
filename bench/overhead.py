"""Time outside the LLM, and how a run scales: `synth run` timed against the requests it makes.

    python bench/overhead.py [--tasks 2,4,8] [--samples 2] [--out bench/out/overhead.json]
                             [--prefect-home DIR]

Starts the embedded llama.cpp server (SmolLM2-135M, as `synth run` would) behind a recording
proxy, then runs the `synth run` command in a subprocess, once per task count, each in a fresh
directory (fresh store, empty response cache, a new Prefect home), with ``--base-url`` pointing
at the proxy. A new Prefect home starts from the migrated database template that ``make setup``
keeps (``trajsynth.flows.prefect_db``; without one, Prefect's server runs all its migrations
first, about 4.5 s more). ``--prefect-home DIR`` gives every run that home
instead, as ``make`` gives every ``synth`` command ``.venv/prefect``: a warm-up run (not timed)
builds the database first, so the figures are those of a user's later runs. The proxy records
when each request starts and ends. Per run it prints:

* wall time of the command, and time from its start to the first LLM request
  (target: <= 10 s);
* the share of wall time with no LLM request in flight (target: <= 5%); the embedded
  server's own start, which `synth run` pays when it starts the server itself, is printed
  beside it and counted in the share too (a conservative figure);
* mean requests in flight while any is, and the share of that busy time with at least as
  many in flight as the server has slots (saturation; target: the server never waits);
* wall time per task, so growth from 2 to 4 to 8 tasks reads as linear or not.

Report the machine's load (`uptime`) with the figures: on 2 shared cores they move with it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from trajsynth.llm.embedded import EmbeddedLLMServer, free_port

TARGET_FIRST_REQUEST_S = 10.0
TARGET_OUTSIDE_SHARE = 0.05


class RecordingProxy:
    """Forwards every request to ``upstream`` and records (start, end) in perf_counter time."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/").removesuffix("/v1")  # paths arrive with /v1
        self.spans: list[tuple[float, float]] = []
        self._lock = threading.Lock()
        self._client = httpx.AsyncClient(timeout=None)
        app = Starlette(routes=[Route("/{path:path}", self._forward, methods=["GET", "POST"])])
        self.port = free_port("127.0.0.1")
        self._server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning")
        )
        self._thread = threading.Thread(target=self._server.run, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    async def _forward(self, request: Request) -> Response:
        start = time.perf_counter()
        upstream = await self._client.request(
            request.method,
            f"{self.upstream}/{request.path_params['path']}",
            content=await request.body(),
            headers={k: v for k, v in request.headers.items() if k.lower() != "host"},
        )
        if request.url.path.endswith("/completions"):
            with self._lock:
                self.spans.append((start, time.perf_counter()))
        return Response(upstream.content, upstream.status_code, dict(upstream.headers))

    def __enter__(self) -> RecordingProxy:
        self._thread.start()
        while not self._server.started:
            time.sleep(0.05)
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)

    def take(self) -> list[tuple[float, float]]:
        with self._lock:
            spans, self.spans = self.spans, []
        return spans


def busy_figures(
    spans: list[tuple[float, float]], start: float, end: float, slots: int
) -> dict[str, float]:
    """From request spans within [start, end]: seconds with >= 1 request in flight, mean in
    flight while busy, and the share of busy time with >= ``slots`` in flight.

    >>> busy_figures([(1.0, 3.0), (2.0, 4.0)], 0.0, 5.0, 2)
    {'busy_s': 3.0, 'mean_in_flight': 1.3333, 'saturated_share': 0.3333}
    """
    events = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans])
    busy = weighted = saturated = 0.0
    in_flight, last = 0, start
    for t, step in events:
        t = min(max(t, start), end)
        if in_flight:
            busy += t - last
            weighted += (t - last) * in_flight
            saturated += (t - last) if in_flight >= slots else 0.0
        in_flight, last = in_flight + step, t
    return {
        "busy_s": round(busy, 4),
        "mean_in_flight": round(weighted / busy, 4) if busy else 0.0,
        "saturated_share": round(saturated / busy, 4) if busy else 0.0,
    }


def run_once(proxy: RecordingProxy, tasks: int, args: argparse.Namespace) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix=f"overhead-{tasks}-"))
    env = {
        **os.environ,
        "PREFECT_HOME": str(args.prefect_home or workdir / "prefect"),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "DO_NOT_TRACK": "1",
        "HF_HUB_OFFLINE": "1",
    }
    command = [
        sys.executable, "-m", args.cli, "-q", "run", "--base-url", proxy.base_url,
        "--tasks", str(tasks), "--samples", str(args.samples), "--seed", str(args.seed),
    ]  # fmt: skip
    proxy.take()
    start = time.perf_counter()
    done = subprocess.run(command, cwd=workdir, env=env, capture_output=True, text=True)
    end = time.perf_counter()
    spans = proxy.take()
    if done.returncode != 0:
        print(done.stdout[-2000:], done.stderr[-2000:], file=sys.stderr)
    wall = end - start
    busy = busy_figures(spans, start, end, args.slots)
    first = min((s for s, _ in spans), default=end) - start
    return {
        "tasks": tasks,
        "exit": done.returncode,
        "requests": len(spans),
        "wall_s": round(wall, 2),
        "first_request_s": round(first, 2),
        "outside_share": round(1 - busy["busy_s"] / wall, 4) if wall else None,
        "outside_share_with_server_start": round(
            1 - busy["busy_s"] / (wall + args.server_start_s), 4
        ),
        "wall_s_per_task": round(wall / tasks, 2),
        **busy,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", default="2,4,8", help="comma-separated task counts")
    parser.add_argument("--samples", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--slots", type=int, default=1, help="the embedded server's slots")
    parser.add_argument("--cli", default="trajsynth.cli", help="module of the synth command")
    parser.add_argument("--out", default="bench/out/overhead.json")
    parser.add_argument(
        "--prefect-home", type=Path, default=None, help="one Prefect home for every run (warm)"
    )
    args = parser.parse_args()

    t0 = time.perf_counter()
    with EmbeddedLLMServer() as server:
        args.server_start_s = round(time.perf_counter() - t0, 2)
        with RecordingProxy(server.base_url) as proxy:
            if args.prefect_home is not None:
                run_once(proxy, 1, args)  # builds the home's database; not reported
            results = [run_once(proxy, int(n), args) for n in args.tasks.split(",")]
    report = {"load": os.getloadavg(), "server_start_s": args.server_start_s, "runs": results}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=1))

    home = f"Prefect home {args.prefect_home} (warm)" if args.prefect_home else "new Prefect homes"
    print(
        f"load average {os.getloadavg()[0]:.2f}; embedded server start {args.server_start_s} s; "
        f"{home}"
    )
    header = (
        f"{'tasks':>5} {'exit':>4} {'reqs':>5} {'wall s':>8} {'s/task':>7} "
        f"{'first req s':>11} {'outside':>8} {'+start':>7} {'in flight':>9} {'saturated':>9}"
    )
    print(header)
    for r in results:
        print(
            f"{r['tasks']:>5} {r['exit']:>4} {r['requests']:>5} {r['wall_s']:>8.1f} "
            f"{r['wall_s_per_task']:>7.1f} {r['first_request_s']:>11.1f} "
            f"{r['outside_share']:>8.1%} {r['outside_share_with_server_start']:>7.1%} "
            f"{r['mean_in_flight']:>9.2f} {r['saturated_share']:>9.1%}"
        )
    print(
        f"targets: first request <= {TARGET_FIRST_REQUEST_S:.0f} s; outside the LLM <= "
        f"{TARGET_OUTSIDE_SHARE:.0%}; saturated share near 100%; s/task flat as tasks grow"
    )


if __name__ == "__main__":
    main()
