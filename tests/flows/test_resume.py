"""Crash-safe resume: `synth run` killed with SIGKILL in the middle, then run again, ends with
exactly the ids and counts of an uninterrupted run with the same seeds (no duplicate, nothing
lost). Real parts: the CLI in a subprocess, the local sandbox, the fake LLM over HTTP, DuckDB."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from fakes.llm_server import FakeLLMServer

from trajsynth.cli.commands.runs import list_runs
from trajsynth.store import Store

pytestmark = pytest.mark.slow

# table -> primary key: the rows a run makes, compared id by id
COMPARED = {
    "blueprints": "blueprint_id",
    "blueprint_attempts": "attempt_id",
    "trees": "tree_id",
    "nodes": "node_id",
    "trajectories": "trajectory_id",
    "verdicts": "verdict_id",
    "llm_calls": "call_key",
    "work_units": "unit_id",
}


@pytest.fixture(scope="module")
def llm() -> Iterator[FakeLLMServer]:
    with FakeLLMServer(delay_s=0.05) as server:  # slow enough to be killed mid-round
        yield server


def _command(llm: FakeLLMServer) -> list[str]:
    return [
        sys.executable, "-m", "trajsynth.cli", "-q", "run",
        "--base-url", llm.base_url, "--model", "fake",
        "--tasks", "6", "--samples", "2", "--seed", "11",
    ]  # fmt: skip


def _env(home: Path) -> dict[str, str]:
    return {
        **os.environ,
        "SYNTH_SANDBOX__KIND": "local",
        "PREFECT_HOME": str(home / "prefect"),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "DO_NOT_TRACK": "1",
        "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120",
    }


def _run(
    cwd: Path, llm: FakeLLMServer, api: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    env = {**_env(cwd), **(api or {})}
    return subprocess.run(
        _command(llm), cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )


def _ids(store: Store) -> dict[str, set[str]]:
    return {t: {r[pk] for r in store.query(f"SELECT {pk} FROM {t}")} for t, pk in COMPARED.items()}


def _count(store: Store, sql: str) -> int:
    if not store.path.exists():
        return 0
    rows = store.query(sql)
    return int(rows[0]["n"]) if rows else 0


@pytest.fixture(scope="module")
def reference(
    tmp_path_factory: pytest.TempPathFactory, llm: FakeLLMServer, prefect_api: dict[str, str]
) -> Store:
    """The uninterrupted run with the same seeds, in its own directory and store. It talks to
    the session's Prefect API: only the runs that are killed or resumed start their own."""
    whole = tmp_path_factory.mktemp("whole")
    done = _run(whole, llm, prefect_api)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return Store(whole / "data" / "synth.duckdb")


# what must be stored before the kill, per stage: a table that fills as its units commit
PROGRESS = {"plan": "blueprint_attempts", "rollout": "trajectories"}


# how the run is killed at each stage: its whole process group (its sandboxes and servers die
# with it), or the `synth` process alone, as an OOM kill or `kill -9 PID` does, when Prefect's
# API server and every other descendant must still end (the watchdog reaps them)
KILL = {"plan": "synth alone", "rollout": "group"}


