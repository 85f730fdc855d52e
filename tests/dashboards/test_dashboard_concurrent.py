"""The dashboard's queries answer while another process writes the store (DuckDB allows one
writer process; the store holds its lock only for the length of one batch).

The writer waits, after each commit, until the reader has seen that batch (a line on its
stdin): free-running, a reader on a slow machine retried its lock waits past all six commits
and saw 0 and then 48 (CI, an AVX2 EPYC). Reads still race the next commit."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from trajsynth.dashboards import queries
from trajsynth.store import Store

BATCHES = 6
PER_BATCH = 8  # trajectories: 2 tasks of 4 rollouts

WRITER = textwrap.dedent(
    """
    import sys, time
    sys.path.insert(0, {tests!r})
    from fakes.dashboard_rows import synthetic_rows
    from trajsynth.store import Store

    store = Store({path!r})
    batches = [
        synthetic_rows({per_batch}, run_id="run-live", seed=i, start=i * {per_batch})
        for i in range({batches})
    ]
    print("ready", flush=True)
    for rows in batches:
        store.insert_many(rows)
        time.sleep(0.3)  # a run computes between its commits
        sys.stdin.readline()  # the reader saw this batch
    """
)


@pytest.mark.slow  # a writer process for 2+ s; the queries are fast-tier (test_dashboard_queries)
def test_queries_answer_while_a_process_writes(known_store: Store) -> None:
    tests_dir = str(Path(__file__).resolve().parents[1])
    code = WRITER.format(
        tests=tests_dir, path=str(known_store.path), per_batch=PER_BATCH, batches=BATCHES
    )
    writer = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert writer.stdin is not None and writer.stdout is not None
    assert writer.stdout.readline().strip() == "ready"
    seen: list[int] = []
    acknowledged = 0
    deadline = time.monotonic() + 120
    try:
        while writer.poll() is None:
            assert time.monotonic() < deadline, seen
            figures = queries.page(known_store, "run-live")
            o = figures["overview"]
            seen.append(o["n_trajectories"])
            if o["n_trajectories"] > acknowledged:
                acknowledged = o["n_trajectories"]
                writer.stdin.write("seen\n")
                writer.stdin.flush()
            # one snapshot: whole batches, every trajectory with its verdict, and the
            # page's other figures agree with the headline
            assert o["n_judged"] + o["n_excluded"] == o["n_trajectories"]
            assert sum(r["n_trajectories"] for r in figures["by_cluster"]) == o["n_trajectories"]
            assert sum(r["n_trajectories"] for r in figures["by_round"]) == o["n_trajectories"]
            time.sleep(0.05)  # a browser reloads now and then, not in a tight loop
            # the other run's figures stay as they were
            assert queries.overview(known_store, "run-alpha")["n_passed"] == 4
    finally:
        writer.stdin.close()  # a writer still waiting reads EOF and goes on
        writer.wait(timeout=60)
        writer.stdout.close()
    assert writer.returncode == 0
    final = queries.overview(known_store, "run-live")["n_trajectories"]
    assert final == BATCHES * PER_BATCH
    assert seen == sorted(seen)  # counts only grow
    assert all(n % PER_BATCH == 0 for n in seen)  # never half a batch
    assert set(range(PER_BATCH, final, PER_BATCH)) <= set(seen), seen  # interleaved
