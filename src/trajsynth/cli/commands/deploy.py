"""`synth deploy` and `synth serve`: trajsynth's deployments on a Prefect server.

Both read the deployment definitions shipped with the package (or ``--project FILE``, a
prefect.yaml of your own) and the settings of the folder they run in, and check every
deployment (schedules parse, entrypoints name flows, parameters fit) before they talk to
the Prefect API at ``PREFECT_API_URL``. They work from any folder.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from trajsynth.cli.context import current_settings
from trajsynth.cli.ids import id_column
from trajsynth.cli.tables import Table
from trajsynth.schemas import InputError

__all__ = ["deploy", "serve"]

ProjectOpt = Annotated[
    Path | None,
    typer.Option(
        "--project",
        "-p",
        help="a prefect.yaml with `deployments:` (default: the definitions shipped with trajsynth)",
    ),
]
NamesOpt = Annotated[
    list[str] | None,
    typer.Option("--name", "-n", help="only this deployment (repeat for several)"),
]


def _deployments(project: Path | None, names: list[str] | None) -> list:
    from trajsynth.cli.run_command import prefect_environment

    prefect_environment()
    from trajsynth.flows.deployments import build_deployments

    return build_deployments(project, current_settings(), names)


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
    project: ProjectOpt = None,
    names: NamesOpt = None,
    work_pool: Annotated[
        str | None,
        typer.Option(help="register into this work pool (a process pool is created if missing)"),
    ] = None,
) -> None:
    """Register trajsynth's deployments (and their cron schedules) with the Prefect server."""
    from trajsynth.flows.deployments import register

    deployments = _deployments(project, names)
    url = _api_url()
    ids = register(deployments, work_pool=work_pool)
    console = Console()
    table = Table(title=f"deployments on {url}")
    table.add_column("deployment", overflow="fold")
    id_column(table, "id", ids.values())  # whole: `prefect deployment run` takes it
    for col in ("schedule", "runs on"):
        table.add_column(col, overflow="fold")
    for d in deployments:
        crons = ", ".join(f"{s.schedule.cron} {s.schedule.timezone}" for s in d.schedules or [])
        pool = work_pool or d.work_pool_name
        where = f"work pool {pool}" if pool else "`synth serve`"
        table.add_row(d.full_name, ids[d.full_name], crons or "none", where)
    console.print(table)


def serve(
    project: ProjectOpt = None,
    names: NamesOpt = None,
    limit: Annotated[int | None, typer.Option(help="flow runs at once")] = None,
) -> None:
    """Serve trajsynth's deployments from this machine until interrupted (Ctrl-C)."""
    from trajsynth.flows.deployments import serve as serve_deployments

    deployments = _deployments(project, names)
    url = _api_url()
    Console(stderr=True).print(
        f"serving {', '.join(d.full_name for d in deployments)} from {url}; Ctrl-C stops"
    )
    serve_deployments(deployments, limit=limit)
