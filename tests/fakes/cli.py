"""What a `synth` call run in-process returns (tests/cli/conftest.py's ``synth`` fixture)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Ran:
    """What a finished `synth` call left: the fields of ``subprocess.CompletedProcess``."""

    returncode: int
    stdout: str
    stderr: str


SynthRunner = Callable[..., Ran]
