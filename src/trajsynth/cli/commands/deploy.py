"""`synth deploy` and `synth serve`: the deployments of ``prefect.yaml`` on a Prefect server.

Both read the project file and the settings, and check every deployment (schedules parse,
entrypoints name flows, parameters fit) before they talk to the Prefect API at
``PREFECT_API_URL``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from trajsynth.schemas import InputError

__all__ = ["deploy", "serve"]

ProjectOpt = Annotated[
    Path,
    typer.Option("--project", "-p", help="the Prefect project file (default ./prefect.yaml)"),
]
NamesOpt = Annotated[
    list[str] | None,
    typer.Option("--name", "-n", help="only this deployment (repeat for several)"),
]


def _deployments(project: Path, names: list[str] | None) -> list:
    from trajsynth.cli import main as cli  # the CLI mounts this module: import it late
    from trajsynth.cli.run_command import prefect_environment

    prefect_environment()
    from trajsynth.flows.deployments import build_deployments

    return build_deployments(project, cli.settings(), names)


def _api_url() -> str:
    from prefect.settings import PREFECT_API_URL

    url = PREFECT_API_URL.value()
    if not url:
        raise InputError(
            "PREFECT_API_URL is not set: start a server (`prefect server start`) and "
            "`export PREFECT_API_URL=http://127.0.0.1:4200/api`, or use Prefect Cloud"
        )
    return url


def deploy(
    project: ProjectOpt = Path("prefect.yaml"),
    names: NamesOpt = None,
    work_pool: Annotated[
        str | None,
        typer.Option(help="register into this work pool (a process pool is created if missing)"),
    ] = None,
) -> None:
    """Register the project's deployments (and their cron schedules) with the Prefect server."""
    from trajsynth.flows.deployments import register

    deployments = _deployments(project, names)
    url = _api_url()
    ids = register(deployments, work_pool=work_pool)
    console = Console()
    table = Table(title=f"deployments on {url}")
    for col in ("deployment", "id", "schedule", "runs on"):
        table.add_column(col)
    for d in deployments:
        crons = ", ".join(f"{s.schedule.cron} {s.schedule.timezone}" for s in d.schedules or [])
        pool = work_pool or d.work_pool_name
        where = f"work pool {pool}" if pool else "`synth serve`"
        table.add_row(d.full_name, ids[d.full_name], crons or "none", where)
    console.print(table)


def serve(
    project: ProjectOpt = Path("prefect.yaml"),
    names: NamesOpt = None,
    limit: Annotated[int | None, typer.Option(help="flow runs at once")] = None,
) -> None:
    """Serve the project's deployments from this machine until interrupted (Ctrl-C)."""
    from trajsynth.flows.deployments import serve as serve_deployments

    deployments = _deployments(project, names)
    url = _api_url()
    Console(stderr=True).print(
        f"serving {', '.join(d.full_name for d in deployments)} from {url}; Ctrl-C stops"
    )
    serve_deployments(deployments, limit=limit)
