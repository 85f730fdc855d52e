"""`synth sft`: supervised fine-tuning on an SFT export, a run's selection, or gold demos.

Wiring only: the data comes from ``--data`` (an export), ``--run`` (that run's SFT
selection, exported first) or, with ``--smoke`` and neither, the verified gold
demonstrations of a few tasks planned on the spot; ``training.sft.sft`` trains,
``training.serve.export_gguf`` writes the GGUF the embedded server loads, and a ``models``
row records the model, its parent, its data and its figures.
"""

from __future__ import annotations

import asyncio
import logging
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from trajsynth.cli.context import current_settings
from trajsynth.cli.tables import Table
from trajsynth.schemas import Blueprint, InputError, SandboxKind, SFTRow, Trajectory, Verdict
from trajsynth.store import Store

__all__ = ["gold_export", "sft", "write_sft_rows"]

log = logging.getLogger(__name__)
console = Console()


def write_sft_rows(pairs: Sequence[tuple[Trajectory, Verdict]], folder: Path) -> Path:
    """Trajectories as the SFT export writes them (Parquet with the export's features, and
    the tokenizer beside them), so ``synth sft`` reads them like any export."""
    from trajsynth.export import records
    from trajsynth.llm.chat_template import TOKENIZER_DIR, save_tokenizer_files

    rows = [
        SFTRow(
            id=t.trajectory_id,
            messages=t.messages,
            tools=t.tools,
            task_id=t.blueprint_id,
            cluster_id=t.cluster_id,
            score=v.score,
            verdict=v.passed,
            metadata={"run_id": t.run_id, "round": t.round, "source": t.source},
        )
        for t, v in pairs
    ]
    if not rows:
        raise InputError(f"{folder}: no trajectories to write: nothing to train on")
    records.write_parquet([records.sft_record(r) for r in rows], records.sft_features(), folder)
    save_tokenizer_files(folder / TOKENIZER_DIR)
    return folder


def gold_export(
    folder: Path,
    *,
    clusters: Sequence[str],
    per_cluster: int,
    seed: int = 0,
    distractors: int | None = None,
) -> tuple[Path, list[Blueprint]]:
    """Plan ``per_cluster`` tasks per cluster (no LLM), replay their gold runs, keep the
    verified ones and write them as an SFT export; returns it and the tasks planned.
    ``distractors``: each row lists the needed tools plus that many nearest
    (``LLMConfig.distractors``); None: every tool."""
    from trajsynth.mcp_servers.registry import get_cluster
    from trajsynth.planning.gold import gold_demos
    from trajsynth.planning.heldout import plan_eval_tasks

    found = {c: get_cluster(c) for c in clusters}

    async def build() -> tuple[list[tuple[Trajectory, Verdict]], list[Blueprint]]:
        tasks = await plan_eval_tasks(
            list(found.values()),
            per_cluster,
            seed=seed,
            sandbox_kind=SandboxKind.LOCAL,
            seed_base=1_000,
        )
        pairs = await gold_demos(
            tasks,
            found,
            run_id="gold",
            sandbox_kind=SandboxKind.LOCAL,
            distractors=distractors,
        )
        return pairs, tasks

    pairs, tasks = asyncio.run(build())
    return write_sft_rows(pairs, folder), tasks


