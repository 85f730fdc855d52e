"""Dashboard load time on a store of 10,000 trajectories (target: docs/testing.md's benchmarks).

    python bench/dashboard.py [--n 10000] [--store bench/out/dashboard-10000.duckdb] [--rebuild]

Builds the store once through ``Store.insert_many`` (synthetic runs, trees, nodes, trajectories
with messages, verdicts, scores, LLM calls, round figures; kept and reused unless
``--rebuild``), starts ``synth dashboard``'s server (not timed), then loads the main page in
headless Chromium (Debian's ``chromium``, through Playwright) and times the first full render
(every section drawn: charts, rollout tree, quotient graph) with a cold server cache, and again
with a warm one. Also times the page's SQL alone, uncached. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path

from trajsynth.dashboards import free_port, queries, start_dashboard, wait_until_ready
from trajsynth.store import Store

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the row builder is shared with the tests

from fakes.dashboard_rows import synthetic_rows  # noqa: E402

BATCH = 500


def build(path: Path, n: int) -> float:
    """Fill a new store with ``n`` trajectories (3 runs); seconds spent inserting."""
    path.unlink(missing_ok=True)
    store = Store(path)
    store.migrate()
    start = time.perf_counter()
    runs = {"run-bench-a": n // 5, "run-bench-b": n // 5, "run-bench-c": n - 2 * (n // 5)}
    for k, (run_id, count) in enumerate(runs.items()):
        started = datetime(2026, 1, k + 1, 10, 0)  # datetimes: the store's Arrow path
        store.insert(
            "runs",
            [{"run_id": run_id, "state": "finished" if k < 2 else "running",
              "created_at": started, "updated_at": started + timedelta(hours=1),
              "config": {}, "manifest": {},
              "summary": {"wall_s": 3600.0} if k < 2 else None}],
        )  # fmt: skip
        for offset in range(0, count, BATCH):
            rows = synthetic_rows(
                min(BATCH, count - offset), run_id=run_id, seed=offset, start=offset // 4
            )
            store.insert_many(rows)
            print(f"{run_id}: {offset + BATCH}/{count}", file=sys.stderr, flush=True)
    return time.perf_counter() - start


def _rendered(page) -> None:
    """Six plotly charts (rounds, clusters, modes, roles, the tree, the quotient graph) drawn,
    the tree's and the quotient graph's nodes among them."""
    page.wait_for_function(
        "document.querySelectorAll('.js-plotly-plot').length >= 6", timeout=120_000
    )
    for key in ("tree_chart", "quotient_chart"):
        page.wait_for_selector(f".st-key-{key} .js-plotly-plot g.textpoint", timeout=120_000)


def browser_load(url: str, chromium: str, loads: int) -> list[tuple[float, float]]:
    """Per load: seconds to the first figure (the runs table) and to the full render."""
    from playwright.sync_api import sync_playwright

    times = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=chromium, args=["--no-sandbox", "--disable-gpu"]
        )
        try:
            for _ in range(loads):
                page = browser.new_page(viewport={"width": 1400, "height": 1000})
                start = time.perf_counter()
                page.goto(url, wait_until="domcontentloaded")
                page.wait_for_selector('[data-testid="stTable"]', timeout=120_000)
                first = time.perf_counter() - start
                _rendered(page)
                times.append((first, time.perf_counter() - start))
                page.close()
        finally:
            browser.close()
    return times


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=10_000)
    parser.add_argument("--store", type=Path, default=None)
    parser.add_argument("--rebuild", action="store_true")
    parser.add_argument("--loads", type=int, default=3, help="page loads (the first is cold)")
    args = parser.parse_args()
    path = args.store or ROOT / "bench" / "out" / f"dashboard-{args.n}.duckdb"
    path.parent.mkdir(parents=True, exist_ok=True)
    out: dict = {"store": str(path)}
    if args.rebuild or not path.exists():
        out["build_s"] = round(build(path, args.n), 1)
    store = Store(path)
    counts = store.counts()
    out["trajectories"] = counts["trajectories"]
    out["nodes"] = counts["nodes"]
    out["store_mb"] = round(path.stat().st_size / 2**20, 1)
    run_id = queries.run_ids(store)[0]
    sql = [queries.time_page(store, run_id) for _ in range(3)]
    out["sql_s"] = {k: round(min(s[k] for s in sql), 4) for k in sql[0]}
    chromium = next(
        (p for p in ("/usr/lib/chromium/chromium", shutil.which("chromium")) if p), None
    )
    if chromium is None:
        out["browser"] = "skipped: no chromium (apt-get install chromium)"
    else:
        port = free_port()
        proc = start_dashboard(path, port=port, log_path=path.with_suffix(".log"))
        try:
            url = f"http://127.0.0.1:{port}"
            wait_until_ready(url, timeout_s=120, process=proc)
            times = browser_load(url, chromium, args.loads)
        finally:
            proc.terminate()
            proc.wait(timeout=30)
        out["first_table_s"] = [round(first, 2) for first, _ in times]
        out["full_render_s"] = [round(full, 2) for _, full in times]  # [0]: cold server cache
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
