"""The gold run's references (``planning.gold.run_gold_path``) on the shop's real tools."""

from __future__ import annotations

from pathlib import Path

from fakes.inprocess_env import InProcessEnvironment
from fakes.shop import SHOP, InProcessShop

from trajsynth.mcp_servers.registry import get_cluster
from trajsynth.planning.gold import GoldFailure, GoldResult, run_gold_path
from trajsynth.schemas import LiteralArg, PlannedCall, RefArg, SlotArg


async def _run(tmp_path: Path, query: str, field: str) -> GoldResult | GoldFailure:
    steps = [
        PlannedCall(tool="search_products", args={"query": LiteralArg(value=query)}),
        PlannedCall(tool="get_product", args={"product_id": RefArg(step=0, field=field)}),
    ]
    async with InProcessShop("shop", tmp_path) as env:
        return await run_gold_path(env, SHOP, steps, {}, await env.state())


async def test_a_reference_to_an_empty_list_dangles_instead_of_passing_nothing(
    tmp_path: Path,
) -> None:
    """server-memory's case: a read returned no entities, and the next step was called with
    an empty list (it succeeded, acting on nothing) before the step after it failed."""
    failure = await _run(tmp_path, "zzqx-nothing", "products")
    assert isinstance(failure, GoldFailure)
    assert failure.step == 1 and "empty" in failure.detail


async def test_a_reference_through_a_list_of_objects_reads_its_first_item(tmp_path: Path) -> None:
    result = await _run(tmp_path, "blender", "products[].product_id")
    assert isinstance(result, GoldResult), result
    first = result.run.calls[0].observation["products"][0]["product_id"]  # type: ignore[index]
    assert result.run.calls[1].arguments == {"product_id": first}
    assert result.steps[1].args["product_id"] == RefArg(step=0, field="products[0].product_id")


async def test_a_write_that_changes_nothing_is_refused_and_the_next_value_is_tried(
    tmp_path: Path,
) -> None:
    """change_seat to the seat the booking already holds answers without an error and
    changes nothing; the gold run reads it as a refusal and moves to the binder's next seat."""
    travel = get_cluster("travel")
    env = InProcessEnvironment("travel", tmp_path, seed=0)
    initial = await env.start()
    booking = next(
        b for b in initial.tables["bookings"]
        if b["status"] == "confirmed" and b["fare_basis"] != "basic"
    )  # fmt: skip
    free = next(
        s["seat"] for s in initial.tables["seats"]
        if s["flight_id"] == booking["flight_id"] and s["cabin"] == booking["cabin"]
        and s["status"] == "available"
    )  # fmt: skip
    step = PlannedCall(
        tool="change_seat",
        args={"booking_id": SlotArg(name="booking_id"), "seat": SlotArg(name="seat")},
    )
    slots = {"booking_id": booking["booking_id"], "seat": booking["seat"]}
    stuck = await run_gold_path(env, travel, [step], slots, initial)
    assert isinstance(stuck, GoldFailure) and "changed nothing" in stuck.detail
    moved = await run_gold_path(
        env, travel, [step], slots, initial, alternatives={0: [{"seat": free}]}
    )
    assert isinstance(moved, GoldResult), moved
    assert moved.slots["seat"] == free and moved.run.calls[0].arguments["seat"] == free
    assert moved.run.final_state.state_hash != initial.state_hash


def test_a_demonstration_states_the_reading_its_own_call_returned() -> None:
    """A clock's answer is the episode's own reading, taken from the call made with the gold
    read's arguments: the demonstration must see the call's arguments (with none, the stored
    gold reading was stated and the planner's self-check failed a clock task)."""
    from trajsynth.planning.gold import answer_values
    from trajsynth.schemas import (
        AnswerContains,
        Blueprint,
        FunctionCall,
        Message,
        MessageRole,
        ObservedField,
        ToolCall,
    )

    observed = ObservedField(
        tool="get_current_time", path=["datetime"], matchers={"timezone": "Asia/Tokyo"}
    )
    check = AnswerContains(values=["2026-11-29T14:41:15+09:00"], observed=observed)
    blueprint = Blueprint.model_construct(constraints=[check])  # only its checks are read
    messages = []
    for i, (zone, stamp) in enumerate(
        [("Asia/Tokyo", "2026-11-29T14:41:24+09:00"), ("Europe/London", "2026-11-29T05:41:25Z")]
    ):
        call = ToolCall(
            id=f"c{i}",
            function=FunctionCall(name="get_current_time", arguments=f'{{"timezone": "{zone}"}}'),
        )
        messages += [
            Message(role=MessageRole.ASSISTANT, tool_calls=[call]),
            Message(
                role=MessageRole.TOOL,
                tool_call_id=f"c{i}",
                name="get_current_time",
                content=f'{{"datetime": "{stamp}"}}',
            ),
        ]
    assert answer_values(blueprint, messages) == ["2026-11-29T14:41:24+09:00"]
