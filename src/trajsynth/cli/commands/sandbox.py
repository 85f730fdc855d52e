"""`synth sandbox`: build the Docker sandbox image locally, and say which sandbox a run gets."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from trajsynth.sandboxes import bwrap_usable, docker_unusable, ensure_image, image_tag
from trajsynth.sandboxes.image import DEFAULT_MIRROR, default_cache_dir, image_inputs

__all__ = ["app"]

app = typer.Typer(no_args_is_help=True, help="The Docker sandbox image.")
console = Console()


@app.command()
def build(
    force: Annotated[
        bool, typer.Option("--force", help="rebuild even when the image exists")
    ] = False,
    cache_dir: Annotated[
        Path | None,
        typer.Option("--cache-dir", help="root file system and wheel cache (~/.cache/trajsynth)"),
    ] = None,
    mirror: Annotated[str, typer.Option("--mirror", help="Debian mirror")] = DEFAULT_MIRROR,
) -> None:
    """Build the sandbox image (debootstrap + offline wheels + commit); no registry needed.

    Tagged by a hash of its inputs, so it is rebuilt only when they change.
    """
    started = time.monotonic()
    with console.status("sandbox image") as status:

        def progress(message: str) -> None:
            status.update(message)
            console.log(message)

        tag = ensure_image(force, cache_dir=cache_dir, mirror=mirror, progress=progress)
    inputs = image_inputs()
    table = Table(title="synth sandbox build", show_header=False)
    table.add_column("what")
    table.add_column("value", overflow="fold")
    table.add_row("image", tag)
    table.add_row("made from", f"debian {inputs['rootfs']['suite']} + {', '.join(inputs['site'])}")
    table.add_row("cache", str((cache_dir or default_cache_dir()) / "sandbox"))
    table.add_row("time", f"{time.monotonic() - started:.1f}s")
    console.print(table)


@app.command()
def info() -> None:
    """Which sandbox `auto` picks here, and why."""
    reason = docker_unusable()
    table = Table(title="synth sandbox info")
    table.add_column("part")
    table.add_column("status")
    table.add_row("image tag", image_tag())
    table.add_row(
        "Docker sandbox", "[green]usable[/]" if reason is None else f"[yellow]{reason}[/]"
    )
    table.add_row("bubblewrap", "[green]usable[/]" if bwrap_usable() else "[yellow]not usable[/]")
    if reason is None:
        auto = "docker"
    else:
        auto = "local (bubblewrap)" if bwrap_usable() else "local (plain subprocess)"
    table.add_row("auto picks", auto)
    console.print(table)
