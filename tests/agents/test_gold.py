"""The gold run's references (``agents.gold.run_gold_path``) on the shop's real tools."""

from __future__ import annotations

from pathlib import Path

from fakes.shop import SHOP, InProcessShop

from trajsynth.agents.gold import GoldFailure, GoldResult, run_gold_path
from trajsynth.schemas import LiteralArg, PlannedCall, RefArg


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
