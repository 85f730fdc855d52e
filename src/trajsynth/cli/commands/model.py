"""`synth model export --out DIR`: the base model as a plain transformers folder."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

__all__ = ["app", "export"]

app = typer.Typer(help="The base model: write it where any transformers script can load it.")
console = Console()


@app.command("export")
def export(
    out: Annotated[Path, typer.Option("--out", "-o", help="folder to write")],
    model: Annotated[
        str,
        typer.Option(
            "--model", help="embedded (the model runs use), a .gguf file or a HF model folder"
        ),
    ] = "embedded",
    overwrite: Annotated[
        bool, typer.Option("--overwrite", help="replace an existing folder")
    ] = False,
) -> None:
    """Write the model dequantized to float32 as a transformers folder (safetensors, config,
    tokenizer with the tool-aware chat template): the base model a TRL script trains on an
    export with, importing nothing of trajsynth."""
    from trajsynth.training.models_io import export_model

    files = export_model(model, out, overwrite=overwrite)
    size = sum(f.stat().st_size for f in files)
    console.print(f"wrote {len(files)} files ({size / 1e6:.0f} MB) to {out}")
    console.print(f'load it with: AutoModelForCausalLM.from_pretrained("{out}")')
