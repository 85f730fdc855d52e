"""The bundled shop cluster in process, and a task planned on it without an LLM (the rollout
loop and tree tests share them)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from fakes.inprocess_env import InProcessEnvironment
from trajsynth.mcp_servers.registry import get_cluster
from trajsynth.planning.planner import Planner, plan_blueprint
from trajsynth.schemas import Blueprint, Cell, Difficulty, PathShape, ReasoningMode

__all__ = ["SHOP", "InProcessShop", "plan_shop_task"]

SHOP = get_cluster("shop")


class InProcessShop(InProcessEnvironment):
    """The in-process shop with what the rollout loop reads off an environment."""

    cluster = SHOP
    tools = SHOP.tools

    async def run_check(self, check_id: str, source: str) -> bool:
        raise AssertionError("no code checks on the shop")


async def plan_shop_task(
    tmp_path: Path, accept: Callable[[Blueprint], bool] = lambda bp: True
) -> Blueprint:
    """The first easy single-path shop task (seeds 0-19) that ``accept`` takes."""
    cell = Cell(
        cluster_id="shop",
        path_shape=PathShape.SINGLE,
        target_mode=ReasoningMode.DIRECT_EXECUTE,
        difficulty=Difficulty.EASY,
    )
    for seed in range(20):
        bp = await plan_blueprint(
            Planner(use_llm=False), None, lambda: InProcessShop("shop", tmp_path), SHOP, cell, seed
        )
        if isinstance(bp, Blueprint) and accept(bp):
            return bp
    raise AssertionError("no shop task planned")
