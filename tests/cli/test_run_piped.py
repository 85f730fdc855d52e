"""`synth run ... | tee run.log`: progress moves when stdout is a pipe.

The CLI runs in a subprocess (its stdout a pipe, so not a terminal) against the fake LLM over
HTTP on the local sandbox. Status lines are read as they arrive: several must come while the
process still runs (not all at its end), each a plain line naming the stages, and the last
one the finished counts. No library INFO line (httpx's per-request line) reaches either
stream without ``-v``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fakes.llm_server import FakeLLMServer

pytestmark = pytest.mark.slow  # a whole run in a subprocess: about a minute on an idle box

STATUS = re.compile(r"^\[\d\d:\d\d:\d\d\] (.*\| )?eta (\?|\d\d:\d\d:\d\d)$")


_TABLE_RULES = set("┏┓┡┩┗┛┳╇┻┃")


def test_a_piped_run_prints_status_lines_while_it_runs(
    tmp_path: Path, prefect_api: dict[str, str]
) -> None:
    with FakeLLMServer(delay_s=0.2) as llm:
        command = [
            sys.executable, "-m", "trajsynth.cli", "run",
            "--base-url", llm.base_url, "--model", "fake",
            "--tasks", "2", "--samples", "2", "--rollout", "linear",
            "--status-every", "0.5", "--store", str(tmp_path / "s.duckdb"),
        ]  # fmt: skip
        env = {
            **os.environ,
            **prefect_api,
            "SYNTH_SANDBOX__KIND": "local",
            "PREFECT_HOME": str(tmp_path / "prefect"),
            "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
            "DO_NOT_TRACK": "1",
            "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120",
        }
        with (tmp_path / "stderr.txt").open("w") as err:
            proc = subprocess.Popen(
                command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=err, text=True
            )
            lines: list[tuple[str, bool]] = []  # (line, the process still ran when read)
            assert proc.stdout is not None
            deadline = time.monotonic() + 600
            for line in proc.stdout:
                lines.append((line.rstrip("\n"), proc.poll() is None))
                assert time.monotonic() < deadline, "the run took over 10 minutes"
            code = proc.wait(timeout=60)
    stderr = (tmp_path / "stderr.txt").read_text()
    assert code == 0, stderr[-2000:]
    status = [(line, running) for line, running in lines if STATUS.match(line)]
    moving = [line for line, running in status if running and "rollouts" in line]
    assert len(moving) >= 2, [line for line, _ in lines]  # read during the rollouts
    assert len({line.split("] ", 1)[1] for line, _ in status}) >= 3  # the counts moved
    last = status[-1][0]
    assert "tasks 2/2" in last and "rollouts 4/4" in last and "tokens" in last, last
    output = "\n".join(line for line, _ in lines) + stderr
    assert "HTTP Request" not in output
    # no bar drawn into the pipe (a table's rules, drawn with the same character, are not one)
    bars = [line for line in output.splitlines() if "━" in line and not set(line) & _TABLE_RULES]
    assert not bars, bars
