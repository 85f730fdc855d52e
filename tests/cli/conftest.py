"""`synth` run in the test's own process, through the real entry point.

A `python -m trajsynth.cli` subprocess spends 1-2 s of CPU starting an interpreter and
importing the CLI before it does anything; `main()` called here parses, handles errors and
exits exactly as it does there (same exit codes, same stdout and stderr), so only the tests
that are about the process itself (signals, the installed entry point) start one.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

import pytest
from fakes.cli import Ran, SynthRunner

from trajsynth.cli.main import main


@pytest.fixture
def synth(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> SynthRunner:
    """``run(*args, cwd=...)``: `synth ARGS` in directory ``cwd``, as a finished process."""

    def run(*args: str, cwd: Path) -> Ran:
        monkeypatch.chdir(cwd)
        monkeypatch.setattr(sys, "argv", ["synth", *args])
        # the CLI's callback reconfigures the root logger and sets a Prefect default in the
        # environment for its process; here that process is pytest's, so both are put back
        root = logging.getLogger()
        handlers, level = root.handlers[:], root.level
        prefect_level = os.environ.get("PREFECT_LOGGING_LEVEL")
        capsys.readouterr()  # drop what the test printed before
        try:
            main()
            code = 0
        except SystemExit as exc:  # click exits with the command's status, 0 included
            code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
        finally:
            root.handlers[:] = handlers
            root.setLevel(level)
            if prefect_level is None:
                os.environ.pop("PREFECT_LOGGING_LEVEL", None)
            else:
                os.environ["PREFECT_LOGGING_LEVEL"] = prefect_level
        out = capsys.readouterr()
        return Ran(code, out.out, out.err)

    return run