@pytest.mark.parametrize("stage", ["plan", "rollout"])
def test_sigkill_then_rerun_matches_an_uninterrupted_run(
    tmp_path: Path, llm: FakeLLMServer, reference: Store, stage: str
) -> None:
    ref_store = reference
    killed = tmp_path / "killed"
    killed.mkdir()
    ref_ids = _ids(ref_store)
    table = PROGRESS[stage]
    assert len(ref_ids[table]) >= 4 and ref_ids["trajectories"]

    # start the same run elsewhere; kill it once some units are stored
    store = Store(killed / "data" / "synth.duckdb")
    proc = subprocess.Popen(
        _command(llm),
        cwd=killed,
        env=_env(killed),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    progress = f"SELECT count(*) AS n FROM {table}"
    deadline = time.monotonic() + 300
    descendants: list[psutil.Process] = []
    try:
        while _count(store, progress) < 1:
            assert proc.poll() is None, f"the run ended before it was killed: {proc.stderr.read()}"
            assert time.monotonic() < deadline, f"no {stage} unit was stored in 300 s"
            time.sleep(0.05)
        if KILL[stage] == "synth alone":
            descendants = [
                p for p in psutil.Process(proc.pid).children(recursive=True)
                if "trajsynth.cli.reaper" not in " ".join(p.cmdline())
            ]  # fmt: skip
            assert descendants, "the run started no server or sandbox"
            proc.kill()
    finally:
        with contextlib.suppress(ProcessLookupError):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    _, alive = psutil.wait_procs(descendants, timeout=60)
    assert [p.cmdline() for p in alive if p.status() != psutil.STATUS_ZOMBIE] == []

    partial = _ids(store)
    assert 1 <= len(partial[table]) < len(ref_ids[table])  # killed in the middle
    assert [r.state for r in list_runs(store)] == ["running"]  # what `synth runs` shows
    for name in COMPARED:  # what was stored before the kill is what the whole run stores
        assert partial[name] <= ref_ids[name], name
    # every stored unit is whole: a tree comes with all its trajectories and their verdicts
    assert len(partial["trajectories"]) == len(partial["verdicts"])
    per_tree = "SELECT tree_id, count(*) AS n FROM trajectories GROUP BY tree_id"
    whole = {r["tree_id"]: r["n"] for r in ref_store.query(per_tree)}
    assert all(whole[r["tree_id"]] == r["n"] for r in store.query(per_tree))

    resumed = _run(killed, llm)
    assert resumed.returncode == 0, resumed.stdout[-2000:] + resumed.stderr[-2000:]

    final = _ids(store)
    for name in COMPARED:
        assert final[name] == ref_ids[name], f"{name}: ids differ after resume"
    assert store.counts() == ref_store.counts()  # same counts, every table
    outcome = "SELECT trajectory_id, termination, failure_class, n_calls FROM trajectories"
    assert sorted(map(str, store.query(outcome))) == sorted(map(str, ref_store.query(outcome)))
    verdicts = "SELECT verdict_id, passed, excluded FROM verdicts"
    assert sorted(map(str, store.query(verdicts))) == sorted(map(str, ref_store.query(verdicts)))
    runs = list_runs(store)
    assert [(r.state, r.trajectories) for r in runs] == [
        ("completed", len(ref_ids["trajectories"]))
    ]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["sigterm", "sigint"])
def test_sigterm_or_ctrl_c_stops_at_once_then_rerun_matches(
    tmp_path: Path, llm: FakeLLMServer, reference: Store, sig: signal.Signals
) -> None:
    """A scheduler's SIGTERM or a user's Ctrl-C (SIGINT to the whole group, as a terminal
    sends it) mid-rollout: the run ends within seconds (Prefect's runner used to wait for
    every unit in flight) with one line and status 128 + signal, nothing it started lives
    on, and running it again ends with the ids of an uninterrupted run."""
    store = Store(tmp_path / "data" / "synth.duckdb")
    proc = subprocess.Popen(
        _command(llm), cwd=tmp_path, env=_env(tmp_path),
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    deadline = time.monotonic() + 300
    try:
        while _count(store, "SELECT count(*) AS n FROM trajectories") < 1:
            assert proc.poll() is None, f"the run ended before the signal: {proc.stderr.read()}"
            assert time.monotonic() < deadline, "no rollout unit was stored in 300 s"
            time.sleep(0.05)
        descendants = psutil.Process(proc.pid).children(recursive=True)
        sent = time.monotonic()
        if sig == signal.SIGINT:
            os.killpg(proc.pid, sig)
        else:
            proc.send_signal(sig)
        _, err = proc.communicate(timeout=15)
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
    assert took < 15, f"{sig.name}: still running {took:.0f} s after the signal"
    assert proc.returncode == 128 + sig, (proc.returncode, err[-2000:])
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"stopped by {sig.name}: "), err[-2000:]
    assert "run the same command again" in lines[0]
    _, alive = psutil.wait_procs(descendants, timeout=15)  # servers, relays, the watchdog
    assert [p.cmdline() for p in alive if p.status() != psutil.STATUS_ZOMBIE] == []

    partial = _ids(store)
    ref_ids = _ids(reference)
    assert 1 <= len(partial["trajectories"]) < len(ref_ids["trajectories"])
    assert len(partial["trajectories"]) == len(partial["verdicts"])  # no half-stored unit
    for name in COMPARED:
        assert partial[name] <= ref_ids[name], name

    resumed = _run(tmp_path, llm)
    assert resumed.returncode == 0, resumed.stdout[-2000:] + resumed.stderr[-2000:]
    final = _ids(store)
    for name in COMPARED:
        assert final[name] == ref_ids[name], f"{name}: ids differ after resume"
    assert store.counts() == reference.counts()
    assert [r.state for r in list_runs(store)] == ["completed"]


