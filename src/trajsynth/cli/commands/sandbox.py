"""`synth sandbox`: build the Docker sandbox image locally, and say which sandbox a run gets."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from trajsynth.cli.context import current_settings
from trajsynth.cli.options import JsonOpt, print_json
from trajsynth.cli.tables import Table
from trajsynth.sandboxes import (
    bwrap_usable,
    docker_unusable,
    ensure_image,
    image_tag,
    unenforced_limits,
)
from trajsynth.sandboxes._agent import OUTPUT_CAP
from trajsynth.sandboxes.image import DEFAULT_MIRROR, image_inputs
from trajsynth.schemas import SandboxKind, paths

# what the sandbox passes back of one stream, less room for the line that reports a cut
_AGENT_CAP = OUTPUT_CAP - 4096

__all__ = ["app"]

app = typer.Typer(no_args_is_help=True, help="The sandboxes: build the image, check, run.")
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
    table.add_row("cache", str((cache_dir or paths.cache_dir()) / "sandbox"))
    table.add_row("time", f"{time.monotonic() - started:.1f}s")
    console.print(table)


@app.command()
def info(as_json: JsonOpt = False) -> None:
    """Which sandbox `auto` picks here, and why."""
    reason = docker_unusable()
    missing = unenforced_limits()
    if reason is None:
        auto = "docker"
    else:
        auto = "local (bubblewrap)" if bwrap_usable() else "local (plain subprocess)"
    if as_json:
        print_json(
            {
                "image_tag": image_tag(),
                "docker_unusable": reason,
                "bubblewrap_usable": bwrap_usable(),
                "local_limits_not_enforced": missing,
                "auto_picks": auto,
            }
        )
        return
    table = Table(title="synth sandbox info")
    table.add_column("part")
    table.add_column("status")
    table.add_row("image tag", image_tag())
    table.add_row(
        "Docker sandbox", "[green]usable[/]" if reason is None else f"[yellow]{reason}[/]"
    )
    table.add_row("bubblewrap", "[green]usable[/]" if bwrap_usable() else "[yellow]not usable[/]")
    table.add_row(
        "local sandbox limits",
        "[green]all enforced[/]"
        if not missing
        else "[yellow]not enforced: " + ", ".join(missing) + " (it refuses to run)[/]",
    )
    table.add_row("auto picks", auto)
    console.print(table)


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def run(
    ctx: typer.Context,
    kind: Annotated[
        SandboxKind | None,
        typer.Option("--kind", help="docker | local | auto (default: the sandbox.kind setting)"),
    ] = None,
    timeout: Annotated[
        float, typer.Option("--timeout", help="seconds, as run_python's timeout_s", min=1)
    ] = 10.0,
    max_output: Annotated[
        int,
        typer.Option(
            "--max-output",
            help="bytes of each stream kept (the code tool keeps 1,000,000); a cut is "
            "reported on stderr with the bytes dropped",
            min=1,
            max=_AGENT_CAP,
        ),
    ] = 1_000_000,
) -> None:
    """Run `-- CMD ...` in a sandbox exactly as the code tool runs a program.

    Same sandbox and limits as a run (the [run] sandbox settings), started the same way, and the
    command goes through the code tool's own runner: output capped, everything it started
    killed when it ends or times out, the timeout kept under run.tool_timeout_s. Prints the
    command's output (each stream cut at --max-output bytes, with a line on stderr saying how
    much was dropped) and exits with its status (124: timed out, 128+N: killed by signal N).
    """
    import sys

    from trajsynth.sandboxes import open_sandbox

    command = list(ctx.args)
    if not command:
        raise typer.BadParameter("no command: use `synth sandbox run [--kind K] -- CMD ...`")
    config = current_settings().run_config()
    chosen = kind or config.sandbox
    tool_timeout = config.budgets.tool_timeout_s
    with open_sandbox(chosen, config.sandbox_limits) as sandbox:
        inner = [sandbox.python, "-m", "trajsynth.mcp_servers.servers.code"]
        inner += ["exec", f"{timeout:g}", str(max_output), "--", *command]
        res = sandbox.exec(
            inner,
            timeout=min(timeout, tool_timeout) + 30,
            env={"TRAJSYNTH_TOOL_TIMEOUT_S": f"{tool_timeout:g}"},
        )
    sys.stdout.write(res.stdout)
    sys.stderr.write(res.stderr)
    code = res.exit_code
    raise typer.Exit(124 if res.timed_out else code if code >= 0 else 128 - code)
