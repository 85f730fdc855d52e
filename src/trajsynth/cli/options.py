"""The options every command spells the same way: ``--json`` on what reads, ``--store`` on
what reads the store."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from trajsynth.cli.context import current_settings

__all__ = ["JsonOpt", "StoreOpt", "print_json", "store_path_or_default"]

JsonOpt = Annotated[bool, typer.Option("--json", help="print JSON instead of tables")]
StoreOpt = Annotated[
    Path | None, typer.Option("--store", help="DuckDB store (default: settings' store_path)")
]


def print_json(value: Any) -> None:
    """``value`` as indented JSON on stdout (dates and other objects as text)."""
    sys.stdout.write(json.dumps(value, default=str, indent=2) + "\n")


def store_path_or_default(store_path: Path | None) -> Path:
    """``--store`` when given, else the settings' store."""
    if store_path is not None:
        return store_path
    return current_settings().store_path
