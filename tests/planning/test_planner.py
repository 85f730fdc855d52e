"""The planner end to end: path, gold run, constraints, lint, words (docs/methods.md §3, §4).

Fast tests run the bundled shop server's real tools and state in-process
(``fakes.inprocess_env``); one test runs the same plan in a real Docker sandbox. The planner
LLM is the scripted fake behind the real openai client (``fakes.llm``).
"""

from __future__ import annotations

import importlib
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from fakes.inprocess_env import InProcessEnvironment
from fakes.llm import ScriptedLLM, say, tool_call

from trajsynth.curation.constraint_lint import DO_NOTHING_PASSES, NO_OUTCOME
from trajsynth.curation.verify import verify
from trajsynth.mcp_servers.environment import ToolResult
from trajsynth.mcp_servers.registry import get_cluster
from trajsynth.planning.gold import gold_demonstration
from trajsynth.planning.paths import PlannedPath
from trajsynth.planning.planner import (
    Planner,
    _ground_truth,
    _Truth,
    accepted_attempt,
    environment_factory,
    plan_blueprint,
)
from trajsynth.schemas import (
    AnswerContains,
    Blueprint,
    BlueprintAttempt,
    Cell,
    Difficulty,
    EnvState,
    FinalState,
    LLMConfig,
    ObservedField,
    PathShape,
    PlannedCall,
    ReasoningMode,
    RefArg,
    SandboxKind,
    SlotArg,
    SnapshotHandle,
    ToolCalled,
    ToolCluster,
    ToolEdge,
)

SHOP = get_cluster("shop")
PRODUCTS = {p["name"]: p["price"] for p in json.loads(
    importlib.import_module("trajsynth.mcp_servers.servers.shop.server").STORE.seed_file.read_text()
)["products"]}  # fmt: skip


def _only(cluster: ToolCluster, *names: str, **schema_patch: dict[str, Any]) -> ToolCluster:
    """The cluster cut down to some tools (the server still serves them all)."""
    tools = []
    for tool in cluster.tools:
        if tool.name not in names:
            continue
        if tool.name in schema_patch:
            tool = tool.model_copy(update={"input_schema": schema_patch[tool.name]})
        tools.append(tool)
    edges = [e for e in cluster.edges if e.source in names and e.target in names]
    return cluster.model_copy(update={"tools": tools, "edges": edges})


def _cell(shape: str = "single", mode: str = "direct_execute", difficulty: str = "easy") -> Cell:
    return Cell(
        cluster_id="shop",
        path_shape=PathShape(shape),
        target_mode=ReasoningMode(mode),
        difficulty=Difficulty(difficulty),
    )


def _factory(tmp_path: Path, name: str = "shop") -> Any:
    return lambda: InProcessEnvironment(name, tmp_path)


async def test_garbage_from_the_llm_falls_back_to_the_template(tmp_path: Path) -> None:
    cluster = _only(SHOP, "search_products")
    fake = ScriptedLLM(
        [
            say("Sure! Here is a persona: a person who likes blenders."),
            say('{"persona": "x", "goal": '),  # cut off mid-JSON
            say('{"goal": "Call search_products to find the blender price"}'),  # names a tool
        ]
    )
    planner = Planner(retries=2)
    bp = await plan_blueprint(planner, fake.client(), _factory(tmp_path), cluster, _cell(), 3)
    fake.assert_consumed()
    assert isinstance(bp, Blueprint), bp
    assert bp.words_source == "template"
    assert bp.words_attempts == 3
    assert [u.role for u in bp.usage] == ["planner"] * 3
    assert [s.tool for s in bp.tool_path] == ["search_products"]
    product = bp.slots["query"]
    assert product in PRODUCTS
    # short and explicit: a small model can act on it, and the answer is checked
    assert bp.goal == f"What is the price of {product}?"
    answer = [c for c in bp.constraints if isinstance(c, AnswerContains)]
    assert answer == [
        AnswerContains(values=[PRODUCTS[product]], derived_from=answer[0].derived_from)
    ]
    assert answer[0].hard
    # every request carried the planner's prompt with the fact to convey, never a tool name
    prompt = fake.requests[0]["messages"][1]["content"]
    assert product in prompt and "search_products" not in prompt
    row = accepted_attempt(bp)
    assert row.accepted and row.blueprint_id == bp.blueprint_id and row.words_source == "template"


