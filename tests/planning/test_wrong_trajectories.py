"""Wrong trajectories that used to pass: each is scored with the product's own ``verify``
against constraints the product planned (gold run, derived constraints, mutation lint) on a
server like the one that let it through, and must fail.

The five, as written by hand against the stores of three outside servers:
an ``mv`` of a missing file whose result is the error; a post while not authenticated; a
branch with the wrong name; the harness's ``reset_state`` alone; the address changed to
another city and then reset.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from fakes.llm import ScriptedLLM, slot_filler
from fakes.strangers import (
    StrangerEnvironment,
    gorilla,
    listed_repo,
    notebook,
    repo,
    retail,
    sized_files,
    stranger_cluster,
    tables,
)

from trajsynth.curation.verify import verify
from trajsynth.flows.units import _blueprint_row
from trajsynth.mcp_servers.readback import with_readbacks
from trajsynth.planning.argfill import FILL_TOOL
from trajsynth.planning.constraints import derive_constraints
from trajsynth.planning.gold import GoldFailure, run_gold_path
from trajsynth.planning.mutants import lint_by_mutation
from trajsynth.planning.planner import Planner, accepted_attempt, plan_blueprint
from trajsynth.schemas import (
    Blueprint,
    Cell,
    Constraint,
    Difficulty,
    EnvState,
    FinalState,
    LiteralArg,
    Message,
    MessageRole,
    PathShape,
    PlannedCall,
    ReasoningMode,
    ToolAccess,
    ToolCallRecord,
    ToolCluster,
    Trajectory,
    canonical_json,
)
from trajsynth.schemas.rollout import ObsClass, Termination
from trajsynth.store import Store
from trajsynth.store.summary import summarize_run


def _filler(values: dict[str, Any]) -> Any:
    return slot_filler(values, FILL_TOOL)


async def _plan(
    cluster: ToolCluster, make: Any, llm: Any, seeds: Any, difficulty: Difficulty = Difficulty.EASY
) -> list[Blueprint | Any]:
    cell = Cell(
        cluster_id=cluster.cluster_id,
        path_shape=PathShape.SINGLE,
        target_mode=ReasoningMode.DIRECT_EXECUTE,
        difficulty=difficulty,
    )
    return [
        await plan_blueprint(
            Planner(use_llm=llm is not None),
            llm,
            lambda: StrangerEnvironment(make, cluster),
            cluster,
            cell,
            seed,
        )  # fmt: skip
        for seed in seeds
    ]


def _steps(*calls: tuple[str, dict[str, Any]]) -> list[PlannedCall]:
    return [
        PlannedCall(tool=t, args={k: LiteralArg(value=v) for k, v in a.items()}) for t, a in calls
    ]


async def _planned(
    cluster: ToolCluster, make: Any, *calls: tuple[str, dict[str, Any]], lint: bool = True
) -> list[Constraint]:
    """The gold run of ``calls`` in a fresh environment, its derived constraints, then the
    mutation lint (which must leave no wrong variant passing)."""
    env = StrangerEnvironment(make, cluster)
    initial = await env.state()
    handle = await env.snapshot()
    outcome = await run_gold_path(env, cluster, _steps(*calls), {}, initial)
    assert not isinstance(outcome, GoldFailure), outcome
    constraints = derive_constraints(
        outcome.run.calls, outcome.run.final_state, cluster, [], initial_state=initial
    )
    if not lint:
        return constraints
    constraints, figures = await lint_by_mutation(
        env, handle, cluster, outcome.run.calls, constraints
    )
    assert figures.variants > 0 and figures.clean, figures
    return constraints


async def _score(
    cluster: ToolCluster,
    make: Any,
    constraints: list[Constraint],
    *calls: tuple[str, dict[str, Any], str | None],
) -> tuple[bool, list[str]]:
    """A hand-made trajectory acted out in a fresh environment: each call's result as the
    server answered it, or (a text given) as recorded then, with ``obs_class`` ok, the way the
    stores held error results before they were read as failures."""
    env = StrangerEnvironment(make, cluster)
    records = []
    for i, (tool, arguments, recorded) in enumerate(calls):
        result = await env.call_tool(tool, arguments)
        records.append(
            ToolCallRecord(
                call_id=f"c{i}",
                tool=tool,
                raw_arguments=canonical_json(arguments),
                arguments=arguments,
                observation=recorded if recorded is not None else result.text,
                obs_class=ObsClass.OK,
            )
        )
    # the end state as the rollout loop takes it: the probes, and any read-back a check asks
    state: EnvState = await with_readbacks(env, await env.state(), constraints)
    trajectory = Trajectory(
        trajectory_id="wrong",
        run_id="r",
        blueprint_id="bp",
        tree_id="t",
        leaf_node_id="l",
        cluster_id=cluster.cluster_id,
        messages=[Message(role=MessageRole.ASSISTANT, content="All done.")],
        tools=[t.to_openai() for t in cluster.tools],
        calls=records,
        final_answer="All done.",
        termination=Termination.ASSISTANT_DONE,
    )
    verdict = verify(trajectory, constraints, state)
    return verdict.passed, [r.detail for r in verdict.results if not r.passed]


async def test_error_results_are_failures_for_discovery() -> None:
    """The tools that answered "not authenticated" were tagged read on the strength of that
    answer; now a refused probe evidences nothing, and no edge cites one."""
    cluster = await stranger_cluster("gorilla", gorilla)
    tags = {t.name: t for t in cluster.tools}
    for name in ("post_tweet", "comment"):
        assert not (tags[name].access is ToolAccess.READ and tags[name].access_source == "probe")
        assert "succeeded" not in (tags[name].access_evidence or ""), tags[name].access_evidence
    assert tags["mv"].access is ToolAccess.WRITE
    for edge in cluster.edges:
        assert "not authenticated" not in (edge.evidence or "").lower(), edge


async def test_a_gold_run_ending_in_an_error_result_is_rejected() -> None:
    cluster = await stranger_cluster("gorilla", gorilla)
    env = StrangerEnvironment(gorilla, cluster)
    initial = await env.state()
    outcome = await run_gold_path(
        env, cluster, _steps(("post_tweet", {"content": "hello"})), {}, initial
    )
    assert isinstance(outcome, GoldFailure) and "not authenticated" in outcome.detail


async def test_mv_of_a_missing_file_fails() -> None:
    cluster = await stranger_cluster("gorilla", gorilla)
    constraints = await _planned(
        cluster, gorilla, ("mv", {"source": "notes.txt", "destination": "archive.txt"})
    )
    passed, why = await _score(
        cluster,
        gorilla,
        constraints,
        ("mv", {"source": "missing.txt", "destination": "archive.txt"}, None),
    )
    assert not passed, why


async def test_a_post_while_not_authenticated_fails() -> None:
    cluster = await stranger_cluster("gorilla", gorilla)
    constraints = await _planned(
        cluster,
        gorilla,
        ("authenticate_twitter", {"username": "sam", "password": "hunter2"}),
        ("post_tweet", {"content": "Budget meeting moved to 3pm"}),
    )
    passed, why = await _score(
        cluster,
        gorilla,
        constraints,
        ("post_tweet", {"content": "Budget meeting moved to 3pm"}, None),
    )
    assert not passed, why
    assert any("error result" in w or "never called" in w or "closest" in w for w in why), why


async def test_a_branch_with_the_wrong_name_fails() -> None:
    cluster = await stranger_cluster("repo", repo)
    # the hole the lint closes: the derived checks alone let the wrong name through
    derived = await _planned(
        cluster, repo, ("git_create_branch", {"branch_name": "feature-x"}), lint=False
    )
    passed, _ = await _score(
        cluster, repo, derived, ("git_create_branch", {"branch_name": "wrong-name"}, None)
    )
    assert passed
    constraints = await _planned(cluster, repo, ("git_create_branch", {"branch_name": "feature-x"}))
    passed, why = await _score(
        cluster, repo, constraints, ("git_create_branch", {"branch_name": "wrong-name"}, None)
    )
    assert not passed, why


async def test_a_text_of_the_same_length_fails() -> None:
    """server-filesystem's listings show sizes, not contents: "food 350" for "food 300" lists
    the same. The lint's near miss (the last digit moved on) finds the hole and matches the
    content; the derived checks alone let it through (the control)."""
    cluster = await stranger_cluster("sized", sized_files)
    budget = {"path": "budget.txt", "content": "Rent 1200, food 300"}
    wrong = ("write_file", {**budget, "content": "Rent 1200, food 350"}, None)
    derived = await _planned(cluster, sized_files, ("write_file", budget), lint=False)
    assert any(isinstance(c, FinalState) for c in derived)  # the listing sees a new file ...
    passed, _ = await _score(cluster, sized_files, derived, wrong)
    assert passed  # ... but not its content
    constraints = await _planned(cluster, sized_files, ("write_file", budget))
    passed, why = await _score(cluster, sized_files, constraints, wrong)
    assert not passed, why
    passed, why = await _score(cluster, sized_files, constraints, ("write_file", budget, None))
    assert passed, why


async def test_harness_controls_are_hidden_and_reset_alone_fails() -> None:
    cluster = await stranger_cluster(
        "retail", retail, hide_params=["state_key"], args={"user_id": "u_alice"}
    )
    names = {t.name for t in cluster.tools}
    assert "reset_state" not in names and "get_call_log" not in names
    assert set(cluster.server.hidden_tools) == {"reset_state", "get_call_log"}
    for t in cluster.tools:  # neither the routing key nor the fixed id reaches the model
        props = t.input_schema.get("properties") or {}
        assert "state_key" not in props and "user_id" not in props, t.name
    # reads are no longer writes: the call log is not a view
    assert {t.name: t.access for t in cluster.tools}["list_users"] is ToolAccess.READ
    assert all(p.tool != "get_call_log" for p in cluster.probes)
    constraints = await _planned(cluster, retail, ("update_address", {"city": "Denver"}))
    passed, why = await _score(cluster, retail, constraints, ("reset_state", {}, None))
    assert not passed, why


async def test_a_write_changed_then_reset_fails() -> None:
    cluster = await stranger_cluster(
        "retail", retail, hide_params=["state_key"], args={"user_id": "u_alice"}
    )
    constraints = await _planned(cluster, retail, ("update_address", {"city": "Denver"}))
    passed, why = await _score(
        cluster,
        retail,
        constraints,
        ("update_address", {"city": "Chicago"}, None),
        ("reset_state", {}, None),
    )
    assert not passed, why


async def test_the_injected_value_replaces_what_the_model_sends() -> None:
    """A junk ``state_key`` from the model never reaches the server: hidden, so dropped."""
    cluster = await stranger_cluster(
        "retail", retail, hide_params=["state_key"], args={"user_id": "u_alice"}
    )
    env = StrangerEnvironment(retail, cluster)
    result = await env.call_tool("update_address", {"city": "Reno"})
    assert not result.is_error and "u_alice" in result.text
    assert env.data["users"]["u_alice"]["city"] == "Reno"


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ('{"error": "User not authenticated"}', True),
        ('{"status": "error", "message": "bad id"}', True),
        ('{"success": false}', True),
        ("Error: pathspec 'x' did not match", True),
        ('{"status": "failed", "order_id": "#1"}', False),  # an order's status is data
        ('[{"error": "disk full", "ts": 1}]', False),  # log entries are data
        ('{"errors": []}', False),
        ("Created branch 'x'", False),
        # one outcome per item (server-filesystem's read_multiple_files): failed when all did
        (".: Error - EISDIR: illegal operation on a directory, read", True),
        ("a.txt: Error - ENOENT: no such file\nb.txt: Error - ENOENT: no such file", True),
        ("a.txt:\nmilk\n\n---\nb.txt: Error - ENOENT: no such file", False),
        ("error.log: 3 lines", False),
    ],
)
def test_result_error_reads_the_top_level_only(text: str, error: bool) -> None:
    from trajsynth.schemas.results import result_error

    assert (result_error(text) is not None) is error


async def test_the_planner_lints_outside_blueprints_and_the_summary_shows_it(
    tmp_path: Path,
) -> None:
    """``plan_blueprint`` on an outside cluster: the blueprint carries the lint's figures, no
    harness tool is on its path, and the stored figures reach the run summary."""
    cluster = await stranger_cluster("repo", listed_repo, hide_params=[], args={})
    fake = ScriptedLLM([_filler({"branch_name": "release-2.0"})] * 60)
    planned = await _plan(cluster, listed_repo, fake.client(), range(6))
    blueprints = [b for b in planned if isinstance(b, Blueprint)]
    assert blueprints, [getattr(b, "detail", "") for b in planned]
    for bp in blueprints:
        assert bp.mutation_lint is not None and bp.mutation_lint.clean, bp.mutation_lint
    store = Store(tmp_path / "s.duckdb")
    with store.session():
        store.insert("blueprints", [_blueprint_row(b, "run_a") for b in blueprints])
    summary = summarize_run(store, "run_a", wall_s=1.0)
    assert summary.mutation_lint["blueprints"] == len(blueprints)
    assert summary.mutation_lint["clean"] == len(blueprints)
    assert summary.mutation_lint["variants"] == sum(b.mutation_lint.variants for b in blueprints)


async def test_values_come_from_the_servers_world() -> None:
    """The ids the planner may bind are those the server knows: a guessed id that the
    server refused with an error result is not an accepted value, and values its reads
    returned come first."""
    cluster = await stranger_cluster("retail", retail, hide_params=["state_key"])
    for tool in ("get_user_details", "update_address"):
        values = cluster.arg_values.get(tool, {}).get("user_id", [])
        assert values and set(values) <= {"u_alice", "u_bob"}, (tool, values)
    gorilla_cluster = await stranger_cluster("gorilla", gorilla)
    sources = gorilla_cluster.arg_values.get("cat", {}).get("file_name", [])
    assert sources and sources[0] in {"notes.txt", "budget.csv"}, sources


async def test_a_read_only_path_is_not_rejected_by_the_lint() -> None:
    """No write, no wrong variant: the lint leaves the checks as they are (a read whose
    answer changes between reads once failed its own gold run here and was rejected)."""
    cluster = await stranger_cluster("gorilla", gorilla)
    env = StrangerEnvironment(gorilla, cluster)
    initial = await env.state()
    handle = await env.snapshot()
    outcome = await run_gold_path(env, cluster, _steps(("ls", {})), {}, initial)
    assert not isinstance(outcome, GoldFailure)
    constraints = derive_constraints(
        outcome.run.calls, outcome.run.final_state, cluster, ["notes.txt"], initial_state=initial
    )
    linted, figures = await lint_by_mutation(env, handle, cluster, outcome.run.calls, constraints)
    assert figures.variants == 0 and figures.clean and linted == constraints


async def test_the_probe_search_finds_a_read_that_sees_the_write() -> None:
    """A write the cluster's probes cannot see (an entity made by name, with no read that lists
    the graph) gets a read-back from the probe search: the read its own values reach
    (``open_nodes`` of the name it made), so a run that made another entity fails the end state
    while the gold run passes it."""
    cluster = await stranger_cluster("notebook", notebook)
    grace = [{"name": "Grace Hopper", "entityType": "person", "observations": ["admiral"]}]
    env = StrangerEnvironment(notebook, cluster)
    initial = await env.state()
    handle = await env.snapshot()
    outcome = await run_gold_path(
        env, cluster, _steps(("create_entities", {"entities": grace})), {}, initial
    )
    assert not isinstance(outcome, GoldFailure), outcome
    derived = derive_constraints(
        outcome.run.calls, outcome.run.final_state, cluster, [], initial_state=initial
    )
    assert not any(isinstance(c, FinalState) for c in derived)  # the probes see nothing
    constraints, figures = await lint_by_mutation(env, handle, cluster, outcome.run.calls, derived)
    checks = [c for c in constraints if isinstance(c, FinalState)]
    assert len(checks) == 1 and checks[0].probes, constraints
    assert checks[0].probes[0].tool == "open_nodes"
    assert checks[0].probes[0].arguments == {"names": ["Grace Hopper"]}
    assert figures.readback.startswith("open_nodes") and figures.readback_tried >= 1
    assert figures.final_state_catches >= 1 and figures.clean, figures
    passed, why = await _score(
        cluster, notebook, constraints, ("create_entities", {"entities": grace}, None)
    )
    assert passed, why
    pirate = [{"name": "Grace Hopper", "entityType": "person", "observations": ["pirate"]}]
    only_checks = [c for c in constraints if not isinstance(c, FinalState)]
    passed, why = await _score(
        cluster, notebook, only_checks, ("create_entities", {"entities": pirate}, None)
    )
    assert passed  # what the call checks alone let through ...
    passed, why = await _score(
        cluster, notebook, constraints, ("create_entities", {"entities": pirate}, None)
    )
    assert not passed and any("read-back" in w for w in why), why  # ... the read-back does not


async def test_the_probe_search_says_when_no_read_sees_the_write() -> None:
    """Nothing reads the feed: the search tries the reads it can and records that none saw the
    post, and the post is held by its call checks."""
    cluster = await stranger_cluster("gorilla", gorilla)
    env = StrangerEnvironment(gorilla, cluster)
    initial = await env.state()
    handle = await env.snapshot()
    outcome = await run_gold_path(
        env,
        cluster,
        _steps(
            ("authenticate_twitter", {"username": "sam", "password": "hunter2"}),
            ("post_tweet", {"content": "Budget meeting moved to 3pm"}),
        ),
        {},
        initial,
    )
    assert not isinstance(outcome, GoldFailure), outcome
    derived = derive_constraints(
        outcome.run.calls, outcome.run.final_state, cluster, [], initial_state=initial
    )
    constraints, figures = await lint_by_mutation(env, handle, cluster, outcome.run.calls, derived)
    assert figures.readback == "" and figures.readback_tried >= 1, figures
    assert not any(isinstance(c, FinalState) and c.probes for c in constraints)


_MADE_UP = ("notes", "groceries", "example", "hello from trajsynth", "travel plans", "todo.md")


def _made_up(text: str) -> list[str]:
    return [w for w in _MADE_UP if re.search(rf"(?<![\w-]){re.escape(w)}(?![\w-])", text)]


async def test_discovery_keeps_no_made_up_value() -> None:
    """Values the planner may bind are the server's own: what its reads returned before any
    probe sent them, never a guess (``example``) that the server accepted or echoed back."""
    book = await stranger_cluster("notebook", notebook)
    assert not _made_up(canonical_json(book.arg_values)), book.arg_values
    shop = await stranger_cluster("retail", retail, hide_params=["state_key"])
    assert set(shop.arg_values["update_address"]["user_id"]) == {"u_alice", "u_bob"}
    # a city to move to is the user's to say: none a probe sent or a probe's write returned
    assert not shop.arg_values["update_address"].get("city"), shop.arg_values
    files = await stranger_cluster("gorilla", gorilla)
    # the file its own listing named stays, though a guess has the same name
    assert files.arg_values["cat"]["file_name"][0] == "notes.txt"


async def test_what_a_probe_wrote_is_not_the_servers_world() -> None:
    """A table a probe created (a guess) has columns a read then lists; those columns are what
    the probe made, not the user's data, so no task may describe a table called ``id``."""
    db = await stranger_cluster("tables", tables)
    assert set(db.arg_values.get("describe_table", {}).get("table_name", [])) <= {"orders"}, (
        db.arg_values
    )
    assert not _made_up(canonical_json(db.arg_values)), db.arg_values


