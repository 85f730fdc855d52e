"""A read task accepts another read of the same thing (``planning.equivalent_reads``).

The filesystem bench planned "What is the content of the file docs/groceries.txt?" from a gold
run of ``read_multiple_files(paths=[...])``; a rollout that read the file with ``read_file`` and
stated its lines failed the check that pinned the gold run's tool. The planner now tries the
cluster's other reads with the gold read's values and keeps, as alternatives, those whose answer
holds what the task asks; a read of another file, or none, still fails.
"""

from __future__ import annotations

from typing import Any

from fakes.llm import ScriptedLLM, slot_filler
from fakes.strangers import StrangerEnvironment, shelf, stranger_cluster
from fakes.trajectories import call, make_trajectory

from trajsynth.curation.verify import verify
from trajsynth.planning.argfill import FILL_TOOL
from trajsynth.planning.constraints import derive_constraints
from trajsynth.planning.equivalent_reads import mapped_arguments, with_equivalent_reads
from trajsynth.planning.gold import GoldFailure, run_gold_path
from trajsynth.planning.planner import Planner, plan_blueprint
from trajsynth.schemas import (
    Blueprint,
    CallPattern,
    Cell,
    Constraint,
    Difficulty,
    GoldCall,
    LiteralArg,
    PathShape,
    PlannedCall,
    ReasoningMode,
    ToolCalled,
    ToolCluster,
    ToolSpec,
)

GROCERIES = "docs/groceries.txt"
LINES = "milk\neggs\nbread"


async def _read_task(
    cluster: ToolCluster,
    tool: str = "read_multiple_files",
    arguments: dict[str, Any] | None = None,
    answer: str = LINES,
) -> tuple[list[Constraint], list[Constraint]]:
    """A read task's checks as derived from its gold run (one call of ``tool``, the answer
    ``answer``), and with the equivalent reads."""
    env = StrangerEnvironment(shelf, cluster)
    initial = await env.state()
    handle = await env.snapshot()
    given = arguments if arguments is not None else {"paths": [GROCERIES]}
    steps = [PlannedCall(tool=tool, args={k: LiteralArg(value=v) for k, v in given.items()})]
    outcome = await run_gold_path(env, cluster, steps, {}, initial)
    assert not isinstance(outcome, GoldFailure), outcome
    derived = derive_constraints(
        outcome.run.calls, outcome.run.final_state, cluster, [answer], initial_state=initial
    )
    widened = await with_equivalent_reads(env, handle, cluster, outcome.run.calls, list(derived))
    return derived, widened


async def _passes(
    cluster: ToolCluster, constraints: list[Constraint], answer: str, *calls: tuple[str, dict]
) -> tuple[bool, list[str]]:
    """A hand-made episode, each call answered by the server, verified against ``constraints``."""
    env = StrangerEnvironment(shelf, cluster)
    made = []
    for tool, arguments in calls:
        result = await env.call_tool(tool, arguments)
        made.append(call(tool, arguments, result.text, error="tool" if result.is_error else None))
    trajectory = make_trajectory(
        "t", [made] if made else [], final=answer, opening="What is in docs/groceries.txt?"
    ).model_copy(update={"tools": [t.to_openai() for t in cluster.tools]})
    verdict = verify(trajectory, constraints, await env.state())
    return verdict.passed, [r.detail for r in verdict.results if r.hard and not r.passed]


def _reading(constraints: list[Constraint]) -> ToolCalled:
    [check] = [c for c in constraints if isinstance(c, ToolCalled)]
    return check


