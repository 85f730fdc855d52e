"""One convention for the whole CLI: `--json` on every command that reads, `--store` on every
command that reads the store, and `--help` that renders cleanly at 80 columns.

Every command's help is rendered through the real entry point and checked for what leaked
from the source before: RST literals (````x````), a ``<bool>`` label on plain flags, rich
markup, lines past 80 columns, and docstring line breaks kept inside a paragraph. The control
renders the untidied command tree and finds the leaks, so the check can fail.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import typer
from fakes.cli import SynthRunner

from trajsynth.cli.help_text import tidy
from trajsynth.cli.main import app, command

READS = {
    ("runs",), ("stats",), ("show",), ("query",), ("doctor",), ("schema",), ("topo",),
    ("compare",), ("clusters", "list"), ("clusters", "show"), ("sandbox", "info"),
}  # fmt: skip
READS_STORE = {
    ("runs",), ("stats",), ("show",), ("query",), ("topo",), ("compare",), ("export",),
    ("eval",), ("sft",), ("dashboard",), ("run",), ("improve",),
}  # fmt: skip


def _paths(cmd: Any, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    out = [(path, cmd)]
    for name, sub in getattr(cmd, "commands", {}).items():
        out += _paths(sub, (*path, name))
    return out


def _options(cmd: Any) -> set[str]:
    return {opt for p in cmd.params for opt in getattr(p, "opts", [])}


def _leaks(text: str) -> list[str]:
    found = []
    if "``" in text:
        found.append("RST literal ``")
    if "<bool>" in text:
        found.append("<bool> on a flag")
    if re.search(r"\[/\]|\[/?(bold|dim|red|green|yellow|cyan)\b", text):
        found.append("rich markup")
    found += [f"line over 80 columns: {line!r}" for line in text.splitlines() if len(line) > 80]
    return found


def test_every_read_command_takes_json_and_every_store_reader_takes_store() -> None:
    commands = dict(_paths(command()))
    missing_json = sorted(" ".join(p) for p in READS if "--json" not in _options(commands[p]))
    missing_store = sorted(
        " ".join(p) for p in READS_STORE if "--store" not in _options(commands[p])
    )
    assert missing_json == [] and missing_store == []


def test_every_help_text_is_one_line_per_paragraph() -> None:
    broken = []
    for path, cmd in _paths(command()):
        texts = [cmd.help, cmd.short_help, *(getattr(p, "help", None) for p in cmd.params)]
        for text in filter(None, texts):
            for paragraph in text.split("\n\n"):
                lines = paragraph.splitlines()
                if len(lines) > 1 and not all(x.lstrip().startswith(("-", "*")) for x in lines):
                    broken.append(f"{' '.join(path) or 'synth'}: {paragraph[:60]!r}")
    assert broken == []


def test_every_help_renders_cleanly_at_80_columns(
    synth: SynthRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    problems = []
    paths = [p for p, _ in _paths(command())]
    assert len(paths) > 20  # every command and group, not a few
    for path in paths:
        ran = synth(*path, "--help", cwd=tmp_path)
        assert ran.returncode == 0, (path, ran.stderr)
        assert "Usage:" in ran.stdout
        problems += [f"{' '.join(path) or 'synth'}: {leak}" for leak in _leaks(ran.stdout)]
    assert problems == []


def test_control_the_untidied_help_leaks_markup_and_line_breaks() -> None:
    raw = typer.main.get_command(app)
    commands = dict(_paths(raw))
    assert "\n" in commands[("show",)].help.split("\n\n")[0]  # the docstring's own break
    flags = [p for p in commands[("query",)].params if getattr(p, "is_flag", False)]
    ctx = commands[("query",)].make_context("query", ["select 1"])
    assert any(p.display_type_rich(ctx) == "<bool>" for p in flags)
    tidy(raw)
    assert all(p.display_type_rich(ctx) is None for p in flags)
