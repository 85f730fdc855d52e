"""`synth run`: the flow under a rich progress bar, then the summary table."""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from trajsynth.cli.explain import little_reasons, produced_little
from trajsynth.cli.reaper import guard_descendants
from trajsynth.cli.settings import Settings
from trajsynth.flows.interrupt import Stop, exit_on_signals
from trajsynth.schemas import InputError, RunConfig
from trajsynth.store.summary import RunSummary

__all__ = ["prefect_environment", "print_summary", "run_and_report"]


def prefect_environment() -> None:
    """Prefect offline and quiet: no telemetry, ephemeral API, warnings only."""
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("DO_NOT_TRACK", "1")
    # the ephemeral API server starts in a subprocess; on a loaded machine 20 s is too short
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "90")
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")


def check_reachable(base_url: str, timeout_s: float = 10.0) -> None:
    """One line, before any work starts, when nothing answers at ``base_url`` (any HTTP
    answer, even 401 or 404, means a server is there: its own errors are reported later)."""
    import httpx

    try:
        httpx.get(f"{base_url.rstrip('/')}/models", timeout=timeout_s)
    except httpx.HTTPError as exc:
        raise InputError(
            f"nothing answers at --base-url {base_url} ({type(exc).__name__}): start the "
            "server, fix the URL, or leave --base-url out to use the embedded model"
        ) from exc


def run_and_report(
    settings: Settings, config: RunConfig, *, console: Console, concurrency: int
) -> bool:
    if config.llm.base_url:
        check_reachable(config.llm.base_url)
    guard_descendants()  # a `kill -9` of this command must not orphan its servers
    prefect_environment()
    # SIGTERM or Ctrl-C end the command at once (the watchdog reaps what it started)
    with exit_on_signals("nothing was run yet") as stop:
        return _run(settings, config, console=console, concurrency=concurrency, stop=stop)


