"""`synth run`: the flow under rich's bars (a terminal) or plain status lines (a pipe), then the
summary table."""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Callable
from pathlib import Path

from pydantic import SecretStr
from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from trajsynth.cli.explain import little_reasons, produced_little
from trajsynth.cli.logs import logs_to, quiet_libraries
from trajsynth.cli.reaper import guard_descendants
from trajsynth.cli.settings import Settings
from trajsynth.cli.status_lines import StatusLines
from trajsynth.cli.tables import Table
from trajsynth.flows.interrupt import Stop, exit_on_signals
from trajsynth.flows.progress import progress_sink
from trajsynth.schemas import InputError, RunConfig
from trajsynth.store.summary import RunSummary

__all__ = ["STATUS_EVERY_S", "prefect_environment", "print_summary", "run_and_report"]

STATUS_EVERY_S = 10.0
"""Seconds between two status lines when stdout is not a terminal."""


def prefect_environment() -> None:
    """Prefect offline and quiet: no telemetry, ephemeral API, warnings only."""
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("DO_NOT_TRACK", "1")
    # the ephemeral API server starts in a subprocess; on a loaded machine 20 s is too short
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "90")
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")


def _with_bars(build: Callable[[], RunSummary], console: Console) -> RunSummary:
    """``build()`` under rich's bars, one per stage; log lines print above the bars."""
    columns = (
        TextColumn("{task.description:<9}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("eta"),
        TimeRemainingColumn(),  # from the rate of finished units so far
        TextColumn("{task.fields[note]}"),
    )
    with Progress(*columns, console=console, transient=False) as progress, logs_to(console):
        bars: dict[str, TaskID] = {}
        tokens = [0]

        def on_event(event: tuple[str, int, int, str]) -> None:
            stage, done, total, note = event
            if stage == "tokens":  # a figure, not a bar: shown on the turns bar
                tokens[0] = done
                if "turns" in bars:
                    progress.update(bars["turns"], note=f"{done:,} tokens")
                return
            if stage == "turns":
                note = f"{tokens[0]:,} tokens" if tokens[0] else ""
            # total 0: open-ended (the `turns` ticks, one per assistant reply of any rollout)
            if stage not in bars:
                bars[stage] = progress.add_task(stage, total=total or None, note="")
            progress.update(bars[stage], completed=done, total=total or None, note=note)

        with progress_sink(on_event):
            return build()


def _with_status_lines(
    build: Callable[[], RunSummary], console: Console, every_s: float
) -> RunSummary:
    """``build()`` with one plain status line every ``every_s`` seconds, flushed at once."""
    lock = threading.Lock()

    def write(line: str) -> None:
        with lock:
            console.print(line, soft_wrap=True, highlight=False, markup=False)
            console.file.flush()

    with StatusLines(write, interval_s=every_s) as status, progress_sink(status.on_event):
        return build()


def check_reachable(
    base_url: str, api_key: SecretStr | None = None, timeout_s: float = 10.0
) -> None:
    """One line, before any work starts, when nothing answers at ``base_url``, or when the
    server refuses ``api_key`` (sent as the run's requests send it: ``Authorization: Bearer``,
    so an endpoint that requires a key does not fail here first). Any other HTTP answer,
    even 404, means a server is there, and so does a connection that is accepted but not
    answered in ``timeout_s`` (a busy server: llama.cpp computes one request at a time); its
    own errors are reported later, and a server that never answers ends the run as infra."""
    import httpx

    headers = {"Authorization": f"Bearer {api_key.get_secret_value()}"} if api_key else {}
    try:
        resp = httpx.get(f"{base_url.rstrip('/')}/models", headers=headers, timeout=timeout_s)
    except (httpx.ReadTimeout, httpx.WriteTimeout):
        return  # connected: a busy server (llama.cpp computes one request at a time)
    except httpx.HTTPError as exc:
        raise InputError(
            f"nothing answers at --base-url {base_url} ({type(exc).__name__}): start the "
            "server, fix the URL, or leave --base-url out to use the embedded model"
        ) from exc
    if resp.status_code in (401, 403):
        given = "the API key given" if api_key else "no API key"
        raise InputError(
            f"{base_url} refused {given} (HTTP {resp.status_code} on GET /models): set "
            "SYNTH_LLM__API_KEY (or OPENAI_API_KEY) to a key this server accepts"
        )


def run_and_report(
    settings: Settings,
    config: RunConfig,
    *,
    console: Console,
    concurrency: int,
    status_every: float = STATUS_EVERY_S,
) -> bool:
    """Run ``config`` under a progress display and print its summary; False when it produced
    nothing. In a terminal the display is rich's bars; otherwise one plain status line every
    ``status_every`` seconds (``cli.status_lines``)."""
    if config.llm.base_url:
        check_reachable(config.llm.base_url, settings.llm.api_key)
    guard_descendants()  # a `kill -9` of this command must not orphan its servers
    prefect_environment()
    # SIGTERM or Ctrl-C end the command at once (the watchdog reaps what it started)
    with exit_on_signals("nothing was run yet") as stop:
        return _run(
            settings,
            config,
            console=console,
            concurrency=concurrency,
            stop=stop,
            status_every=status_every,
        )


def _run(
    settings: Settings,
    config: RunConfig,
    *,
    console: Console,
    concurrency: int,
    stop: Stop,
    status_every: float,
) -> bool:
    from trajsynth.flows.api import start_api, wait_api

    start_api()  # overlaps the imports below; wait_api() reports a start that fails
    if not config.llm.base_url:  # the embedded model loads meanwhile too (the flow takes it)
        from trajsynth.llm.embedded import launch_early

        launch_early(config.llm.model, config.llm.embedded_ctx, config.llm.embedded_deterministic)
    from trajsynth.flows.build import build_dataset, run_id_for

    stop.line = (
        "units in flight are dropped, what was stored is kept; run the same command again to "
        f"resume run {run_id_for(config)}"
    )
    from trajsynth.flows.runners import task_runner_for

    quiet_libraries()  # importing prefect configured logging anew

    runner = task_runner_for(settings.runner.kind, settings.runner.address, workers=concurrency)

    console.print(
        f"run [bold]{run_id_for(config)}[/]: {config.tasks} tasks x {config.rounds} round(s), "
        f"{config.samples} sample(s) each, store {settings.store_path}"
    )
    if config.policy is not None:
        model = f" (model {config.policy.model_id})" if config.policy.model_id else ""
        console.print(f"assistant: policy {config.policy.gguf}{model} on its own llama.cpp server")

    def build() -> RunSummary:
        wait_api()
        return asyncio.run(
            build_dataset.with_options(task_runner=runner)(
                config,
                store_path=str(settings.store_path),
                cache_dir=str(settings.cache_dir / "llm") if settings.llm.cache else None,
                clusters_dir=str(settings.clusters_dir),
                api_key=settings.llm.api_key,
                concurrency=concurrency,
            )
        )

    if console.is_terminal:
        summary = _with_bars(build, console)
    else:
        summary = _with_status_lines(build, console, status_every)
    print_summary(summary, console=console, store_path=str(settings.store_path))
    for warning in empty_cluster_warnings(str(settings.store_path), summary.run_id, config):
        console.print(f"[yellow]warning:[/] {warning}")
    silent = llm_silent_line(summary, config)
    if silent:
        console.print(f"[red]error:[/] {escape(silent)}")
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


def llm_silent_line(summary: RunSummary, config: RunConfig) -> str | None:
    """One line when the LLM endpoint answered no request of the run and units failed for
    it (a wedged or unreachable server), else None."""
    llm_failed = [e for e in summary.failed_unit_errors if "LLMError" in e]
    if not summary.failed_units or not llm_failed or any(summary.tokens_by_role.values()):
        return None
    where = config.llm.base_url or "the embedded server"
    timeout = (
        f"timeout_s = {config.llm.timeout_s:g} s a try"
        if config.llm.timeout_s is not None
        else "timeout_s unset (adaptive)"
    )
    units = sum(summary.failed_units.values())
    return (
        f"the LLM endpoint {where} answered no request: {units} unit(s) failed as infra "
        f"waiting for it ([run.llm] {timeout}, max_retries = {config.llm.max_retries}); "
        "check that the server answers POST /chat/completions, then run the same command "
        "again to resume"
    )


def planned_line(summary: RunSummary) -> str:
    """Tasks planned of those asked, with the planning attempts and their budget."""
    if summary.tasks_asked is None:
        return str(summary.tasks_planned)
    line = f"{summary.tasks_planned} of {summary.tasks_asked} asked"
    if summary.plan_budget is not None:
        line += f" ({summary.plan_attempts} attempts of {summary.plan_budget} allowed)"
    if summary.tasks_planned < summary.tasks_asked:
        top = ", ".join(f"{k}: {v}" for k, v in summary.blueprints_rejected.items())
        line += f"; short by {summary.tasks_asked - summary.tasks_planned}" + (
            f" (rejected: {top})" if top else ""
        )
    return line


def print_summary(summary: RunSummary, *, console: Console, store_path: str) -> None:
    table = Table(title=f"synth run {summary.run_id}", show_header=False)
    table.add_column("figure")
    table.add_column("value")
    rate = f"{summary.pass_rate:.0%}" if summary.pass_rate is not None else "n/a"
    table.add_row("tasks planned", planned_line(summary))
    if summary.blueprints_rejected:
        table.add_row(
            "blueprints rejected",
            ", ".join(f"{k}: {v}" for k, v in summary.blueprints_rejected.items()),
        )
    if summary.paths_refused:
        inside = sum(summary.paths_refused_accepted.values())
        table.add_row(
            "paths refused",
            ", ".join(f"{k}: {v}" for k, v in summary.paths_refused.items())
            + f" ({inside} inside units that planned a task)",
        )
    if summary.mutation_lint:
        m = summary.mutation_lint
        table.add_row(
            "mutation lint",
            f"{m.get('clean', 0)} / {m.get('blueprints', 0)} blueprints with no wrong variant "
            f"passing; {m.get('variants', 0)} variants, {m.get('caught_first', 0)} caught by the "
            f"planned checks, {m.get('strengthened', 0)} checks added",
        )
    table.add_row("trajectories", str(summary.trajectories))
    table.add_row(
        "passed / judged",
        f"{summary.passed} / {summary.judged} ({rate}; passed: clean and correct)",
    )
    table.add_row("constraints held / judged", f"{summary.constraints_passed} / {summary.judged}")
    if summary.hygiene_failed:
        table.add_row(
            "hygiene checks failed (trajectories)",
            ", ".join(f"{k}: {v}" for k, v in sorted(summary.hygiene_failed.items())),
        )
    table.add_row(
        "failures by class",
        ", ".join(f"{k}: {v}" for k, v in sorted(summary.failures_by_class.items())) or "none",
    )
    if summary.failed_units:
        table.add_row(
            "units failed (the next run retries them)",
            ", ".join(f"{k}: {v}" for k, v in sorted(summary.failed_units.items())),
        )
        # "[run.llm]" in an error line is text, not rich markup
        table.add_row("top unit errors", escape("\n".join(summary.failed_unit_errors)))
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
        "tokens per passed trajectory",
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
