"""`synth clusters`: list, show and draw tool clusters; add outside MCP servers as clusters."""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from trajsynth.cli.context import current_settings
from trajsynth.cli.ids import id_column
from trajsynth.cli.options import JsonOpt, print_json
from trajsynth.cli.tables import Table
from trajsynth.schemas import Domain, ResetMode, SandboxKind, ToolAccess, ToolCluster

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from types import ModuleType

    from trajsynth.mcp_servers.discovery import Proposer
    from trajsynth.schemas import EdgeProposal, ToolSpec

__all__ = ["app"]


def _registry() -> ModuleType:
    # Imported on use: the registry loads the mcp SDK (seconds), which every other `synth`
    # command would otherwise pay for at start-up.
    from trajsynth.mcp_servers import registry

    return registry


def _graph() -> ModuleType:
    from trajsynth.mcp_servers import graph

    return graph


app = typer.Typer(no_args_is_help=True, help="Tool clusters (bundled and outside MCP servers).")


def _console() -> Console:
    return Console()  # per command: it reads the terminal width (COLUMNS) when it runs


def _table(
    title: str, *columns: str, numeric: tuple[str, ...] = (), ids: Sequence[str] = ()
) -> Table:
    """``ids``: the first column's values, cluster ids kept whole on one line (a cut id
    cannot be pasted)."""
    table = Table(title=title)
    for i, col in enumerate(columns):
        if i == 0 and ids:
            id_column(table, col, ids)
            continue
        # names fold instead of turning into "get_curre…": every character matters here
        table.add_column(col, justify="right" if col in numeric else "left", overflow="fold")
    return table


ClustersDirOpt = Annotated[
    Path | None,
    typer.Option("--clusters-dir", help="where outside clusters are saved (default: settings)"),
]


def _clusters_dir(explicit: Path | None) -> Path:
    if explicit is not None:
        return explicit

    return current_settings().clusters_dir


def _server_label(c: ToolCluster) -> str:
    if c.server.module:
        return c.server.module.removeprefix("trajsynth.mcp_servers.")
    if c.server.command:
        argv = list(c.server.command)
        return shlex.join([Path(argv[0]).name, *argv[1:]])
    return c.server.url or ""


def _state_label(c: ToolCluster) -> str:
    if not c.state_readable:
        return "not readable: constraints from the call trace"
    if c.source == "outside":
        return f"readable through {len(c.probes)} read-only probe call(s)"
    return "readable"


def _copy_label(item: object) -> str:
    return f"{item.source} -> {item.dest} ({item.sha256[:12]})"  # type: ignore[attr-defined]


@app.command("list")
def list_(clusters_dir: ClustersDirOpt = None, as_json: JsonOpt = False) -> None:
    """Every cluster: where it comes from, its domain, tools (read/write) and edges."""
    clusters = _registry().list_clusters(clusters_dir=_clusters_dir(clusters_dir))
    if as_json:
        print_json(
            [
                {
                    "cluster": c.cluster_id,
                    "source": c.source,
                    "domain": str(c.domain),
                    "server": _server_label(c),
                    "tools": len(c.tools),
                    "write": sum(t.access == ToolAccess.WRITE for t in c.tools),
                    "edges": len(c.edges),
                }
                for c in clusters
            ]
        )
        return
    table = _table(
        "tool clusters",
        *("cluster", "source", "domain", "server", "tools", "read", "write", "edges"),
        numeric=("tools", "read", "write", "edges"),
        ids=[c.cluster_id for c in clusters],
    )
    for c in clusters:
        n_write = sum(t.access == ToolAccess.WRITE for t in c.tools)
        server = _server_label(c)
        table.add_row(
            c.cluster_id,
            c.source,
            str(c.domain),
            server,
            str(len(c.tools)),
            str(len(c.tools) - n_write),
            str(n_write),
            str(len(c.edges)),
        )
    _console().print(table)