async def test_a_value_no_source_gives_is_never_a_placeholder() -> None:
    """A branch to create has no value in the server's world: without the planner LLM the
    path is rejected (``unbindable_param``), never run with a made-up name; with it, the
    LLM's name is the task's."""
    cluster = await stranger_cluster("repo", listed_repo, hide_params=[], args={})
    planned = await _plan(cluster, listed_repo, None, range(4))
    for outcome in planned:
        assert not isinstance(outcome, Blueprint) or not outcome.slots, outcome
        if not isinstance(outcome, Blueprint):
            assert not _made_up(outcome.detail), outcome.detail
    assert any(
        getattr(o, "reason", "") == "unbindable_param" and "branch_name" in o.detail
        for o in planned
    ), planned
    fake = ScriptedLLM([_filler({"branch_name": "release-2.0"})] * 40)
    planned = await _plan(cluster, listed_repo, fake.client(), range(4))
    blueprints = [b for b in planned if isinstance(b, Blueprint)]
    assert blueprints, [getattr(b, "detail", "") for b in planned]
    for bp in blueprints:
        assert not _made_up(bp.goal + canonical_json(bp.slots)), (bp.goal, bp.slots)
        assert "release-2.0" in bp.slots.values() or not bp.slots, bp.slots


async def test_a_duplicate_blueprint_is_not_kept(tmp_path: Path) -> None:
    """Two seeds that plan the same calls with the same values (two cells of a small world):
    the second is stored as a rejected attempt (``duplicate``), so its slot is redrawn; a
    blueprint with other values is kept."""
    from trajsynth.flows.stages import _kept_blueprints, _write
    from trajsynth.flows.units import (
        UnitRows,
        _attempt_row,
        blueprint_key,
        request_key,
        without_duplicate,
    )

    # a branch the model names is created alike by each seed (the retail server's moves of
    # Alice to the city she lives in would be alike too, but are no-ops: refused)
    cluster = await stranger_cluster("repo", listed_repo, hide_params=[], args={})
    fake = ScriptedLLM([_filler({"branch_name": "release-2.0"})] * 80)
    planned = [
        b for b in await _plan(cluster, listed_repo, fake.client(), range(8))
        if isinstance(b, Blueprint)
    ]  # fmt: skip
    rows = [_blueprint_row(b, "run_a") for b in planned]
    keys = [blueprint_key(r) for r in rows]
    twin = next(j for j in range(1, len(rows)) if keys[j] in keys[:j])  # the planner repeats
    assert len(set(keys)) < len(keys) and planned[twin].seed != planned[keys.index(keys[twin])].seed
    store = Store(tmp_path / "s.duckdb")

    def unit(i: int) -> UnitRows:
        attempt = accepted_attempt(planned[i])
        return UnitRows(
            unit_id=f"plan:0:{i}",
            kind="plan",
            rows={"blueprints": [rows[i]], "blueprint_attempts": [_attempt_row(attempt, "run_a")]},
            summary={"blueprint_id": planned[i].blueprint_id},
        )

    with store.session():
        for i in range(len(rows)):
            done = without_duplicate(unit(i), _kept_blueprints(store, "run_a", unit(i)))
            _write(store, "run_a", done)
        stored = store.query(
            "SELECT gold_run, cluster_id, goal, hidden_info FROM blueprints WHERE run_id = 'run_a'"
        )
        reasons = store.query("SELECT reason FROM blueprint_attempts WHERE NOT accepted")
    # each stored once by its calls and by its request; every planned one is among them
    assert len({blueprint_key(r) for r in stored}) == len(stored)
    assert len({request_key(r) for r in stored}) == len(stored) <= len(set(keys))
    held = {blueprint_key(r) for r in stored} | {request_key(r) for r in stored}
    assert all(blueprint_key(r) in held or request_key(r) in held for r in rows)
    assert sum(r["reason"] == "duplicate" for r in reasons) == len(keys) - len(stored)
