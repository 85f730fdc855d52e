"""The run's token budget is split over its units up front, so no run can exceed it; a unit
given up after its retries is a failure row with its class; a rollout that outgrew the
server's context is stored and its unit done."""

from __future__ import annotations

import pytest
from fakes.llm_server import FakeLLMServer
from fakes.shop import SHOP, plan_shop_task

from trajsynth.cli.settings import load_settings
from trajsynth.flows.units import (
    UnitRef,
    context_tokens,
    failure_class_of,
    grow_unit,
    rollout_unit_id,
    unit_failure_row,
    unit_token_budget,
    user_for,
)
from trajsynth.schemas import (
    Budgets,
    InfraError,
    LLMConfig,
    LLMError,
    MCPServerError,
    ModelOutputError,
    RolloutMode,
    RunConfig,
    SandboxKind,
    TreeConfig,
)


def test_run_budget_is_split_evenly_over_trees_and_caps_each() -> None:
    tree = RunConfig(
        tasks=5,
        rounds=2,
        samples=4,
        tree=TreeConfig(max_tree_tokens=24_000),
        budgets=Budgets(max_run_tokens=50_000),
    )
    assert unit_token_budget(tree) == 5_000  # 50,000 over 10 trees
    assert unit_token_budget(tree) * tree.tasks * tree.rounds <= 50_000
    roomy = tree.model_copy(update={"budgets": Budgets(max_run_tokens=10**9)})
    assert unit_token_budget(roomy) == 24_000  # never above the tree's own budget
    unbounded = tree.model_copy(update={"budgets": Budgets()})
    assert unit_token_budget(unbounded) == 24_000


def test_linear_units_are_rollouts_and_share_the_run_budget() -> None:
    linear = RunConfig(
        tasks=5,
        rounds=1,
        samples=4,
        rollout_mode=RolloutMode.LINEAR,
        budgets=Budgets(max_tokens=6_000, max_run_tokens=40_000),
    )
    assert unit_token_budget(linear) == 2_000  # 40,000 over 20 rollouts
    assert rollout_unit_id("bp_1", RolloutMode.LINEAR, 3) == "rollout:bp_1:3"
    assert rollout_unit_id("bp_1", RolloutMode.TREE, 3) == "tree:bp_1"


def test_a_unit_given_up_is_a_failure_row_with_its_class_and_one_line() -> None:
    unit = UnitRef(kind="rollout", unit_id="tree:bp_1", round=0, cluster_id="shop",
                   blueprint_id="bp_1")  # fmt: skip
    exc = MCPServerError("server did not start\nTraceback (most recent call last): ...")
    row = unit_failure_row("run_x", unit, exc, attempts=3, failure=1)
    assert (row.failure_class, row.error_type, row.attempts) == (
        "infra",
        "MCPServerError",
        3,
    )
    assert row.error == "MCPServerError: server did not start"  # one line
    assert (row.unit_id, row.blueprint_id, row.kind) == ("tree:bp_1", "bp_1", "rollout")
    again = unit_failure_row("run_x", unit, exc, attempts=3, failure=2)
    assert again.failure_id != row.failure_id  # a second failure is a second row
    assert unit_failure_row("run_x", unit, exc, attempts=3, failure=1).failure_id == (
        row.failure_id
    )  # and the same failure is the same row (idempotent writes)


def test_an_exception_of_no_class_is_recorded_as_error() -> None:
    unit = UnitRef(kind="plan", unit_id="plan:0:1", round=0)
    assert failure_class_of(LLMError("500 after retries")) == "infra"
    assert failure_class_of(ModelOutputError("bad json")) == "model"
    row = unit_failure_row("run_x", unit, KeyError("slot"), attempts=1, failure=1)
    assert (row.failure_class, row.error) == ("error", "KeyError: 'slot'")
    lone = unit_failure_row("run_x", unit, ValueError("bad \ud800 text"), attempts=1, failure=1)
    lone.error.encode("utf-8")  # a lone surrogate is stored, not a crash


def test_embedded_ctx_from_synth_toml_is_the_context_rollouts_fit_tools_into(tmp_path) -> None:
    """``[llm] embedded_ctx`` in synth.toml reaches the run's config (the embedded server is
    started with it, ``llm.client.open_llm_client``) and the units' tool fitting; an
    endpoint's context is not known, so its tools are all shown."""
    toml = tmp_path / "synth.toml"
    toml.write_text("[llm]\nembedded_ctx = 8192\n")
    config = load_settings(toml).run_config()
    assert config.llm.embedded_ctx == 8192 and context_tokens(config) == 8192
    remote = config.model_copy(update={"llm": LLMConfig(base_url="http://gpu:8000/v1")})
    assert context_tokens(remote) is None