async def test_valid_llm_words_are_kept(tmp_path: Path) -> None:
    cluster = _only(SHOP, "search_products")
    first = await plan_blueprint(
        Planner(use_llm=False), None, _factory(tmp_path), cluster, _cell(), 3
    )
    assert isinstance(first, Blueprint)
    product = first.slots["query"]
    fake = ScriptedLLM(
        [
            say(
                json.dumps(
                    {
                        "persona": "A home cook replacing a broken appliance.",
                        "goal": f"Hi! How much does the {product} cost these days?",
                        "hidden_info": {},
                    }
                )
            )
        ]
    )
    bp = await plan_blueprint(Planner(), fake.client(), _factory(tmp_path), cluster, _cell(), 3)
    fake.assert_consumed()
    assert isinstance(bp, Blueprint)
    assert bp.words_source == "llm" and bp.words_attempts == 1
    assert bp.goal == f"Hi! How much does the {product} cost these days?"
    assert bp.persona == "A home cook replacing a broken appliance."
    # the id hashes what the blueprint means, not who wrote its words
    assert bp.blueprint_id == first.blueprint_id
    assert bp.constraints == first.constraints


async def test_outside_cluster_words_come_from_a_schema_constrained_tool_call(
    tmp_path: Path,
) -> None:
    """For an outside cluster the planner offers the words as the one tool of the
    request (tool_choice required), and reads the goal from the call's JSON arguments."""
    cluster = _only(SHOP, "search_products").model_copy(update={"source": "outside"})
    first = await plan_blueprint(
        Planner(use_llm=False), None, _factory(tmp_path), cluster, _cell(), 3
    )
    assert isinstance(first, Blueprint)
    product = first.slots["query"]
    goal = f"I'm after the {product}: what does it cost?"
    fake = ScriptedLLM(
        [tool_call("write_user_request", {"persona": "A student on a budget.", "goal": goal})]
    )
    bp = await plan_blueprint(Planner(), fake.client(), _factory(tmp_path), cluster, _cell(), 3)
    fake.assert_consumed()
    assert isinstance(bp, Blueprint)
    assert bp.words_source == "llm" and bp.goal == goal
    request = fake.requests[0]
    assert request["tool_choice"] == "required"
    assert [t["function"]["name"] for t in request["tools"]] == ["write_user_request"]
    assert request["tools"][0]["function"]["parameters"]["required"] == ["persona", "goal"]


async def test_a_failing_gold_run_is_rejected_with_its_reason(tmp_path: Path) -> None:
    # get_order bound to product ids: the server answers "order not found" every time
    schema = {
        "type": "object",
        "properties": {"order_id": {"type": "string", "x-slot": "products.product_id"}},
        "required": ["order_id"],
    }
    cluster = _only(SHOP, "get_order", get_order=schema)
    planner = Planner(use_llm=False, gold_retries=2)
    attempt = await plan_blueprint(planner, None, _factory(tmp_path), cluster, _cell(), 0)
    assert isinstance(attempt, BlueprintAttempt)
    assert not attempt.accepted
    assert attempt.reason == "gold_run_error"
    tries = attempt.detail.split(" | ")
    assert len(tries) == 3  # the first path and two retries, each on a restored environment
    assert all("get_order" in t and "not found" in t for t in tries)
    again = await plan_blueprint(planner, None, _factory(tmp_path), cluster, _cell(), 0)
    assert again == attempt  # same seed, same rejection, same attempt id


