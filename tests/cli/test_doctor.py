"""`synth doctor` reports every part and fails when a needed one is missing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from trajsynth.llm.embedded import free_port


@pytest.mark.slow
def test_doctor_names_the_broken_part_and_its_fix(tmp_path: Path) -> None:
    port = free_port()  # nothing listens there
    env = {
        **os.environ,
        "SYNTH_LLM__BASE_URL": f"http://127.0.0.1:{port}/v1",
        "SYNTH_SANDBOX__KIND": "local",
    }
    proc = subprocess.run(
        [sys.executable, "-m", "trajsynth.cli", "doctor", "--json"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    checks = {c["part"]: c for c in json.loads(proc.stdout)}
    for part in ("Docker engine", "sandbox image", "LLM endpoint", "store writable", "Prefect"):
        assert part in checks
    llm = checks["LLM endpoint"]
    assert not llm["ok"] and llm["required"]
    assert "SYNTH_LLM__BASE_URL" in llm["fix"] or "base_url" in llm["fix"]  # the fix is named
    assert (tmp_path / "data" / "synth.duckdb").exists()  # the store check really wrote