def _run(
    settings: Settings, config: RunConfig, *, console: Console, concurrency: int, stop: Stop
) -> bool:
    from trajsynth.flows.api import start_api, wait_api

    start_api()  # overlaps the imports below; wait_api() reports a start that fails
    if not config.llm.base_url:  # the embedded model loads meanwhile too (the flow takes it)
        from trajsynth.agents.embedded import launch_early

        launch_early(config.llm.model, config.llm.embedded_ctx, config.llm.embedded_deterministic)
    from trajsynth.flows.build import build_dataset, run_id_for

    stop.line = (
        "units in flight are dropped, what was stored is kept; run the same command again to "
        f"resume run {run_id_for(config)}"
    )
    from trajsynth.flows.progress import progress_sink
    from trajsynth.flows.runners import task_runner_for

    # importing prefect configures logging anew; HTTP request lines would flood the progress
    for noisy in ("httpx", "httpcore", "openai", "docker", "urllib3", "mcp"):
        logging.getLogger(noisy).setLevel(max(logging.getLogger().level, logging.WARNING))

    runner = task_runner_for(settings.runner.kind, settings.runner.address, workers=concurrency)

    console.print(
        f"run [bold]{run_id_for(config)}[/]: {config.tasks} tasks x {config.rounds} round(s), "
        f"{config.samples} sample(s) each, store {settings.store_path}"
    )
    if config.policy is not None:
        model = f" (model {config.policy.model_id})" if config.policy.model_id else ""
        console.print(f"assistant: policy {config.policy.gguf}{model} on its own llama.cpp server")
    columns = (
        TextColumn("{task.description:<9}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("eta"),
        TimeRemainingColumn(),  # from the rate of finished units so far
        TextColumn("{task.fields[note]}"),
    )
    with Progress(*columns, console=console, transient=False) as progress:
        bars: dict[str, int] = {}

        def on_event(event: tuple[str, int, int, str]) -> None:
            stage, done, total, note = event
            # total 0: open-ended (the `turns` ticks, one per assistant reply of any rollout)
            if stage not in bars:
                bars[stage] = progress.add_task(stage, total=total or None, note="")
            progress.update(bars[stage], completed=done, total=total or None, note=note)

        with progress_sink(on_event):
            wait_api()
            summary = asyncio.run(
                build_dataset.with_options(task_runner=runner)(
                    config,
                    store_path=str(settings.store_path),
                    cache_dir=str(settings.cache_dir / "llm") if settings.llm.cache else None,
                    clusters_dir=str(settings.clusters_dir),
                    api_key=settings.llm.api_key,
                    concurrency=concurrency,
                )
            )
    print_summary(summary, console=console, store_path=str(settings.store_path))
    for warning in empty_cluster_warnings(str(settings.store_path), summary.run_id, config):
        console.print(f"[yellow]warning:[/] {warning}")
    if summary.trajectories == 0:
        # a run that yields no task (or no trajectory) says so and fails, rather than
        # reporting an empty success
        reasons = ", ".join(f"{k}: {v}" for k, v in summary.blueprints_rejected.items())
        failed = ", ".join(f"{k}: {v}" for k, v in sorted(summary.failed_units.items()))
        console.print(
            f"[yellow]warning:[/] the run produced nothing: {summary.tasks_planned} task(s) "
            f"planned, 0 trajectories"
            + (f"; blueprints rejected ({reasons})" if reasons else "")
            + (f"; units failed ({failed})" if failed else "")
        )
        return False
    return True


def print_summary(summary: RunSummary, *, console: Console, store_path: str) -> None:
    table = Table(title=f"synth run {summary.run_id}", show_header=False)
    table.add_column("figure")
    table.add_column("value")
    rate = f"{summary.pass_rate:.0%}" if summary.pass_rate is not None else "n/a"
    table.add_row("tasks planned", str(summary.tasks_planned))
    if summary.blueprints_rejected:
        table.add_row(
            "blueprints rejected",
            ", ".join(f"{k}: {v}" for k, v in summary.blueprints_rejected.items()),
        )
    table.add_row("trajectories", str(summary.trajectories))
    table.add_row("passed / counted", f"{summary.passed} / {summary.counted} ({rate})")
    table.add_row(
        "failures by class",
        ", ".join(f"{k}: {v}" for k, v in sorted(summary.failures_by_class.items())) or "none",
    )
    if summary.failed_units:
        table.add_row(
            "units failed (the next run retries them)",
            ", ".join(f"{k}: {v}" for k, v in sorted(summary.failed_units.items())),
        )
        table.add_row("top unit errors", "\n".join(summary.failed_unit_errors))
    table.add_row(
        "terminations", ", ".join(f"{k}: {v}" for k, v in sorted(summary.terminations.items()))
    )
    if summary.user_resamples or summary.user_scripted:
        table.add_row(
            "user turns redrawn",
            f"{summary.user_resamples} resampled draws, {summary.user_scripted} scripted "
            "from the blueprint (simulator replies that failed the checks)",
        )
    for role, tokens in sorted(summary.tokens_by_role.items()):
        secs = summary.llm_seconds_by_role.get(role, 0.0)
        table.add_row(f"tokens ({role})", f"{tokens:,} in {secs:.1f} s")
    table.add_row(
        "tokens per verified trajectory",
        f"{summary.tokens_per_verified:,.0f}" if summary.tokens_per_verified else "n/a",
    )
    table.add_row(
        "tool calls", f"{summary.tool_calls} (median {summary.median_tool_ms or 0:.0f} ms)"
    )
    table.add_row("wall time", f"{summary.wall_s:.1f} s (LLM busy {summary.llm_s:.1f} s)")
    table.add_row(
        "written to", f"{store_path}  (try: synth query 'select count(*) from trajectories')"
    )
    console.print(table)
    if produced_little(summary.passed, summary.counted, summary.trajectories):
        print_reasons(summary.run_id, store_path=store_path, console=console)


def print_reasons(run_id: str, *, store_path: str, console: Console) -> None:
    """Why the run produced little: top failure reasons with counts and what to change."""
    from trajsynth.store import Store

    reasons = little_reasons(Store(Path(store_path)), run_id)
    if not reasons:
        return
    table = Table(title="why so little passed (failed trajectories)")
    table.add_column("reason", overflow="fold")
    table.add_column("count", justify="right")
    table.add_column("what to change", overflow="fold")
    for r in reasons:
        table.add_row(escape(r.what), str(r.count), escape(r.hint))  # "[run]" is not markup
    console.print(table)


def empty_cluster_warnings(store_path: str, run_id: str, config: RunConfig) -> list[str]:
    """One line per cluster of the run that yielded no task, with the rejection reasons."""
    from trajsynth.store import Store

    store = Store(Path(store_path))
    planned = {
        r["cluster_id"]: r["n"]
        for r in store.query(
            "SELECT cluster_id, count(*) AS n FROM blueprints WHERE run_id = ? GROUP BY 1",
            [run_id],
        )
    }
    reasons: dict[str, list[str]] = {}
    for r in store.query(
        "SELECT cluster_id, reason, count(*) AS n FROM blueprint_attempts "
        "WHERE run_id = ? AND NOT accepted GROUP BY 1, 2 ORDER BY 1, 3 DESC",
        [run_id],
    ):
        reasons.setdefault(r["cluster_id"], []).append(f"{r['reason']}: {r['n']}")
    names = config.clusters or sorted(set(planned) | set(reasons))
    return [
        f"cluster {name} yielded no task ({', '.join(reasons.get(name, [])) or 'no attempt'})"
        for name in names
        if not planned.get(name)
    ]