class _NoAnswerEnv:
    """A one-tool environment whose answer holds nothing a question could ask for."""

    def __init__(self) -> None:
        self.state_ = EnvState(state_hash="s0", tables={"orders": [{"order_id": "#W1"}]})

    async def __aenter__(self) -> _NoAnswerEnv:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

    async def call_tool(self, name: str, arguments: dict) -> ToolResult:
        return ToolResult(text="{}", structured={"order_id": arguments["order_id"], "refunds": []})

    async def state(self) -> EnvState:
        return self.state_

    async def snapshot(self) -> SnapshotHandle:
        return SnapshotHandle(snapshot_id="s", sandbox_id="x")

    async def restore(self, handle: SnapshotHandle) -> None:
        return None


async def test_lint_rejects_constraints_a_do_nothing_run_passes() -> None:
    # a read-only path: "never cancel this order" (hard) is all there is to check, and a
    # trajectory that does nothing satisfies it
    edge = ToolEdge(
        source="get_order",
        target="cancel_order",
        out_field="order_id",
        in_param="order_id",
        score=1,
    )  # the user names the order; cancel_order takes its id from get_order
    cluster = _only(SHOP, "get_order", "cancel_order").model_copy(update={"edges": [edge]})
    attempt = await plan_blueprint(
        Planner(use_llm=False, gold_retries=0), None, _NoAnswerEnv, cluster, _cell(), 0
    )
    assert isinstance(attempt, BlueprintAttempt)
    assert attempt.reason == "constraint_lint"
    assert DO_NOTHING_PASSES in attempt.detail
    assert NO_OUTCOME in attempt.detail


class _ReadEnv(_NoAnswerEnv):
    """get_order whose one telling field comes from ``reading(n)``, n the call's number."""

    def __init__(self, field: str, reading: Any) -> None:
        super().__init__()
        self.field, self.reading, self.calls = field, reading, 0

    async def call_tool(self, name: str, arguments: dict) -> ToolResult:
        self.calls += 1
        body = {"order_id": arguments["order_id"], self.field: self.reading(self.calls)}
        return ToolResult(text=json.dumps(body), structured=body)


@pytest.mark.parametrize(
    ("field", "reading", "volatile"),
    [
        ("total", lambda n: 54.2, False),  # the same on every read
        ("total", lambda n: 50.0 + n, True),  # a counter: the re-read differs
        ("placed_at", lambda n: datetime.now(UTC).isoformat(timespec="seconds"), True),
    ],
    ids=["stable", "changes-between-reads", "reads-the-clock"],
)
async def test_an_answer_that_changes_between_reads_is_checked_per_episode(
    field: str, reading: Any, volatile: bool
) -> None:
    cluster = _only(SHOP, "get_order")
    bp = await plan_blueprint(
        Planner(use_llm=False, gold_retries=0),
        None,
        lambda: _ReadEnv(field, reading),
        cluster,
        _cell(),
        0,
    )
    assert isinstance(bp, Blueprint), bp
    (answer,) = [c for c in bp.constraints if isinstance(c, AnswerContains)]
    assert answer.hard
    assert answer.values == [bp.gold_run.calls[-1].observation[field]]
    if volatile:
        assert answer.observed == ObservedField(
            tool="get_order", path=[field], matchers=bp.gold_run.calls[-1].arguments
        )
    else:
        assert answer.observed is None