@app.command()
def show(
    name: Annotated[str, typer.Argument(help="the cluster id")],
    clusters_dir: ClustersDirOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="the cluster record as JSON")] = False,
) -> None:
    """One cluster: its tools (tag, where the tag came from, parameters) and its edges."""
    c = _registry().get_cluster(name, clusters_dir=_clusters_dir(clusters_dir))
    if as_json:
        print_json(c.model_dump(mode="json"))
        return
    _console().print(f"[bold]{c.cluster_id}[/] ({c.domain}, {c.source}, state {_state_label(c)})")
    if c.description:
        _console().print(c.description)
    entries = set(_graph().entry_tools(c))
    tools = _table(
        f"{len(c.tools)} tools",
        *("tool", "access", "tag from", "entry", "required", "optional", "description"),
    )
    for t in c.tools:
        params = _graph().input_params(t.input_schema)
        tools.add_row(
            t.name,
            str(t.access),
            f"{t.access_source or ''}: {t.access_evidence}"
            if t.access_evidence
            else (t.access_source or ""),
            "yes" if t.name in entries else "",
            ", ".join(p.name for p in params if p.required),
            ", ".join(p.name for p in params if not p.required),
            (t.description or "").split("\n")[0][:80],
        )
    _console().print(tools)
    edges = _table(
        f"{len(c.edges)} edges",
        *("source", "target", "out_field", "in_param", "score", "origin", "evidence"),
    )
    for e in c.edges:
        edges.add_row(
            e.source,
            e.target,
            e.out_field,
            e.in_param,
            f"{e.score:.3f}",
            str(e.origin),
            e.evidence or ("verified" if e.verified else "schema and names"),
        )
    _console().print(edges)
    if c.source == "outside":
        s = c.server
        _console().print(
            f"reset {s.reset}; env keys {', '.join(s.env_keys) or 'none'} (values never stored); "
            f"mounts {', '.join(s.mounts) or 'found from the command'}; "
            f"copies {', '.join(_copy_label(x) for x in s.copies) or 'none'}; "
            f"fixed args {json.dumps(s.args) if s.args else 'none'}"
        )
        for probe in c.probes:
            read = probe.resource or f"{probe.tool}({json.dumps(probe.arguments)})"
            _console().print(f"end-state probe: {read}")
        if s.hidden_tools or s.hidden_params:
            _console().print(
                f"hidden from the model: tools {', '.join(s.hidden_tools) or 'none'}; "
                f"params {', '.join(s.hidden_params) or 'none'}"
            )
        for warning in c.warnings:
            _console().print(f"[yellow]warning:[/] {warning}")
        for line in _lint_lines(c.cluster_id):
            _console().print(line)


@app.command()
def graph(
    name: str,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="PNG file")] = None,
    clusters_dir: ClustersDirOpt = None,
) -> None:
    """Draw a cluster's dependency graph as a PNG (read tools blue, write tools orange)."""
    c = _registry().get_cluster(name, clusters_dir=_clusters_dir(clusters_dir))
    path = _graph().draw_graph(c, out or Path(f"{c.cluster_id}.graph.png"))
    _console().print(f"wrote {path} ({len(c.tools)} tools, {len(c.edges)} edges)")


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def add(
    ctx: typer.Context,
    name: str,
    url: Annotated[str | None, typer.Option("--url", help="streamable HTTP endpoint")] = None,
    domain: Annotated[
        Domain,
        typer.Option(
            "--domain",
            metavar="<domain>",
            help=f"domain label: {', '.join(d.value for d in Domain)}",
        ),
    ] = Domain.OTHER,
    description: Annotated[str | None, typer.Option("--description")] = None,
    env: Annotated[
        list[str] | None, typer.Option("--env", help="KEY=VALUE for the server (repeatable)")
    ] = None,
    timeout: Annotated[
        float, typer.Option("--timeout", help="seconds to wait for tools/list")
    ] = 30.0,
    clusters_dir: ClustersDirOpt = None,
    mount: Annotated[
        list[str] | None, typer.Option("--mount", help="host folder mounted read-only")
    ] = None,
    on_host: Annotated[
        bool,
        typer.Option(
            "--on-host-state-not-isolated",
            help="run the server on the host, not in a sandbox: episodes can change real state",
        ),
    ] = False,
    reset: Annotated[
        ResetMode, typer.Option("--reset", help="fresh | snapshot | replay")
    ] = ResetMode.FRESH,
    copy: Annotated[
        list[str] | None,
        typer.Option("--copy", help="SRC[:DEST] copied into the sandbox work dir (snapshot)"),
    ] = None,
    arg: Annotated[
        list[str] | None, typer.Option("--arg", help="NAME=VALUE fixed for a tool parameter")
    ] = None,
    sandbox: Annotated[
        SandboxKind, typer.Option("--sandbox", help="auto | local | docker")
    ] = SandboxKind.AUTO,
    hide: Annotated[
        list[str] | None,
        typer.Option("--hide", help="TOOL never shown to the model nor planned (a harness tool)"),
    ] = None,
    hide_param: Annotated[
        list[str] | None,
        typer.Option(
            "--hide-param",
            help="NAME left out of what the model sees (its --arg value, if any, is injected)",
        ),
    ] = None,
    copy_folders: Annotated[
        bool,
        typer.Option(
            "--copy-folders/--no-copy-folders",
            help="copy host folders named in the command into the sandbox work dir (default)",
        ),
    ] = True,
    llm_edges: Annotated[
        bool,
        typer.Option(
            "--llm-edges",
            help="also ask the run's LLM ([run.llm]) for edges the descriptions imply; each "
            "is kept only when a probe confirms it",
        ),
    ] = False,
) -> None:
    """Add an outside MCP server: `add NAME -- COMMAND [ARGS...]` or `add NAME --url URL`.

    The server starts exactly as a run starts it; `--env KEY=VALUE` (or `--env KEY`, taken
    from your environment) is used now, and only the name is saved: export KEY for runs.
    """
    import os

    command = list(ctx.args)
    server_env: dict[str, str] = {}
    for item in env or []:
        key, sep, value = item.partition("=")
        if not key:
            raise typer.BadParameter(f"--env {item!r}: expected KEY=VALUE or KEY")
        if not sep:
            if key not in os.environ:
                raise typer.BadParameter(f"--env {key}: not set in this environment")
            value = os.environ[key]
        server_env[key] = value
    fixed: dict[str, object] = {}
    for item in arg or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise typer.BadParameter(f"--arg {item!r}: expected NAME=VALUE")
        try:
            fixed[key] = json.loads(value)
        except ValueError:
            fixed[key] = value  # a bare string
    parts = _registry().add_outside_cluster(
        name,
        command=command or None,
        url=url,
        clusters_dir=_clusters_dir(clusters_dir),
        domain=domain,
        description=description,
        env=server_env or None,
        timeout_s=timeout,
        mounts=mount or (),
        on_host=on_host,
        reset=reset,
        copies=copy or (),
        args=fixed,
        sandbox_kind=sandbox,
        propose=_llm_proposer() if llm_edges else None,
        hide=hide or (),
        hide_params=hide_param or (),
        copy_folders=copy_folders,
    )
    table = _table(
        f"added {name}",
        *("cluster", "tools", "read", "write", "edges", "tags from"),
        ids=[part.cluster_id for part in parts],
    )
    for part in parts:
        n_write = sum(t.access == ToolAccess.WRITE for t in part.tools)
        sources = sorted({t.access_source or "" for t in part.tools})
        table.add_row(
            part.cluster_id,
            str(len(part.tools)),
            str(len(part.tools) - n_write),
            str(n_write),
            str(len(part.edges)),
            ", ".join(sources),
        )
    _console().print(table)
    for warning in parts[0].warnings if parts else []:
        _console().print(f"[yellow]warning:[/] {warning}")