def sft(
    data: Annotated[
        Path | None, typer.Option("--data", help="SFT export (dataset root or its sft/ folder)")
    ] = None,
    run: Annotated[
        str | None, typer.Option("--run", help="train on this run's SFT selection")
    ] = None,
    model: Annotated[
        str | None, typer.Option("--model", help="'embedded', a HF model folder or a .gguf")
    ] = None,
    config: Annotated[
        Path | None, typer.Option("--config", "-c", help="SFT config (TOML; see data/train/)")
    ] = None,
    smoke: Annotated[
        bool, typer.Option("--smoke", help="2 LoRA steps on CPU (gold demos without --data)")
    ] = False,
    full: Annotated[bool, typer.Option("--full", help="full fine-tuning instead of LoRA")] = False,
    max_steps: Annotated[int | None, typer.Option(help="override max_steps")] = None,
    output_dir: Annotated[Path | None, typer.Option(help="override output_dir")] = None,
    gguf: Annotated[bool, typer.Option("--gguf/--no-gguf", help="write model.f16.gguf")] = True,
    store_path: Annotated[Path | None, typer.Option("--store", help="DuckDB store")] = None,
) -> None:
    """Fine-tune the policy on verified trajectories (TRL SFTTrainer, assistant-only loss)."""
    from trajsynth.training.sft import load_sft_config, smoke_sft
    from trajsynth.training.sft import sft as run_sft

    overrides: dict[str, Any] = {
        "model": model,
        "max_steps": max_steps,
        "output_dir": str(output_dir) if output_dir else None,
    }
    overrides = {k: v for k, v in overrides.items() if v is not None}
    if smoke:
        cfg = smoke_sft(**overrides)
    elif config is not None:
        cfg = load_sft_config(config, **overrides)
    else:
        from trajsynth.training.sft import SFTConfig

        cfg = SFTConfig.model_validate(overrides)
    if full:
        cfg = cfg.model_copy(update={"lora": cfg.lora.model_copy(update={"enabled": False})})
    store = Store(store_path or current_settings().store_path)
    known: list[Blueprint] = []  # tasks planned here, not in the store (gold demos)
    with tempfile.TemporaryDirectory(prefix="synth-sft-") as tmp:
        if data is not None:
            source = data
        elif run is not None:
            from trajsynth.cli.ids import resolve
            from trajsynth.export import export_sft

            run = resolve(store, "run", run)  # any unique prefix, as every id argument
            export_sft(store, Path(tmp) / "data", run_id=run)
            source = Path(tmp) / "data"
        elif smoke:
            source, known = gold_export(
                Path(tmp) / "gold", clusters=["shop", "calendar"], per_cluster=2
            )
        else:
            raise InputError("give --data EXPORT, --run RUN_ID, or --smoke")
        cfg = cfg.model_copy(update={"data": str(source)})
        result = run_sft(cfg)
        from trajsynth.training.records import data_hash
        from trajsynth.training.sft import load_sft_dataset

        rows = load_sft_dataset(
            source, max_rows=cfg.max_rows, extra_columns=("task_id", "run_id")
        ).to_list()
    from trajsynth.flows.lineage import row_lineage

    # every row's task, whatever the source: `synth eval` checks held-out tasks against these
    lineage = row_lineage(store, rows, known)
    if lineage.unresolved:
        console.print(
            f"[yellow]warning:[/] {len(lineage.unresolved)} training tasks are not in "
            f"{store.path} ({lineage.unresolved[0]}, ...): `synth eval` will refuse this "
            "model unless given --allow-untracked"
        )
    gguf_path = None
    if gguf:
        from trajsynth.training.serve import export_gguf

        gguf_path = str(export_gguf(result.model_dir, Path(cfg.output_dir) / "model.f16.gguf"))
    from trajsynth.training.records import model_row

    row = model_row(
        path=result.model_dir,
        parent=cfg.model,
        method="sft-lora" if cfg.lora.enabled else "sft-full",
        run_ids=lineage.run_ids,
        data=data_hash(rows),
        lineage=[k.model_dump(mode="json") for k in lineage.keys],
        unresolved=lineage.unresolved,
        n_rows=result.n_rows,
        n_tokens=result.n_tokens,
        config=cfg.model_dump(mode="json"),
        metrics=result.model_dump(mode="json"),
        gguf_path=gguf_path,
    )
    store.insert("models", [row])
    table = Table(title=f"SFT ({row['method']}) on {result.n_rows} rows")
    for col in ("steps", "loss first → last", "tokens", "seconds", "peak RSS"):
        table.add_column(col, justify="right")
    first = result.losses[0] if result.losses else float("nan")
    last = result.losses[-1] if result.losses else float("nan")
    table.add_row(
        str(result.steps),
        f"{first:.4f} → {last:.4f}",
        str(result.n_tokens),
        f"{result.seconds:.1f}",
        f"{result.peak_rss_mb / 1024:.2f} GB",
    )
    console.print(table)
    console.print(f"model {row['model_id']}: {result.model_dir}")
    if gguf_path:
        console.print(f"GGUF for the embedded server: {gguf_path}")
