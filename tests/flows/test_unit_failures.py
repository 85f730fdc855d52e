"""A unit that fails after its retries is data, not the end of the run: its
row names the class and the error, the other units are stored and curated, the summary counts
it, and the next run of the same config retries that unit alone and ends where a run that
never failed ends. Real parts: Prefect (ephemeral API), the local sandbox, the fake LLM over
HTTP, DuckDB on disk."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from fakes.llm_server import create_app
from prefect.settings import (
    PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS,
    PREFECT_TASKS_REFRESH_CACHE,
    temporary_settings,
)
from rich.console import Console

from trajsynth.cli.run_command import print_summary
from trajsynth.flows.stages import record_failure
from trajsynth.flows.units import UnitRef
from trajsynth.schemas import LLMConfig, LLMError, RunConfig, SandboxKind
from trajsynth.store import Store, work_unit_row
from trajsynth.store.summary import summarize_run

# --------------------------------------------------------------------------- fast: the rows


def test_a_failure_is_counted_until_its_unit_is_done(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.duckdb")
    store.migrate()
    plan = UnitRef(kind="plan", unit_id="plan:0:1", round=0, cluster_id="calendar")
    tree = UnitRef(kind="rollout", unit_id="tree:bp_9", round=0, blueprint_id="bp_9")
    record_failure(store, "run_a", plan, LLMError("500 after retries"), attempts=2)
    record_failure(store, "run_a", plan, LLMError("timed out after retries"), attempts=2)
    record_failure(store, "run_a", tree, KeyError("slot"), attempts=1)
    record_failure(store, "run_b", tree, LLMError("another run"), attempts=3)

    rows = store.query("SELECT * FROM unit_failures WHERE run_id = 'run_a' ORDER BY failure_id")
    assert len(rows) == 3  # every failure is kept, the second of a unit as a second row
    assert sorted((r["unit_id"], r["failure"]) for r in rows) == [
        ("plan:0:1", 1), ("plan:0:1", 2), ("tree:bp_9", 1)
    ]  # fmt: skip
    summary = summarize_run(store, "run_a", wall_s=1.0)
    assert summary.failed_units == {"error": 1, "infra": 1}  # by unit, its latest failure
    assert summary.failed_unit_errors == [
        "1 x KeyError: 'slot'", "1 x LLMError: timed out after retries"
    ]  # fmt: skip

    store.insert("work_units", [work_unit_row("run_a", "plan", "plan:0:1")])  # retried: done
    summary = summarize_run(store, "run_a", wall_s=1.0)
    assert summary.failed_units == {"error": 1}
    assert summarize_run(store, "run_b", wall_s=1.0).failed_units == {"infra": 1}


def test_the_run_table_shows_failed_units_by_class_with_their_errors(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.duckdb")
    store.migrate()
    unit = UnitRef(kind="rollout", unit_id="tree:bp_9", round=0, blueprint_id="bp_9")
    record_failure(store, "run_a", unit, LLMError("server error 500 after retries"), attempts=3)
    console = Console(record=True, width=200)
    print_summary(
        summarize_run(store, "run_a", wall_s=1.0), console=console, store_path=str(store.path)
    )
    text = console.export_text()
    assert "units failed (the next run retries them)" in text and "infra: 1" in text
    assert "1 x LLMError: server error 500 after retries" in text


# --------------------------------------------------------------------------- slow: the flow

# quoted as in the request's JSON (find_user is also the start of the shop's find_user_by_email)
CALENDAR_TOOLS = ('"list_events"', '"check_availability"', '"create_event"', '"send_message"')
SHOP_TOOLS = ('"search_products"', '"add_to_cart"', '"place_order"', '"view_cart"')


PLANNER = "You write realistic requests"  # the planner's system prompt (planning/planner.py)
CALENDAR = "A team calendar with email"  # the calendar cluster's description
SHOP = "An online shop"


def _calendar_request(stage: str, text: str) -> bool:
    if stage == "plan":  # the planner's words for a calendar task
        return PLANNER in text and CALENDAR in text
    return any(name in text for name in CALENDAR_TOOLS)  # an assistant turn in one


class _Broken:
    """ASGI: a chat request of a calendar task at ``stage`` (``plan``: the planner's; ``rollout``:
    the assistant's) gets a 500, every other is answered; records every body."""

    def __init__(self, app: Callable[..., Awaitable[None]]) -> None:
        self.app = app
        self.stage: str | None = None
        self.bodies: list[str] = []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not scope["path"].endswith("/chat/completions"):
            await self.app(scope, receive, send)
            return
        chunks, more = [], True
        while more:
            message = await receive()
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        body = b"".join(chunks)
        text = body.decode("utf-8", "replace")
        self.bodies.append(text)
        if self.stage and _calendar_request(self.stage, text):
            error = json.dumps({"error": {"message": "scripted fault", "type": "server_error"}})
            await send({"type": "http.response.start", "status": 500,
                        "headers": [(b"content-type", b"application/json")]})  # fmt: skip
            await send({"type": "http.response.body", "body": error.encode()})
            return
        replayed = False

        async def replay() -> dict[str, Any]:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)