# --------------------------------------------------------------------- the embedded model

# small enough for three runs on two busy cores; evaluated from an empty context per request
# (llm.chat_handler), the seeded answers do not depend on what the server computed before
EMBEDDED = ["--tasks", "2", "--samples", "2", "--seed", "5"]
EMBEDDED_ENV = {"SYNTH_LLM__EMBEDDED_DETERMINISTIC": "true", "SYNTH_RUN__MAX_TURNS": "2"}


def _embedded(
    cwd: Path, api: dict[str, str] | None = None, **popen: object
) -> subprocess.Popen[str]:
    argv = [sys.executable, "-m", "trajsynth.cli", "-q", "run", *EMBEDDED]
    env = {**_env(cwd), **EMBEDDED_ENV, **(api or {})}
    return subprocess.Popen(argv, cwd=cwd, env=env, text=True, **popen)  # type: ignore[call-overload]


def _finish(proc: subprocess.Popen[str]) -> None:
    out, err = proc.communicate(timeout=1500)
    assert proc.returncode == 0, (out or "")[-2000:] + (err or "")[-2000:]


@pytest.mark.llm
def test_sigkill_then_rerun_on_the_embedded_model_matches_an_uninterrupted_run(
    tmp_path: Path, prefect_api: dict[str, str]
) -> None:
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    whole.mkdir()
    killed.mkdir()
    # the uninterrupted run on the session's Prefect API; the killed and resumed ones start theirs
    _finish(_embedded(whole, prefect_api, stdout=subprocess.PIPE, stderr=subprocess.PIPE))
    reference = Store(whole / "data" / "synth.duckdb")
    ref_ids = _ids(reference)
    assert len(ref_ids["trajectories"]) >= 2

    store = Store(killed / "data" / "synth.duckdb")
    proc = _embedded(killed, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 1200
    try:
        while _count(store, "SELECT count(*) AS n FROM trajectories") < 1:
            if proc.poll() is not None:
                err = proc.stderr.read() if proc.stderr else ""
                pytest.fail(f"the run ended before it was killed: {err[-2000:]}")
            assert time.monotonic() < deadline, "no trajectory was stored in 1200 s"
            time.sleep(0.2)
        left = [
            p for p in psutil.Process(proc.pid).children(recursive=True)
            if "trajsynth.cli.reaper" not in " ".join(p.cmdline())
        ]  # fmt: skip
    finally:
        proc.kill()  # the synth process alone, as `kill -9 PID` does
        proc.wait(timeout=30)
    assert any("llm.chat_handler" in " ".join(p.cmdline()) for p in left), "no embedded server"
    _, alive = psutil.wait_procs(left, timeout=60)
    assert [p.cmdline() for p in alive if p.status() != psutil.STATUS_ZOMBIE] == []

    partial = _ids(store)
    assert 1 <= len(partial["trajectories"]) < len(ref_ids["trajectories"])
    for name in COMPARED:
        assert partial[name] <= ref_ids[name], name

    _finish(_embedded(killed, stdout=subprocess.PIPE, stderr=subprocess.PIPE))
    final = _ids(store)
    for name in COMPARED:
        assert final[name] == ref_ids[name], f"{name}: ids differ after resume"
    assert store.counts() == reference.counts()  # no duplicate, nothing lost
    outcome = "SELECT trajectory_id, termination, failure_class, n_calls FROM trajectories"
    assert sorted(map(str, store.query(outcome))) == sorted(map(str, reference.query(outcome)))
