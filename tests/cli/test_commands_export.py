"""`synth export`: an empty selection prints what the selection saw and what to change."""

from __future__ import annotations

from pathlib import Path

from fakes.export_store import export_store, select
from typer.testing import CliRunner

from trajsynth.cli.main import app


def test_nothing_to_export_shows_counts_and_reasons(tmp_path: Path) -> None:
    store = export_store(tmp_path / "s.duckdb", selections=False)
    left = [
        {**select("sft", t, "task-1", selected=False), "reason": "per-task budget k_sft=1 reached"}
        for t in ("t1", "t2")
    ]
    store.insert_many({"selections": left})
    result = CliRunner().invoke(
        app,
        ["export", "--out", str(tmp_path / "out"), "--store", str(tmp_path / "s.duckdb")],
        env={"COLUMNS": "200", "SYNTH_STORE_PATH": str(tmp_path / "s.duckdb")},
    )
    assert result.exit_code == 2, result.output
    out = result.output
    rows = {
        cells[0]: cells[1]
        for line in out.splitlines()
        if line.startswith("│")
        for cells in [[c.strip() for c in line.strip("│").split("│")]]
    }
    assert "nothing to export: run run-1" in out
    assert rows["trajectories"] == "4" and rows["verified"] == "3"
    assert rows["sft selected / considered"] == "0 / 2"
    assert rows["rl selected / considered"] == "0 / 0"
    assert rows["left out: per-task budget k_sft=1 reached"] == "2"
    assert "next: curation left every item out" in out
    assert not (tmp_path / "out").exists()
