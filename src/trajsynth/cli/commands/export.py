"""`synth export --out DIR`: the store's SFT and RL selections as datasets with a card."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from trajsynth.cli.context import current_settings
from trajsynth.cli.ids import resolve
from trajsynth.cli.tables import Table
from trajsynth.export import (
    FORMATS,
    EmptySelectionError,
    ExportError,
    ExportReport,
    SelectionSeen,
    export_dataset,
)
from trajsynth.store import Store

__all__ = ["export", "push_to_hub"]

console = Console()
err_console = Console(stderr=True)
log = logging.getLogger(__name__)


def seen_table(seen: SelectionSeen) -> Table:
    """What the selection saw: trajectories, verified, per kind considered and selected,
    and the top reasons items were left out."""
    at = "" if seen.round is None else f", round {seen.round}"
    table = Table(title=f"nothing to export: run {seen.run_id}{at}")
    table.add_column("what")
    table.add_column("count", justify="right")
    table.add_row("trajectories", str(seen.n_trajectories))
    table.add_row("verified", str(seen.n_verified))
    for kind in ("sft", "rl"):
        considered = seen.considered.get(kind, 0)
        table.add_row(
            f"{kind} selected / considered", f"{seen.selected.get(kind, 0)} / {considered}"
        )
    for reason, n in seen.reasons:
        table.add_row(f"left out: {reason}", str(n))
    return table


def push_to_hub(report: ExportReport, repo: str) -> None:
    """Upload each exported config with ``datasets`` (Parquet only; needs the Hub and a
    token from ``huggingface-cli login``; not testable offline)."""
    import datasets

    if report.fmt != "parquet":
        raise ExportError("--push-to-hub needs --format parquet")
    out = Path(report.out_dir)
    for name, n in (("sft", report.n_sft), ("rl", report.n_rl)):
        if n:
            ds = datasets.load_dataset("parquet", data_files=str(out / name / "*.parquet"))
            ds.push_to_hub(repo, config_name=name)
    from huggingface_hub import HfApi

    HfApi().upload_file(
        path_or_fileobj=str(out / "README.md"), path_in_repo="README.md", repo_id=repo,
        repo_type="dataset",
    )  # fmt: skip
    for png in sorted((out / "plots").glob("*.png")):
        HfApi().upload_file(
            path_or_fileobj=str(png), path_in_repo=f"plots/{png.name}", repo_id=repo,
            repo_type="dataset",
        )  # fmt: skip


def export(
    out: Annotated[Path, typer.Option("--out", "-o", help="dataset folder to write")],
    run: Annotated[
        str | None,
        typer.Option("--run", help="run id or a unique prefix (default: newest with selections)"),
    ] = None,
    round: Annotated[
        int | None, typer.Option("--round", help="one round only (default: every round)")
    ] = None,
    fmt: Annotated[str, typer.Option("--format", help=f"one of: {', '.join(FORMATS)}")] = "parquet",
    overwrite: Annotated[
        bool, typer.Option("--overwrite", help="replace an existing output folder")
    ] = False,
    push_to: Annotated[
        str | None,
        typer.Option(
            "--push-to-hub",
            help="also upload to this Hub dataset repo with `datasets` push_to_hub (needs "
            "network and a Hub token; not tested offline)",
        ),
    ] = None,
    store_path: Annotated[Path | None, typer.Option("--store", help="DuckDB store")] = None,
    license: Annotated[
        str | None,
        typer.Option(
            "--license",
            help="the card's license, a Hub id such as cc-by-4.0 (default: dataset_license "
            "in synth.toml)",
        ),
    ] = None,
) -> None:
    """Write SFT (messages + tools) and RL (prompt + env + constraints) datasets, a
    README.md dataset card and its plots; every SFT row is checked to render through the
    tool-aware chat template with the assistant turns masked."""
    settings = current_settings()
    store = Store(store_path or settings.store_path)
    try:
        report = export_dataset(
            store,
            out,
            run_id=resolve(store, "run", run) if run else None,
            round=round,
            fmt=fmt,
            overwrite=overwrite,
            license=license or settings.dataset_license,
        )
    except EmptySelectionError as exc:
        if exc.seen is None:
            raise
        err_console.print(seen_table(exc.seen))
        if not exc.seen.considered:
            hint = "no round of this run was curated (`synth run` curates at the end of each round)"
        elif not exc.seen.n_verified:
            hint = (
                "nothing passed verification: `synth stats` shows the failure classes; a "
                "larger model or more --samples per task gives curation something to keep"
            )
        else:
            hint = "curation left every item out: see the reasons above"
        err_console.print(f"[red]error:[/] {exc}", soft_wrap=True)
        err_console.print(f"next: {hint}", soft_wrap=True)
        raise typer.Exit(2) from exc
    if push_to:
        push_to_hub(report, push_to)
    table = Table(title=f"synth export: run {report.run_id}")
    table.add_column("what")
    table.add_column("value", justify="right")
    for key, value in (
        ("SFT rows", report.n_sft),
        ("RL rows", report.n_rl),
        ("SFT tokens", report.n_tokens),
        ("assistant tokens", report.n_assistant_tokens),
        ("format", report.fmt),
        ("seconds", f"{report.seconds:.1f}"),
    ):
        table.add_row(key, str(value))
    for reason, n in sorted(report.refused.items()):
        table.add_row(f"SFT refused: {reason}", str(n))
    console.print(table)
    for name in report.files:
        console.print(f"wrote {Path(report.out_dir) / name}")
    if push_to:
        console.print(f"pushed to https://huggingface.co/datasets/{push_to}")