async def test_a_write_task_has_state_and_call_constraints(tmp_path: Path) -> None:
    cluster = _only(SHOP, "search_products", "find_user_by_email", "add_to_cart")
    cell = _cell("fan_in", "direct_execute", "medium")
    bp = await plan_blueprint(Planner(use_llm=False), None, _factory(tmp_path), cluster, cell, 1)
    assert isinstance(bp, Blueprint), bp
    assert [s.tool for s in bp.tool_path][-1] == "add_to_cart"
    assert bp.n_writes == 1 and bp.reads_before_write == [2]
    final = [c for c in bp.constraints if isinstance(c, FinalState)]
    assert final and final[0].gold_hash == bp.gold_run.final_state.state_hash
    assert final[0].gold_hash != bp.initial_state_id
    called = [c for c in bp.constraints if isinstance(c, ToolCalled)]
    assert called[0].call.tool == "add_to_cart"
    gold_add = bp.gold_run.calls[-1].arguments
    assert called[0].call.matchers["product_id"] == gold_add["product_id"]
    # the user says who they are and which product, by name
    assert bp.slots["email"] in bp.goal
    assert bp.slots["query"] in bp.goal
    assert gold_add["product_id"] not in bp.goal


async def test_planning_is_deterministic(tmp_path: Path) -> None:
    planner = Planner(use_llm=False)
    plans = []
    for seed in (11, 11, 12, 13):
        for cell in (_cell("chain", "verify_after_write", "medium"), _cell("single")):
            plans.append(await plan_blueprint(planner, None, _factory(tmp_path), SHOP, cell, seed))
    assert plans[0:2] == plans[2:4]  # same seed: same blueprints and rejections
    accepted = [p for p in plans if isinstance(p, Blueprint)]
    assert accepted
    ids = {p.blueprint_id for p in accepted}
    assert len(ids) == len({(p.cell, p.seed) for p in accepted})


@asynccontextmanager
async def _docker_env() -> AsyncIterator[Any]:
    async with environment_factory(
        _only(SHOP, "search_products"), sandbox_kind=SandboxKind.DOCKER
    )() as env:
        yield env


@pytest.mark.docker
async def test_plan_in_a_docker_sandbox_matches_the_in_process_plan(tmp_path: Path) -> None:
    cluster = _only(SHOP, "search_products")
    fake = ScriptedLLM([say("no json here"), say("still none")])
    bp = await plan_blueprint(Planner(retries=1), fake.client(), _docker_env, cluster, _cell(), 5)
    fake.assert_consumed()
    local = await plan_blueprint(
        Planner(use_llm=False), None, _factory(tmp_path), cluster, _cell(), 5
    )
    assert isinstance(bp, Blueprint) and isinstance(local, Blueprint)
    assert bp.words_source == "template"
    assert bp.initial_state_id == local.initial_state_id
    assert bp.blueprint_id == local.blueprint_id
    assert bp.goal == local.goal


@pytest.mark.llm
async def test_the_embedded_model_plans_an_easy_task(tmp_path: Path) -> None:
    """SmolLM2-135M rarely writes valid JSON: whatever it writes, a checked blueprint comes out."""
    from trajsynth.llm.client import open_llm_client

    cluster = _only(SHOP, "search_products")
    async with open_llm_client(LLMConfig(max_tokens=128)) as llm:
        bp = await plan_blueprint(Planner(retries=1), llm, _factory(tmp_path), cluster, _cell(), 2)
    assert isinstance(bp, Blueprint)
    assert bp.words_attempts == 2 or bp.words_source == "llm"
    assert [u.role for u in bp.usage] == ["planner"] * bp.words_attempts
    assert all(u.completion_tokens > 0 for u in bp.usage)
    product = bp.slots["query"]
    assert product in bp.goal or bp.hidden_info.get("query") == product