@pytest.mark.slow  # the local sandbox's MCP server: a few seconds
async def test_a_unit_whose_rollout_outgrew_the_context_is_done_not_failed(tmp_path) -> None:
    """A server refusing the prompt as too long for its context (llama-cpp-python's 500 with
    llama.cpp's words, which other 5xx would retry) ends the rollout as ``context_limit``:
    the unit stores it, judged, and is done. The control: a server failing with another 500
    fails the unit (an ``InfraError``, retried by the next run)."""
    blueprint = await plan_shop_task(tmp_path)

    def config(base_url: str) -> RunConfig:
        return RunConfig(
            tasks=1, samples=1, rollout_mode=RolloutMode.LINEAR, sandbox=SandboxKind.LOCAL,
            sandbox_pool=0, llm=LLMConfig(base_url=base_url, model="fake", max_retries=1),
        )  # fmt: skip

    with FakeLLMServer(n_ctx=1, overflow="llama-cpp-python-raw") as server:
        run = config(server.base_url)
        unit = await grow_unit(
            config=run, llm=run.llm, run_id="run_c", blueprint=blueprint, cluster=SHOP
        )
        assert server.requests == 1  # refused once, not retried
    (trajectory,) = unit.rows["trajectories"]
    (verdict,) = unit.rows["verdicts"]
    assert unit.done and trajectory.termination == "context_limit"
    # judged like a rollout out of turns: it failed its task (nothing was done), as the model's
    assert trajectory.failure_class == "model" and not verdict.excluded

    with FakeLLMServer(fail_first=10) as broken:
        run = config(broken.base_url)
        with pytest.raises(InfraError):
            await grow_unit(
                config=run, llm=run.llm, run_id="run_c", blueprint=blueprint, cluster=SHOP
            )


def test_the_embedded_user_stops_when_served_unless_told_otherwise() -> None:
    """The 135M user never writes the stop marker, so by default it stops once the goal's
    checks hold; an endpoint's model ends the dialogue itself; the setting wins either way."""
    assert user_for(RunConfig()).stop_when_met
    endpoint = LLMConfig(base_url="http://localhost:8000/v1")
    assert not user_for(RunConfig(llm=endpoint)).stop_when_met
    assert not user_for(RunConfig(user_stop_when_met=False)).stop_when_met
    assert user_for(RunConfig(llm=endpoint, user_stop_when_met=True)).stop_when_met
    # the default keeps the run ids of before; a setting given is part of the id
    ids = {RunConfig(user_stop_when_met=v).config_hash() for v in (None, False, True)}
    assert len(ids) == 3


async def test_the_same_request_over_another_path_is_a_duplicate(tmp_path) -> None:
    """server-memory planned "Please delete the entity "Ada Lovelace"." three times, over
    ``read_graph`` and over ``open_nodes``: one request to the person asking, kept once.
    Controls: the same words holding back another fact, and other words, are other tasks."""
    from trajsynth.flows.units import UnitRows, _attempt_row, _blueprint_row, without_duplicate
    from trajsynth.planning.planner import accepted_attempt

    first = await plan_shop_task(tmp_path)
    calls = first.gold_run.calls
    other_path = first.model_copy(
        update={
            "blueprint_id": "bp_other_path",
            "goal": "  " + first.goal.upper() + " ",
            "gold_run": first.gold_run.model_copy(update={"calls": [*calls, calls[-1]]}),
        }
    )

    def unit(bp) -> UnitRows:
        return UnitRows(
            unit_id="plan:0:1",
            kind="plan",
            rows={
                "blueprints": [_blueprint_row(bp, "run_a")],
                "blueprint_attempts": [_attempt_row(accepted_attempt(bp), "run_a")],
            },
            summary={"blueprint_id": bp.blueprint_id},
        )

    kept = [_blueprint_row(first, "run_a")]
    done = without_duplicate(unit(other_path), kept)
    assert done.rows["blueprints"] == [] and done.summary["reason"] == "duplicate"
    assert "the same request as" in done.rows["blueprint_attempts"][0].detail
    held = other_path.model_copy(update={"hidden_info": {"note": "another fact"}})
    assert without_duplicate(unit(held), kept).rows["blueprints"]
    reworded = other_path.model_copy(update={"goal": first.goal + " Thanks."})
    assert without_duplicate(unit(reworded), kept).rows["blueprints"]
