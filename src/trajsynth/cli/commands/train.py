"""`synth train --config F` / `synth train --smoke`: the GRPO stage (docs/methods.md §13)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from trajsynth.cli.tables import Table
from trajsynth.schemas import InputError
from trajsynth.training.grpo import load_train_config, run_grpo

__all__ = ["load_train_config", "train"]

log = logging.getLogger(__name__)
console = Console()


def train(
    config: Annotated[
        Path | None, typer.Option("--config", "-c", help="training config (TOML; see data/train/)")
    ] = None,
    smoke: Annotated[
        bool, typer.Option("--smoke", help="2 GRPO steps on CPU, bundled SmolLM2-135M, 4 tasks")
    ] = False,
    tasks: Annotated[
        Path | None, typer.Option("--tasks", help="RL export folder (default: plan tasks)")
    ] = None,
    advantage: Annotated[
        str | None,
        typer.Option(help="grpo | tree_subgroup | tree_gl | fork | gigpo | hgpo"),
    ] = None,
    max_steps: Annotated[int | None, typer.Option(help="override max_steps")] = None,
    output_dir: Annotated[Path | None, typer.Option(help="override output_dir")] = None,
) -> None:
    """Train the policy with GRPO; rewards come from the verifier on live environments."""
    from trajsynth.training.run import smoke_config

    overrides = {
        "tasks": str(tasks) if tasks else None,
        "advantage": advantage,
        "max_steps": max_steps,
        "output_dir": str(output_dir) if output_dir else None,
    }
    if smoke:
        cfg = smoke_config(**{k: v for k, v in overrides.items() if v is not None})
    elif config is not None:
        cfg = load_train_config(config, **overrides)
    else:
        raise InputError("give --config FILE or --smoke")
    log.info("training: %s, advantage %s, %d steps", cfg.model, cfg.advantage.value, cfg.max_steps)
    result = run_grpo(cfg)
    table = Table(title=f"GRPO ({cfg.advantage.value}) on {result.n_tasks} tasks")
    for column in ("step", "seconds", "reward", "pass rate", "loss"):
        table.add_column(column, justify="right")
    for s in result.steps:
        pass_rate = s.logs.get("reward/pass_rate")
        table.add_row(
            str(s.step),
            f"{s.seconds:.1f}",
            "-" if s.reward is None else f"{s.reward:.3f}",
            "-" if pass_rate is None else f"{pass_rate:.2f}",
            f"{s.logs.get('loss', float('nan')):.4f}",
        )
    console.print(table)
    console.print(
        f"load {result.load_s:.1f} s; {result.seconds_per_step:.1f} s per step (CPU)"
        if cfg.use_cpu
        else f"load {result.load_s:.1f} s; {result.seconds_per_step:.1f} s per step"
    )
    if cfg.early_stop.enabled:
        console.print(f"early stopping saved {result.tokens_saved} tokens")
    console.print(f"output: {result.output_dir}")
