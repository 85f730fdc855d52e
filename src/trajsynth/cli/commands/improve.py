"""`synth improve --rounds N`: expert iteration on the embedded policy.

Wiring only: each round's run is `synth run` under its progress display (``run_and_report``)
with the previous round's tuned policy as the assistant; ``flows.improve.expert_iteration``
selects, adds gold demonstrations when the policy passed almost nothing, fine-tunes, writes
the GGUF and stores one ``improve_rounds`` row per round, printed here as a table.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from trajsynth.cli.context import current_settings
from trajsynth.cli.options import StoreOpt
from trajsynth.cli.settings import Settings
from trajsynth.cli.tables import Table
from trajsynth.schemas import Budgets, RolloutMode, RunConfig
from trajsynth.store import Store

__all__ = ["SMOKE_RUN", "improve", "improve_table", "loop_run_config"]

console = Console()


def improve_table(rows: list[dict[str, Any]]) -> Table:
    """The rounds of a loop: the policy, its pass rate, the data's entropies and cost."""
    table = Table(title="expert iteration (per round)")
    cols = ("round", "policy model", "passed / judged", "pass rate", "domain H",
            "mode H", "tokens / verified", "rows (rollout + gold)", "trained model")  # fmt: skip
    for col in cols:
        table.add_column(col, justify="right", overflow="fold")

    def num(value: Any, fmt: str) -> str:
        return "-" if value is None else format(value, fmt)

    for r in rows:
        table.add_row(
            str(r["round"]),
            r["policy_model_id"] or str(r["policy"]),
            f"{r['n_passed']} / {r['n_counted']}",
            num(r["pass_rate"], ".1%"),
            num(r["domain_entropy"], ".3f"),
            num(r["reasoning_mode_entropy"], ".3f"),
            num(r["tokens_per_verified"], ",.0f"),
            f"{r['n_rollout_rows']} + {r['n_gold_rows']}",
            r["trained_model_id"] or "-",
        )
    return table


SMOKE_RUN: dict[str, Any] = {
    "tasks": 2,
    "clusters": ["shop", "calendar"],
    "samples": 1,
    "rounds": 1,
    "rollout_mode": RolloutMode.LINEAR,
}
"""Each round's run on the tiny path: two linear tasks, one sample, one curation round."""


def loop_run_config(settings: Settings, overrides: dict[str, Any], *, smoke: bool) -> RunConfig:
    """The base RunConfig of a loop: the settings plus what the command line gave; with
    ``smoke`` the tiny path's values fill whatever the command line left unset, and
    episodes are short (the smoke path is about the loop, not the rollouts)."""
    given = {k: v for k, v in overrides.items() if v is not None}
    if not smoke:
        return settings.run_config(**given)
    config = settings.run_config(**{**SMOKE_RUN, **given})
    return config.model_copy(update={"budgets": Budgets(max_turns=3, max_tokens=1500)})


def improve(
    rounds: Annotated[
        int, typer.Option("--rounds", min=1, help="synthesis rounds; SFT after all but the last")
    ] = 2,
    tasks: Annotated[int | None, typer.Option(help="blueprints per round")] = None,
    clusters: Annotated[str | None, typer.Option(help="comma-separated cluster names")] = None,
    samples: Annotated[int | None, typer.Option(help="rollouts per task")] = None,
    seed: Annotated[int | None, typer.Option(help="round i uses seed + i (new tasks)")] = None,
    policy: Annotated[
        str | None, typer.Option(help="the first round's policy (default: the run's model)")
    ] = None,
    config: Annotated[
        Path | None, typer.Option("--sft-config", help="SFT config (TOML; see data/train/)")
    ] = None,
    max_steps: Annotated[int | None, typer.Option(help="SFT steps per round")] = None,
    min_verified: Annotated[
        int, typer.Option(help="fewer verified trajectories than this: add gold demos")
    ] = 2,
    gold: Annotated[bool, typer.Option("--gold/--no-gold", help="gold demos as fallback")] = True,
    work_dir: Annotated[
        Path | None, typer.Option("--work", help="models and data (default runs/improve/LOOP)")
    ] = None,
    smoke: Annotated[
        bool,
        typer.Option("--smoke", help="2 rounds of 2 linear tasks, 2 SFT steps: the tiny path"),
    ] = False,
    store_path: StoreOpt = None,
) -> None:
    """Expert iteration: synthesize, select, fine-tune, serve the tuned policy, again."""
    from trajsynth.cli.run_command import run_and_report
    from trajsynth.flows.improve import expert_iteration, loop_id
    from trajsynth.training.sft import SFTConfig, load_sft_config, smoke_sft

    loaded = current_settings()
    if store_path is not None:
        loaded = loaded.model_copy(update={"store_path": store_path})
    overrides: dict[str, Any] = {
        "tasks": tasks,
        "clusters": [c.strip() for c in clusters.split(",") if c.strip()] if clusters else None,
        "samples": samples,
        "seed": seed,
    }
    sft_over = {"max_steps": max_steps} if max_steps else {}
    if smoke:
        rounds = 2
        sft_cfg = smoke_sft(**sft_over)
    elif config is not None:
        sft_cfg = load_sft_config(config, **sft_over)
    else:
        sft_cfg = SFTConfig.model_validate(sft_over)
    run_config = loop_run_config(loaded, overrides, smoke=smoke)
    store = Store(loaded.store_path)
    if policy is not None:
        from trajsynth.cli.policy import policy_ref

        run_config = run_config.model_copy(update={"policy": policy_ref(policy, store)})
    loop = loop_id(run_config, rounds, sft_cfg)
    work = work_dir or Path("runs") / "improve" / loop
    workers = loaded.runner.workers
    console.print(f"loop [bold]{loop}[/]: {rounds} round(s), models and data in {work}")

    def synthesize(cfg: Any) -> None:
        run_and_report(loaded, cfg, console=console, concurrency=workers)

    def on_round(row: dict[str, Any]) -> None:
        console.print(
            f"round {row['round']}: {row['n_passed']}/{row['n_counted']} passed, "
            f"trained {row['trained_model_id'] or 'nothing (last round)'}"
        )

    rows = expert_iteration(
        run_config,
        store=store,
        rounds=rounds,
        sft=sft_cfg,
        work_dir=work,
        synthesize=synthesize,
        min_verified=min_verified,
        gold=gold,
        on_round=on_round,
    )
    console.print(improve_table(rows))
    console.print(f"stored {len(rows)} improve_rounds row(s) in {loaded.store_path}")
