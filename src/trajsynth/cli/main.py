"""The `synth` command line (typer + rich). Parses, builds settings, calls library code."""

from __future__ import annotations

import csv
import io
import json
import logging
import os
import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import BaseModel, ValidationError
from rich.console import Console
from rich.logging import RichHandler
from rich.table import Table

from trajsynth import schemas
from trajsynth.cli.commands import clusters as clusters_cmd
from trajsynth.cli.commands import dashboard as dashboard_cmd
from trajsynth.cli.commands import deploy as deploy_cmd
from trajsynth.cli.commands import eval as eval_cmd
from trajsynth.cli.commands import export as export_cmd
from trajsynth.cli.commands import improve as improve_cmd
from trajsynth.cli.commands import runs as runs_cmd
from trajsynth.cli.commands import sandbox as sandbox_cmd
from trajsynth.cli.commands import sft as sft_cmd
from trajsynth.cli.commands import stats as stats_cmd
from trajsynth.cli.commands import topo as topo_cmd
from trajsynth.cli.commands import train as train_cmd
from trajsynth.cli.settings import DEFAULT_CONFIG_FILE, Settings, default_toml, load_settings
from trajsynth.schemas import InputError, RolloutMode, TrajsynthError
from trajsynth.store import TABLES, Store
from trajsynth.store.rows import ROW_MODELS, column_types

__all__ = ["app", "main"]

console = Console()
err_console = Console(stderr=True)

