"""The GRPO stage wired to its inputs (docs/design.md §12): a TrainConfig from TOML, and RL
rows from an export or planned on the spot.

Planning the rows of a run without an RL export uses the planner (``agents``, a floor
below ``training`` in docs/design.md's import table); ``training.run.train`` gets them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trajsynth.schemas import RLRow, TrainConfig
from trajsynth.training.config_file import load_config_file

if TYPE_CHECKING:
    from trajsynth.training.run import StepLog, TrainResult

__all__ = ["load_train_config", "rl_rows", "run_grpo"]


def load_train_config(path: Path, **overrides: Any) -> TrainConfig:
    """A TrainConfig from a TOML file (top-level keys, or a ``[train]`` table)."""
    return load_config_file(path, TrainConfig, table="train", **overrides)


def rl_rows(config: TrainConfig) -> list[RLRow]:
    """The RL export at ``config.tasks``, else ``config.n_tasks`` tasks planned without an LLM
    from ``config.clusters`` (all bundled clusters when empty)."""
    if config.tasks:
        from trajsynth.training.tasks import export_rows

        return export_rows(config)
    from trajsynth.mcp_servers.registry import get_cluster
    from trajsynth.planning.rl_tasks import plan_rl_rows

    clusters = [get_cluster(name) for name in config.clusters] if config.clusters else None
    return asyncio.run(
        plan_rl_rows(
            config.n_tasks, seed=config.seed, clusters=clusters, sandbox_kind=config.sandbox
        )
    )


def run_grpo(
    config: TrainConfig, *, on_step: Callable[[StepLog], None] | None = None
) -> TrainResult:
    """Train ``config`` on its RL rows (see :func:`rl_rows`)."""
    from trajsynth.training.run import train

    return train(config, rows=rl_rows(config), on_step=on_step)
