"""Bad values to `synth run` are one line naming the value and what is allowed, exit 2, no
traceback, and nothing starts (no flow, no server, no store)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from trajsynth.cli import main as cli


def _synth(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *args: str):
    monkeypatch.setattr(sys, "argv", ["synth", *args])
    with pytest.raises(SystemExit) as exit_:
        cli.main()
    err = capsys.readouterr().err
    return exit_.value.code, err


@pytest.fixture(autouse=True)
def _workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--tasks", "-3"], "invalid value -3 for --tasks: Input should be greater than or equal"),
        (["--samples", "0"], "invalid value 0 for --samples"),
        (["--rounds", "0"], "invalid value 0 for --rounds"),
        (["--clusters", "nosuch"], "unknown cluster 'nosuch' in --clusters; known: calendar, code"),
        (["--base-url", "http://127.0.0.1:9/v1"], "nothing answers at --base-url http://127.0.0.1:9/v1"),
    ],
)  # fmt: skip
def test_one_line_exit_2_and_nothing_written(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    args: list[str],
    expected: str,
) -> None:
    code, err = _synth(monkeypatch, capsys, "run", *args)
    assert code == 2
    assert err.count("\n") == 1 and expected in err, err
    assert "Traceback" not in err
    assert not (tmp_path / "data" / "synth.duckdb").exists()
