"""SFT and RL datasets from the store's selections, with a dataset card (docs/design.md §11)."""

from trajsynth.export.formats import EXPORT_FORMATS
from trajsynth.export.report import EmptySelectionError, ExportError, ExportReport
from trajsynth.export.rows import resolve_run, rl_rows, sft_rows
from trajsynth.export.seen import SelectionSeen, selection_seen
from trajsynth.export.write import export_dataset, export_rl, export_sft, render_rows

FORMATS = tuple(EXPORT_FORMATS)  # the registered format names, sorted

__all__ = [
    "EXPORT_FORMATS",
    "FORMATS",
    "EmptySelectionError",
    "ExportError",
    "ExportReport",
    "SelectionSeen",
    "export_dataset",
    "export_rl",
    "export_sft",
    "render_rows",
    "resolve_run",
    "rl_rows",
    "selection_seen",
    "sft_rows",
]