async def test_another_read_of_the_same_file_is_an_alternative_and_a_read_of_another_is_not() -> (
    None
):
    cluster = await stranger_cluster("shelf", shelf)
    derived, widened = await _read_task(cluster)
    assert _reading(derived).alternatives == []
    # read_text_file answers with the lines; get_file_info and list_directory name the file
    # without them, so they answer another question
    assert _reading(widened).alternatives == [
        CallPattern(tool="read_text_file", matchers={"path": GROCERIES})
    ]
    right = "The file docs/groceries.txt lists milk, eggs and bread."
    read_text = ("read_text_file", {"path": GROCERIES})
    passed, why = await _passes(cluster, derived, right, read_text)
    assert not passed and any("read_multiple_files" in w for w in why), why  # the control
    passed, why = await _passes(cluster, widened, right, read_text)
    assert passed, why
    passed, why = await _passes(
        cluster, widened, right, ("read_multiple_files", {"paths": [GROCERIES]})
    )
    assert passed, why
    # another file read, the answer stated anyway: the read does not match
    passed, why = await _passes(
        cluster, widened, right, ("read_text_file", {"path": "docs/meeting.txt"})
    )
    assert not passed and any(
        "closest: call #0 read_text_file differs on path" in w for w in why
    ), why
    # no read at all, and a read of the right file with a wrong answer
    assert not (await _passes(cluster, widened, right))[0]
    assert not (await _passes(cluster, widened, "It lists milk and tea.", read_text))[0]


def _spec(name: str, props: dict[str, Any], required: list[str]) -> ToolSpec:
    schema = {"type": "object", "properties": props, "required": required}
    return ToolSpec(name=name, description=f"{name}.", input_schema=schema)


def test_a_read_must_take_every_value_the_gold_read_was_given_and_need_no_other() -> None:
    gold = GoldCall(tool="read_file", arguments={"path": "a.txt", "head": 3}, observation="x")
    only_path = _spec("read_text_file", {"path": {"type": "string"}}, ["path"])
    assert mapped_arguments(gold, only_path) is None  # would drop "head"
    wants_more = _spec(
        "search_files", {"path": {"type": "string"}, "head": {"type": "integer"},
                         "pattern": {"type": "string"}}, ["path", "pattern"],
    )  # fmt: skip
    assert mapped_arguments(gold, wants_more) is None  # would guess a pattern
    many = GoldCall(tool="read_multiple_files", arguments={"paths": ["a", "b"]}, observation="x")
    assert mapped_arguments(many, only_path) is None  # two files are not one
    listed = _spec("read_multiple_files", {"paths": {"type": "array"}}, ["paths"])
    one = GoldCall(tool="read_text_file", arguments={"path": "a.txt"}, observation="x")
    assert mapped_arguments(one, listed) == {"paths": ["a.txt"]}


async def test_an_answer_the_arguments_state_gets_no_alternative() -> None:
    """The control for an echo: asked for the file name ``get_file_info`` gives, which its own
    path states, any read that repeats the path (``list_directory``) would answer the same;
    none is taken."""
    cluster = await stranger_cluster("shelf", shelf)
    _, widened = await _read_task(cluster, "get_file_info", {"path": GROCERIES}, "groceries.txt")
    assert _reading(widened).alternatives == []


async def test_the_planner_puts_the_equivalent_read_on_an_outside_read_task() -> None:
    cluster = await stranger_cluster("shelf", shelf)
    cell = Cell(
        cluster_id="shelf",
        path_shape=PathShape.SINGLE,
        target_mode=ReasoningMode.DIRECT_EXECUTE,
        difficulty=Difficulty.EASY,
    )
    values = {"path": GROCERIES, "paths": [GROCERIES]}
    fake = ScriptedLLM([slot_filler(values, FILL_TOOL)] * 40)
    texts = {"read_text_file", "read_multiple_files"}
    seen = set()
    for seed in range(3):
        bp = await plan_blueprint(
            Planner(use_llm=True),
            fake.client(),
            lambda: StrangerEnvironment(shelf, cluster),
            cluster,
            cell,
            seed,
        )
        assert isinstance(bp, Blueprint), bp
        check = _reading(bp.constraints)
        assert check.call.tool in texts, check
        assert [p.tool for p in check.alternatives] == sorted(texts - {check.call.tool})
        seen.add(check.call.tool)
    assert seen == texts  # both reads were the gold one once