app = typer.Typer(
    name="synth",
    help="trajsynth: training data for tool-using and coding LLM agents.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
app.add_typer(
    clusters_cmd.app, name="clusters", help="Tool clusters (bundled and outside MCP servers)."
)
app.add_typer(sandbox_cmd.app, name="sandbox", help="The Docker sandbox image.")
app.command("topo")(topo_cmd.topo)
app.command("train")(train_cmd.train)
app.command("stats")(stats_cmd.stats)
app.command("export")(export_cmd.export)
app.command("dashboard")(dashboard_cmd.dashboard)
app.command("runs")(runs_cmd.runs)
app.command("deploy")(deploy_cmd.deploy)
app.command("serve")(deploy_cmd.serve)
app.command("sft")(sft_cmd.sft)  # train a policy on the data,
app.command("eval")(eval_cmd.eval_policy)  # measure it on held-out tasks,
app.command("compare")(eval_cmd.compare_evals)
app.command("improve")(improve_cmd.improve)  # and loop the two

ConfigOpt = Annotated[
    Path | None, typer.Option("--config", "-c", help="settings file (default ./synth.toml)")
]


class _State:
    config: Path | None = None


@app.callback()
def _main(
    config: ConfigOpt = None,
    verbose: Annotated[int, typer.Option("--verbose", "-v", count=True)] = 0,
    quiet: Annotated[bool, typer.Option("--quiet", "-q")] = False,
) -> None:
    level = logging.WARNING if quiet else (logging.DEBUG if verbose > 1 else logging.INFO)
    logging.basicConfig(
        level=level,
        format="%(message)s",
        handlers=[RichHandler(console=err_console, show_path=False, rich_tracebacks=False)],
        force=True,
    )
    for noisy in ("httpx", "httpcore", "docker", "urllib3", "mcp", "prefect"):
        logging.getLogger(noisy).setLevel(max(level, logging.WARNING))
    # Prefect logs every failed unit's traceback; a run records failures and sums them up
    # itself, so Prefect speaks only when asked (-v)
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING" if verbose else "CRITICAL")
    _State.config = config


def settings() -> Settings:
    return load_settings(_State.config)


@app.command()
def init(
    path: Annotated[Path, typer.Argument(help="where to write")] = DEFAULT_CONFIG_FILE,
    force: Annotated[bool, typer.Option("--force")] = False,
) -> None:
    """Write a commented default settings file."""
    if path.exists() and not force:
        raise InputError(f"{path} exists; use --force to overwrite")
    path.write_text(default_toml())
    console.print(f"wrote {path}")


@app.command()
def doctor(
    quick: Annotated[
        bool, typer.Option("--quick", help="do not start the embedded LLM to check it")
    ] = False,
) -> None:
    """Check every real part; exit 0 only when all that this configuration needs are OK."""
    from trajsynth.cli.doctor import run_checks

    checks = run_checks(settings(), start_embedded=not quick)
    table = Table(title="synth doctor")
    for col in ("part", "status", "detail", "fix"):
        table.add_column(col)
    for c in checks:
        status = (
            "[green]OK[/]" if c.ok else ("[red]missing[/]" if c.required else "[yellow]missing[/]")
        )
        table.add_row(c.part, status, c.detail, "" if c.ok else c.fix)
    console.print(table)
    if any(c.required and not c.ok for c in checks):
        raise typer.Exit(1)


_SCHEMA_MODELS: dict[str, type[BaseModel]] = {
    name: obj
    for name in schemas.__all__
    if isinstance(obj := getattr(schemas, name), type) and issubclass(obj, BaseModel)
}


@app.command()
def schema(
    name: Annotated[str, typer.Argument(help="a table (e.g. task_topology) or a model name")],
) -> None:
    """A store table's columns, each with its type and one line of meaning; or a data
    contract's JSON Schema."""
    if name in ROW_MODELS:
        model = ROW_MODELS[name]
        table = Table(title=f"{name} (key: {model.key()})")
        for col in ("column", "type", "meaning"):
            table.add_column(col, overflow="fold")
        for column, typ in column_types(model).items():
            table.add_row(column, typ, model.model_fields[column].description or "")
        console.print(table)
        return
    lookup = {k.lower(): v for k, v in _SCHEMA_MODELS.items()}
    model_cls = lookup.get(name.lower())
    if model_cls is None:
        raise InputError(
            f"unknown table or schema {name!r}; tables: {', '.join(ROW_MODELS)}; "
            f"schemas: {', '.join(sorted(_SCHEMA_MODELS))}"
        )
    console.print_json(json.dumps(model_cls.model_json_schema()))


class OutputFormat(StrEnum):
    TABLE = "table"
    CSV = "csv"
    JSON = "json"


def _cell(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text if len(text) <= 120 else text[:117] + "..."


@app.command()
def query(
    sql: Annotated[str, typer.Argument(help="SQL over the store (read-only)")],
    fmt: Annotated[OutputFormat, typer.Option("--format", "-f")] = OutputFormat.TABLE,
) -> None:
    """Ask the store anything in SQL (works while a run is writing)."""
    cols, rows = Store(settings().store_path).query_table(sql)
    if fmt is OutputFormat.JSON:
        out = [dict(zip(cols, r, strict=True)) for r in rows]
        sys.stdout.write(json.dumps(out, default=str, indent=2) + "\n")
    elif fmt is OutputFormat.CSV:
        buf = io.StringIO()
        writer = csv.writer(buf)
        writer.writerow(cols)
        writer.writerows(rows)
        sys.stdout.write(buf.getvalue())
    else:
        from trajsynth.cli.ids import id_column

        table = Table()
        cells = [[_cell(v) for v in r] for r in rows]
        for i, c in enumerate(cols):
            if c == "id" or c.endswith("_id"):  # ids stay whole: they go into the next command
                id_column(table, c, [row[i] for row in cells])
            else:
                table.add_column(c, overflow="fold")
        for row in cells:
            table.add_row(*row)
        # every id on one line, every other column at least 6 wide (a word of folded
        # text), plus the borders: wider than the terminal, and rich would squeeze some
        # columns to nothing
        need = sum(col.min_width or 6 for col in table.columns) + 3 * len(cols) + 1
        if need > console.width:
            # too many ids for one line each: one block per row, every value whole
            for n, row in enumerate(cells, 1):
                console.print(f"[bold]row {n}[/]")
                for c, v in zip(cols, row, strict=True):
                    console.print(f"  {c}: {v}", soft_wrap=True, highlight=False)
            return
        console.print(table)


_KINDS = {
    "run": "runs",
    "cluster": "clusters",
    "blueprint": "blueprints",
    "task": "blueprints",
    "tree": "trees",
    "node": "nodes",
    "trajectory": "trajectories",
    "verdict": "verdicts",
}


@app.command()
def show(
    kind: Annotated[str, typer.Argument(help=f"one of: {', '.join(_KINDS)}")],
    record_id: Annotated[str, typer.Argument(metavar="ID", help="the id (or a unique prefix)")],
    as_json: Annotated[bool, typer.Option("--json", help="the raw stored record")] = False,
) -> None:
    """Show one stored record: a trajectory as its transcript (turns, calls, results, the
    verdict per constraint, signals), a tree drawn; ``--json`` prints the raw record."""
    if kind.rstrip("s") == "trajectory" and not as_json:
        from trajsynth.cli.commands.transcript import render_transcript
        from trajsynth.curation.transcript import transcript
        from trajsynth.store.tasks import load_trajectory

        loaded = load_trajectory(Store(settings().store_path), record_id)
        console.print(render_transcript(transcript(*loaded)))
        return
    if kind.rstrip("s") == "tree" and not as_json:
        from trajsynth.cli.commands.tree import render_tree

        console.print(render_tree(Store(settings().store_path), record_id))
        return
    table = _KINDS.get(kind.rstrip("s"), kind if kind in TABLES else None)
    if table is None:
        raise InputError(f"unknown kind {kind!r}; one of: {', '.join(_KINDS)}")
    row = Store(settings().store_path).get(table, record_id)
    if row is None:
        raise InputError(f"no {kind} with id {record_id!r}")
    decoded = {k: _maybe_json(v) for k, v in row.items()}
    console.print_json(json.dumps(decoded, default=str))


def _maybe_json(value: Any) -> Any:
    if isinstance(value, str) and value[:1] in "[{":
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


@app.command()
def run(
    tasks: Annotated[int | None, typer.Option(help="blueprints per round")] = None,
    clusters: Annotated[
        str | None, typer.Option(help="comma-separated cluster names (default: all)")
    ] = None,
    base_url: Annotated[
        str | None, typer.Option(help="OpenAI-compatible endpoint (default: embedded llama.cpp)")
    ] = None,
    model: Annotated[str | None, typer.Option(help="model name at that endpoint")] = None,
    seed: Annotated[int | None, typer.Option()] = None,
    rounds: Annotated[int | None, typer.Option()] = None,
    samples: Annotated[
        int | None, typer.Option(help="rollouts per task: the leaves of its tree, or linear runs")
    ] = None,
    rollout: Annotated[
        RolloutMode | None,
        typer.Option(help="tree: branch where the policy is uncertain; linear: the baseline"),
    ] = None,
    concurrency: Annotated[
        int | None,
        typer.Option(help="units in flight at once (default: [runner] workers)"),
    ] = None,
    policy: Annotated[
        str | None,
        typer.Option(
            help="a tuned model (.gguf, or the model/ folder `synth sft` writes) for the "
            "assistant role on its own llama.cpp server; planner and user keep --model"
        ),
    ] = None,
) -> None:
    """Synthesise, verify and store trajectories (a Prefect flow, ephemeral mode)."""
    from trajsynth.cli.run_command import run_and_report

    loaded = settings()
    config = loaded.run_config(
        llm={"base_url": base_url, "model": model},
        tasks=tasks,
        clusters=[c.strip() for c in clusters.split(",") if c.strip()] if clusters else None,
        seed=seed,
        rounds=rounds,
        samples=samples,
        rollout_mode=rollout,
    )
    if policy is not None:  # checked before any work starts: one line if not a model
        from trajsynth.cli.policy import policy_ref

        config = config.model_copy(update={"policy": policy_ref(policy, Store(loaded.store_path))})
    from trajsynth.mcp_servers.registry import cluster_names

    known = cluster_names(clusters_dir=loaded.clusters_dir)
    unknown = [c for c in config.clusters if c not in known]
    if unknown:
        raise InputError(
            f"unknown cluster {unknown[0]!r} in --clusters; known: {', '.join(known)} "
            "(add an outside server with `synth clusters add`)"
        )
    workers = concurrency or loaded.runner.workers
    ok = run_and_report(loaded, config, console=console, concurrency=workers)
    if not ok:
        raise typer.Exit(1)


def main() -> None:
    try:
        app()
    except TrajsynthError as exc:
        err_console.print(f"[red]error:[/] {exc}", soft_wrap=True)
        sys.exit(2)
    except ValidationError as exc:  # a command-line value a model refused
        err_console.print(f"[red]error:[/] {_one_line(exc)}", soft_wrap=True)
        sys.exit(2)


def _one_line(exc: ValidationError) -> str:
    """The first refused value: its option, the value and what is allowed."""
    err = exc.errors()[0]
    option = "--" + "-".join(str(p) for p in err["loc"]).replace("_", "-")
    return f"invalid value {err.get('input')!r} for {option}: {err['msg']}"


if __name__ == "__main__":
    main()