async def test_look_first_words_come_with_a_read_before_the_write_and_an_order_check(
    tmp_path: Path,
) -> None:
    """ "Please look at what I have first." only on a path that reads before its first write,
    and an ``order`` constraint holds the read before the write; a demonstration that skips
    the read fails it."""
    planner = Planner(use_llm=False)
    planned = [
        await plan_blueprint(
            planner,
            None,
            _factory(tmp_path),
            SHOP,
            _cell("chain", "explore_then_commit", "medium"),
            s,
        )
        for s in range(6)
    ]
    accepted = [p for p in planned if isinstance(p, Blueprint)]
    assert accepted, planned
    for bp in accepted:
        writes = [
            i for i, c in enumerate(bp.gold_run.calls) if SHOP.tool(c.tool).access.value == "write"
        ]
        assert writes and writes[0] >= 1, bp.tool_path
        orders = [c for c in bp.constraints if c.kind == "order"]
        looked = [o for o in orders if o.derived_from == "target_mode:explore_then_commit"]
        assert len(looked) == 1
        assert looked[0].then.tool == bp.gold_run.calls[writes[0]].tool
        assert looked[0].first.tool in {c.tool for c in bp.gold_run.calls[: writes[0]]}
    for p in planned:
        if isinstance(p, BlueprintAttempt):
            assert p.reason != "mode_unrealised" or "is read before the first write" in p.detail


async def test_every_accepted_blueprint_has_a_gold_demonstration_the_verifier_passes(
    tmp_path: Path,
) -> None:
    """The planner's self-check: the blueprint's own gold demonstration, verified with the
    product's verifier (hygiene included), passes; a blueprint whose best trajectory fails
    (an answer that only echoes the file name the user gave) is never delivered."""
    code = get_cluster("code")
    cell = Cell(
        cluster_id="code", path_shape=PathShape.SINGLE, target_mode=ReasoningMode.DIRECT_EXECUTE,
        difficulty=Difficulty.EASY,
    )  # fmt: skip
    planned = [
        await plan_blueprint(
            Planner(use_llm=False), None, _factory(tmp_path, "code"), code, cell, s
        )
        for s in range(4)
    ]
    accepted = [p for p in planned if isinstance(p, Blueprint)]
    assert accepted, [getattr(p, "detail", "")[:200] for p in planned]
    for bp in accepted:
        async with InProcessEnvironment("code", tmp_path) as env:
            trajectory, state = await gold_demonstration(
                bp, _Shown(env, code), run_id="t", shown=code.tools
            )
        assert state is not None
        verdict = verify(trajectory, bp.constraints, state)
        assert verdict.passed, (trajectory.final_answer, verdict.failed_checks)
    for p in planned:
        if isinstance(p, BlueprintAttempt) and p.reason == "self_check":
            assert "the gold demonstration fails the verifier" in p.detail


class _Shown:
    """An in-process environment as the rollout loop reads one (the cluster and its tools)."""

    def __init__(self, env: InProcessEnvironment, cluster: ToolCluster) -> None:
        self.env, self.cluster, self.tools = env, cluster, cluster.tools

    async def call_tool(self, name: str, arguments: dict) -> Any:
        return await self.env.call_tool(name, arguments)

    async def state(self) -> EnvState:
        return await self.env.state()


async def test_a_task_acts_as_one_user(tmp_path: Path) -> None:
    """A calendar chain that answers an invitation as one user and sends mail as another is
    not a request anyone writes: such paths are refused (``two_users``) and the accepted
    blueprints act as one user throughout. (The binder now rarely draws such a path for a
    whole attempt, so the refusal is shown on a path that reads as two users.)"""
    calendar = get_cluster("calendar")
    cell = Cell(
        cluster_id="calendar", path_shape=PathShape.CHAIN,
        target_mode=ReasoningMode.DIRECT_EXECUTE, difficulty=Difficulty.HARD,
    )  # fmt: skip
    planned = [
        await plan_blueprint(
            Planner(use_llm=False), None, _factory(tmp_path, "calendar"), calendar, cell, s
        )
        for s in (0, 2, 5)
    ]
    for p in planned:
        if isinstance(p, Blueprint):
            users = {c.arguments["user_id"] for c in p.gold_run.calls if "user_id" in c.arguments}
            assert len(users) <= 1, (users, p.tool_path)
    env = InProcessEnvironment("calendar", tmp_path)
    initial = await env.start()
    first, second = (row["user_id"] for row in initial.tables["users"][:2])
    two = PlannedPath(
        cluster_id="calendar", shape=PathShape.CHAIN, difficulty=Difficulty.EASY,
        steps=[
            PlannedCall(tool="list_messages", args={"user_id": SlotArg(name="user_id")}),
            PlannedCall(tool="list_messages", args={"user_id": SlotArg(name="user_id_2")}),
        ],
        slots={"user_id": first, "user_id_2": second},
    )  # fmt: skip
    refused = await _ground_truth(env, calendar, two, initial)
    assert not isinstance(refused, _Truth)
    assert refused.reason == "two_users" and "acts as 2 users" in refused.detail


