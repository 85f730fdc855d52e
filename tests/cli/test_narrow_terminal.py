"""What the CLI prints reads at 80 columns: no word is split across lines.

Tables render through ``cli.tables.Table``, which folds a table too wide for the terminal to
one block per row; ``synth show tree`` shortens and wraps call arguments between pairs, and an
argument holding newlines stays one logical line. Each test renders with a rich
``Console(width=80)`` and checks that every word it put in comes out whole on one line; the
controls show that rich's own table does split words there.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from rich import table as rich_table
from rich.console import Console

from trajsynth.cli.commands.tree import render_tree
from trajsynth.cli.tables import Table
from trajsynth.store import Store

HEADERS = ("run_id", "state", "created", "trajectories", "passed", "reasoning", "completed")
ROW = (
    "run_81021bd9c2ab2c0b",
    "completed",
    "2026-11-28T16:18:25",
    "4",
    "1 / 4",
    "the assistant answered without calling a tool",
    "yes",
)


def _render(renderable: object, width: int = 80) -> str:
    console = Console(width=width, record=True, file=open("/dev/null", "w"), color_system=None)  # noqa: SIM115
    console.print(renderable)
    console.file.close()
    return console.export_text()


def _split_words(text: str, words: set[str]) -> list[str]:
    """The words that appear on no single line of ``text`` (each split across lines)."""
    lines = text.splitlines()
    return sorted(w for w in words if not any(w in line for line in lines))


def _words(*cells: str) -> set[str]:
    return {w for cell in cells for w in cell.split()}


def _wide(cls: type[rich_table.Table]) -> rich_table.Table:
    table = cls(title="runs")
    for header in HEADERS:
        table.add_column(header, overflow="fold")
    table.add_row(*ROW)
    return table


def test_a_table_too_wide_for_80_columns_folds_to_a_block_per_row() -> None:
    out = _render(_wide(Table))
    assert _split_words(out, _words(*HEADERS, *ROW)) == []
    assert "row 1" in out and "  state: completed" in out
    assert all(len(line) <= 80 for line in out.splitlines())


def test_control_rich_s_own_table_splits_words_at_80_columns() -> None:
    out = _render(_wide(rich_table.Table))
    assert _split_words(out, _words(*HEADERS, *ROW))  # e.g. "compl│eted"


def test_a_table_that_fits_stays_a_table() -> None:
    table = Table(title="small")
    table.add_column("part")
    table.add_column("status")
    table.add_row("store", "completed")
    out = _render(table)
    assert "┃ part" in out and "│ completed │" in out


def test_a_headerless_summary_folds_to_figure_lines() -> None:
    table = Table(title="synth run", show_header=False)
    table.add_column("figure")
    table.add_column("value")
    long = "InfraError: the server answered 500 after retries " * 3
    table.add_row("top unit errors", long + "x" * 70)  # a 70-character word: too wide
    table.add_row("tasks planned", "2")
    out = _render(table)
    assert "tasks planned: 2" in out
    assert _split_words(out, _words(long)) == []


def _tree_store(tmp_path: Path, arguments: dict[str, object]) -> Store:
    store = Store(tmp_path / "s.duckdb")
    call = {
        "call_id": "c1",
        "tool": "create_event",
        "raw_arguments": json.dumps(arguments),
        "obs_class": "ok",
    }

    def node(node_id: str, parent: str | None, depth: int, **extra: object) -> dict:
        return {"node_id": node_id, "tree_id": "tree_w", "parent_id": parent, "depth": depth,
                "messages": [], "calls": [], **extra}  # fmt: skip

    goal = "Book the quarterly planning review with the finance team next Tuesday afternoon"
    store.insert_many(
        {
            "trees": [
                {
                    "tree_id": "tree_w",
                    "run_id": "r",
                    "blueprint_id": "bp",
                    "round": 0,
                    "rollout_mode": "tree",
                    "n_nodes": 2,
                    "n_leaves": 1,
                    "pass_rate": 1.0,
                    "total_tokens": 10,
                    "wall_s": 1.0,
                    "generated_tokens": 5,
                }  # fmt: skip
            ],
            "nodes": [
                node("n_root", None, 0, messages=[{"role": "user", "content": goal}]),
                node(
                    "n_1",
                    "n_root",
                    1,
                    calls=[call],
                    value=1.0,
                    advantage=0.5,
                    prune_reason="the same failing call three times over in a row",
                ),  # fmt: skip
            ],
        }
    )
    return store


def test_show_tree_wraps_arguments_on_token_boundaries(tmp_path: Path) -> None:
    arguments = {
        "name": "Quarterly planning review",
        "organizer": "ann.lee@example.com",
        "attendees": ["bob@example.com", "carol@example.com"],
        "date": "2026-12-01",
    }
    out = _render(render_tree(_tree_store(tmp_path, arguments), "tree_w"))
    shown = 'name="Quarterly planning review", organizer="ann.lee@example.com"'
    tokens = set(re.split(r"(?<=,) ", shown))  # every key=value pair (and word) stays whole
    assert _split_words(out, _words(shown) | tokens) == []
    assert all(len(line) <= 80 for line in out.splitlines())


def test_show_tree_survives_arguments_with_newlines(tmp_path: Path) -> None:
    arguments = {"title": "Standup", "notes": "line one\nline two\n\nline four"}
    out = _render(render_tree(_tree_store(tmp_path, arguments), "tree_w"))
    call_lines = [line for line in out.splitlines() if "create_event(" in line]
    assert len(call_lines) == 1  # the call is one line, the newlines shown as \n
    assert 'notes="line one\\nline two\\n\\nline four"' in call_lines[0]
    assert "V=1.00 A=+0.50" in out  # the figures follow (wrapped to the next line)
    assert all(len(line) <= 80 for line in out.splitlines())
