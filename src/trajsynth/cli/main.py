"""The `synth` command line (typer + rich). Parses, builds settings, calls library code."""

from __future__ import annotations

import csv
import io
import json
import os
import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import BaseModel, ValidationError
from rich.console import Console
from rich.markup import escape

from trajsynth import schemas
from trajsynth.cli.commands import clusters as clusters_cmd
from trajsynth.cli.commands import dashboard as dashboard_cmd
from trajsynth.cli.commands import deploy as deploy_cmd
from trajsynth.cli.commands import eval as eval_cmd
from trajsynth.cli.commands import export as export_cmd
from trajsynth.cli.commands import improve as improve_cmd
from trajsynth.cli.commands import model as model_cmd
from trajsynth.cli.commands import runs as runs_cmd
from trajsynth.cli.commands import sandbox as sandbox_cmd
from trajsynth.cli.commands import sft as sft_cmd
from trajsynth.cli.commands import stats as stats_cmd
from trajsynth.cli.commands import topo as topo_cmd
from trajsynth.cli.commands import train as train_cmd
from trajsynth.cli.context import current_settings, use_config
from trajsynth.cli.logs import configure as configure_logs
from trajsynth.cli.options import JsonOpt, StoreOpt, print_json, store_path_or_default
from trajsynth.cli.settings import DEFAULT_CONFIG_FILE, default_toml
from trajsynth.cli.tables import Table
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
app.add_typer(model_cmd.app, name="model", help="The base model as a transformers folder.")
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


@app.callback()
def _main(
    config: ConfigOpt = None,
    verbose: Annotated[int, typer.Option("--verbose", "-v", count=True)] = 0,
    quiet: Annotated[bool, typer.Option("--quiet", "-q")] = False,
) -> None:
    configure_logs(err_console, verbose=verbose, quiet=quiet)
    # Prefect logs every failed unit's traceback; a run records failures and sums them up
    # itself, so Prefect speaks only when asked (-v)
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING" if verbose else "CRITICAL")
    use_config(config)


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
    base_url: Annotated[
        str | None,
        typer.Option(
            help="check only this OpenAI-compatible endpoint: tool calls, tool_choice, "
            "logprobs, n, and what a run does about each gap"
        ),
    ] = None,
    model: Annotated[
        str | None, typer.Option(help="the model name to ask for at --base-url")
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Check every real part; exit 0 only when all that this configuration needs are OK.

    With --base-url, check that one endpoint instead (docs/endpoints.md)."""
    loaded = current_settings()
    if base_url is not None:
        from trajsynth.cli.endpoint_check import check_endpoint

        endpoint_checks = check_endpoint(
            base_url,
            model or loaded.run.llm.model,
            api_key=loaded.llm.api_key,
            logprobs=loaded.run.llm.logprobs,
        )
        if as_json:
            print_json([c.as_dict() for c in endpoint_checks])
        else:
            table = Table(title=f"synth doctor: {base_url}")
            for col in ("check", "status", "seen", "the run"):
                table.add_column(col, overflow="fold")
            for e in endpoint_checks:
                status = "OK" if e.ok else ("missing" if e.required else "gap")
                color = "green" if e.ok else ("red" if e.required else "yellow")
                table.add_row(
                    e.check, f"[{color}]{status}[/]", escape(e.detail), escape(e.run_does)
                )
            console.print(table)
        if any(e.required and not e.ok for e in endpoint_checks):
            raise typer.Exit(1)
        return
    from trajsynth.cli.doctor import run_checks

    checks = run_checks(loaded, start_embedded=not quick)
    if as_json:
        print_json(
            [
                {
                    "part": c.part,
                    "ok": c.ok,
                    "required": c.required,
                    "detail": c.detail,
                    "fix": c.fix,
                }
                for c in checks
            ]
        )
    else:
        table = Table(title="synth doctor")
        for col in ("part", "status", "detail", "fix"):
            table.add_column(col, overflow="fold")
        for c in checks:
            status = (
                "[green]OK[/]"
                if c.ok
                else ("[red]missing[/]" if c.required else "[yellow]missing[/]")
            )
            table.add_row(c.part, status, escape(c.detail), "" if c.ok else escape(c.fix))
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
    as_json: JsonOpt = False,
) -> None:
    """A store table's columns, each with its type and one line of meaning; or a data
    contract's JSON Schema."""
    if name in ROW_MODELS:
        model = ROW_MODELS[name]
        if as_json:
            print_json(
                {
                    "table": name,
                    "key": model.key(),
                    "columns": [
                        {"column": c, "type": t, "meaning": model.model_fields[c].description}
                        for c, t in column_types(model).items()
                    ],
                }
            )
            return
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
    if as_json:
        print_json(model_cls.model_json_schema())
        return
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
    as_json: JsonOpt = False,
    fmt: Annotated[
        OutputFormat,
        typer.Option("--format", "-f", help="table or csv (json: use --json; kept as an alias)"),
    ] = OutputFormat.TABLE,
    store_path: StoreOpt = None,
) -> None:
    """Ask the store anything in SQL (works while a run is writing)."""
    cols, rows = Store(store_path_or_default(store_path)).query_table(sql)
    if as_json or fmt is OutputFormat.JSON:
        print_json([dict(zip(cols, r, strict=True)) for r in rows])
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
    store_path: StoreOpt = None,
) -> None:
    """Show one stored record: a trajectory as its transcript (turns, calls, results, the
    verdict per constraint, signals), a tree drawn; --json prints the raw record."""
    store = Store(store_path_or_default(store_path))
    if kind.rstrip("s") == "trajectory" and not as_json:
        from trajsynth.cli.commands.transcript import render_transcript
        from trajsynth.curation.transcript import transcript
        from trajsynth.store.tasks import load_trajectory

        loaded = load_trajectory(store, record_id)
        console.print(render_transcript(transcript(*loaded)))
        return
    if kind.rstrip("s") == "tree" and not as_json:
        from trajsynth.cli.commands.tree import render_tree

        console.print(render_tree(store, record_id))
        return
    table = _KINDS.get(kind.rstrip("s"), kind if kind in TABLES else None)
    if table is None:
        raise InputError(f"unknown kind {kind!r}; one of: {', '.join(_KINDS)}")
    row = store.get(table, record_id)
    if row is None:
        raise InputError(f"no {kind} with id {record_id!r}")
    decoded = {k: _maybe_json(v) for k, v in row.items()}
    if as_json and not console.is_terminal:
        print_json(decoded)  # piped: plain JSON, no colour codes
        return
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
    status_every: Annotated[
        float,
        typer.Option(help="seconds between status lines when stdout is not a terminal", min=0.1),
    ] = 10.0,
    store_path: StoreOpt = None,
) -> None:
    """Synthesise, verify and store trajectories (a Prefect flow, ephemeral mode)."""
    from trajsynth.cli.run_command import run_and_report

    loaded = current_settings()
    if store_path is not None:
        loaded = loaded.model_copy(update={"store_path": store_path})
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
    ok = run_and_report(
        loaded, config, console=console, concurrency=workers, status_every=status_every
    )
    if not ok:
        raise typer.Exit(1)


def command() -> Any:
    """The `synth` click command as typer builds it, its help texts tidied (``help_text``)."""
    from trajsynth.cli.help_text import tidy

    return tidy(typer.main.get_command(app))


def main() -> None:
    try:
        command()()
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