async def test_a_read_only_path_whose_last_read_takes_nothing_from_the_first_is_refused(
    tmp_path: Path,
) -> None:
    """The question is asked of the last read: a last read that uses nothing the reads before
    it returned (get_current_time after convert_time; here a user's profile after a product
    search) would be asked while the words state the first read's inputs too. A last read
    fed by the one before is kept."""
    env = InProcessEnvironment("shop", tmp_path)
    initial = await env.start()
    user = initial.tables["users"][0]["user_id"]
    search = PlannedCall(tool="search_products", args={"query": SlotArg(name="query")})
    probe = PlannedCall(tool="get_user", args={"user_id": SlotArg(name="user_id")})
    unrelated = PlannedPath(
        cluster_id="shop", shape=PathShape.CHAIN, difficulty=Difficulty.EASY,
        steps=[search, probe], slots={"query": "Blue Ceramic Mug", "user_id": user},
    )  # fmt: skip
    refused = await _ground_truth(env, SHOP, unrelated, initial)
    assert not isinstance(refused, _Truth)
    assert refused.reason == "unrelated_reads" and "takes nothing" in refused.detail
    fed = PlannedCall(
        tool="get_product", args={"product_id": RefArg(step=0, field="products[0].product_id")}
    )
    related = unrelated.model_copy(
        update={"steps": [search, fed], "slots": {"query": "Blue Ceramic Mug"}}
    )
    kept = await _ground_truth(env, SHOP, related, await env.state())
    assert isinstance(kept, _Truth), kept


async def test_a_meeting_moved_to_the_time_it_already_has_is_refused(tmp_path: Path) -> None:
    """The reschedule resets the attendees' replies and sends mail, so the state changes, yet
    the event itself stays where it was: the initial state's row shows it (``noop_write``).
    Moved to another free slot, the same path is kept."""
    calendar = get_cluster("calendar")
    env = InProcessEnvironment("calendar", tmp_path)
    initial = await env.start()
    event = next(e for e in initial.tables["events"] if e["event_id"] == "EV1002")
    organizer = event["organizer_id"]
    find = PlannedCall(tool="find_user", args={"query": SlotArg(name="query")})
    move = PlannedCall(
        tool="reschedule_event",
        args={
            "user_id": RefArg(step=0, field="users[0].user_id"),
            **{k: SlotArg(name=k) for k in ("event_id", "date", "start_time", "end_time")},
        },
    )
    name = next(u["name"] for u in initial.tables["users"] if u["user_id"] == organizer)
    same = {k: event[k] for k in ("event_id", "date", "start_time", "end_time")}
    path = PlannedPath(
        cluster_id="calendar", shape=PathShape.CHAIN, difficulty=Difficulty.EASY,
        steps=[find, move], slots={"query": name, **same},
    )  # fmt: skip
    refused = await _ground_truth(env, calendar, path, initial)
    assert not isinstance(refused, _Truth)
    assert refused.reason == "noop_write" and "the initial state" in refused.detail
    env2 = InProcessEnvironment("calendar", tmp_path)
    initial2 = await env2.start()
    later = path.model_copy(
        update={"slots": {**path.slots, "start_time": "16:00", "end_time": "16:30"}}
    )
    kept = await _ground_truth(env2, calendar, later, initial2)
    assert isinstance(kept, _Truth), kept