def _lint_lines(cluster_id: str) -> list[str]:
    """The mutation lint's figures for the cluster's stored blueprints (``synth run``)."""
    path = current_settings().store_path
    if not path.exists():
        return []
    import duckdb

    try:
        con = duckdb.connect(str(path), read_only=True)
        rows = con.execute(
            "SELECT mutation_lint FROM blueprints WHERE cluster_id = ? "
            "AND mutation_lint IS NOT NULL",
            [cluster_id],
        ).fetchall()
        con.close()
    except duckdb.Error:
        return []
    lints = [json.loads(r[0]) if isinstance(r[0], str) else r[0] for r in rows]
    if not lints:
        return []
    variants = sum(x.get("variants", 0) for x in lints)
    caught = sum(x.get("caught_first", 0) for x in lints)
    clean = sum(1 for x in lints if not x.get("survived") and x.get("gold_passes", True))
    added = sum(len(x.get("strengthened", [])) for x in lints)
    lines = [
        f"mutation lint: {len(lints)} blueprints, {clean} with no wrong variant passing; "
        f"{variants} variants, {caught} caught by the planned checks, {added} checks added"
    ]
    searched = [x for x in lints if x.get("readback_tried")]
    if searched:
        found = sorted({x["readback"] for x in searched if x.get("readback")})
        lines.append(
            f"probe search: {len(searched)} writing blueprints the probes could not see; a "
            f"read-back found for {sum(1 for x in searched if x.get('readback'))}"
            + (f" ({', '.join(found[:4])})" if found else "; none found")
        )
    return lines


def _llm_proposer() -> Proposer:
    """Edge proposals from the run's LLM; its client (and the embedded server, when no URL is
    set) opens inside discovery's event loop, only once the tools are known."""
    from trajsynth.llm.client import open_llm_client
    from trajsynth.planning.edge_proposals import propose_edges

    config = current_settings().run.llm

    async def propose(
        tools: Sequence[ToolSpec], returned: Mapping[str, Sequence[str]]
    ) -> list[EdgeProposal]:
        async with open_llm_client(config) as llm:
            return await propose_edges(llm, tools, returned)

    return propose


@app.command()
def remove(name: str, clusters_dir: ClustersDirOpt = None) -> None:
    """Forget a saved outside cluster."""
    removed = _registry().remove_outside_cluster(name, clusters_dir=_clusters_dir(clusters_dir))
    _console().print(f"removed {', '.join(str(p) for p in removed)}")