@pytest.fixture(scope="module")
def llm() -> Iterator[tuple[str, _Broken]]:
    broken = _Broken(create_app())
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(
        uvicorn.Config(broken, log_level="warning", access_log=False, lifespan="off")
    )
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the fake LLM did not start"
        time.sleep(0.01)
    yield f"http://127.0.0.1:{sock.getsockname()[1]}/v1", broken
    server.should_exit = True
    thread.join(timeout=10)
    sock.close()


def _config(base_url: str) -> RunConfig:
    llm = LLMConfig(base_url=base_url, model="fake", max_retries=0)
    return RunConfig(
        tasks=6, samples=2, seed=3, clusters=["shop", "calendar"], sandbox=SandboxKind.LOCAL,
        sandbox_pool=0, llm=llm,
    )  # fmt: skip


def _build(config: RunConfig, store: Path) -> Any:
    from trajsynth.flows.build import build_dataset

    return asyncio.run(build_dataset(config, store_path=str(store)))


COMPARED = {
    "blueprints": "blueprint_id",
    "blueprint_attempts": "attempt_id",
    "trees": "tree_id",
    "nodes": "node_id",
    "trajectories": "trajectory_id",
    "verdicts": "verdict_id",
    "work_units": "unit_id",
}


def _ids(store: Store) -> dict[str, set[str]]:
    return {t: {r[pk] for r in store.query(f"SELECT {pk} FROM {t}")} for t, pk in COMPARED.items()}


# every unit computes (no Prefect cache), so what a run asks the LLM is what it ran; a loaded
# machine starts the ephemeral API slowly
SETTINGS = {
    PREFECT_TASKS_REFRESH_CACHE: True,
    PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS: 300,
}


@pytest.fixture(scope="module")
def whole(tmp_path_factory: pytest.TempPathFactory, llm: tuple[str, _Broken]) -> Any:
    """The run that never failed: its summary and its store."""
    base_url, _ = llm
    path = tmp_path_factory.mktemp("whole") / "whole.duckdb"
    with temporary_settings(SETTINGS):
        summary = _build(_config(base_url), path)
    reference = Store(path)
    calendar = reference.query("SELECT count(*) AS n FROM blueprints WHERE cluster_id = 'calendar'")
    assert calendar[0]["n"] >= 1 and summary.trajectories  # a fault will have units to hit
    return summary, reference


# the class, the exception and the tries of a unit given up at each stage (plan_task has one
# retry, rollout_task two)
GIVEN_UP = {"plan": ("infra", "LLMError", 2), "rollout": ("infra", "InfraError", 3)}


@pytest.mark.slow
@pytest.mark.parametrize("stage", ["plan", "rollout"])
def test_a_failed_unit_is_recorded_the_run_completes_and_the_next_run_retries_it(
    tmp_path: Path, llm: tuple[str, _Broken], whole: Any, stage: str
) -> None:
    base_url, broken = llm
    config = _config(base_url)
    with temporary_settings(SETTINGS):
        broken.stage = stage
        try:
            first = _build(config, tmp_path / "faulty.duckdb")
        finally:
            broken.stage = None
        grown = Store(tmp_path / "faulty.duckdb").query("SELECT blueprint_id FROM trees")
        broken.bodies.clear()
        second = _build(config, tmp_path / "faulty.duckdb")
        retried = list(broken.bodies)
    ref_summary, reference = whole
    ref_ids = _ids(reference)
    faulty = Store(tmp_path / "faulty.duckdb")

    # the faulty run completed with the shop's units stored and curated, and said what failed
    failures = faulty.query("SELECT * FROM unit_failures ORDER BY unit_id")
    assert failures and {f["cluster_id"] for f in failures} == {"calendar"}
    cls, error_type, attempts = GIVEN_UP[stage]
    assert {(f["kind"], f["failure_class"], f["error_type"], f["attempts"]) for f in failures} == {
        (stage, cls, error_type, attempts)
    }  # the task's retries fired, then it was given up
    assert all("500" in f["error"] and "\n" not in f["error"] for f in failures)
    # no tree of a failed unit was stored (the retry's tree is the healthy run's)
    assert not {f["blueprint_id"] for f in failures} & {r["blueprint_id"] for r in grown}
    assert first.failed_units == {"infra": len(failures)}
    assert first.failed_unit_errors and first.trajectories >= 1
    assert faulty.query("SELECT state FROM runs")[0]["state"] == "completed"
    assert second.failed_units == {} and second.failed_unit_errors == []

    # the second run asked only about the failed (calendar) units: no shop unit ran again
    assert retried and not [b for b in retried if SHOP in b or any(t in b for t in SHOP_TOOLS)]
    # and it ends with exactly what a run that never failed stores
    final = _ids(faulty)
    for name in COMPARED:
        assert final[name] == ref_ids[name], f"{name}: ids differ after the retry"
    assert (second.trajectories, second.passed) == (ref_summary.trajectories, ref_summary.passed)
    curated = "SELECT count(*) AS n FROM round_stats WHERE run_id = ?"
    assert faulty.query(curated, [first.run_id])[0]["n"] == 1  # the round was curated
