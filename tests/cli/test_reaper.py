"""`kill -9` of a command leaves nothing behind: the watchdog reaps its descendants, including
ones in sessions of their own (as the embedded LLM server and Prefect's API run)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import psutil
import pytest

from trajsynth.cli.reaper import reap

CHILD = textwrap.dedent(
    """
    import subprocess, sys, time
    from trajsynth.cli.reaper import guard_descendants, track_now
    guard_descendants(poll_s=0.1, grace_s=0.5)
    # a server in a session of its own, as the embedded LLM server is started
    server = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                              start_new_session=True)
    # a grandchild that ignores SIGTERM: it must be killed after the grace period
    stubborn = subprocess.Popen([sys.executable, "-c",
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "print('ready', flush=True); time.sleep(600)"], stdout=subprocess.PIPE)
    stubborn.stdout.readline()
    track_now()
    print(server.pid, stubborn.pid, flush=True)
    time.sleep(600)
    """
)


def _wait_gone(pids: list[int], timeout_s: float) -> list[int]:
    procs = [psutil.Process(p) for p in pids if psutil.pid_exists(p)]
    _, alive = psutil.wait_procs(procs, timeout=timeout_s)
    return [p.pid for p in alive if p.status() != psutil.STATUS_ZOMBIE]


@pytest.mark.slow
def test_sigkill_of_the_command_ends_every_descendant() -> None:
    command = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, text=True)
    assert command.stdout is not None
    pids = [int(p) for p in command.stdout.readline().split()]
    assert len(pids) == 2 and all(psutil.pid_exists(p) for p in pids)
    os.kill(command.pid, signal.SIGKILL)
    command.wait()
    # the watchdog's grace (0.5 s) before SIGKILL, with room for a loaded machine
    assert _wait_gone(pids, timeout_s=30) == []


def test_reap_skips_a_pid_that_was_reused() -> None:
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        created = psutil.Process(sleeper.pid).create_time()
        assert reap({sleeper.pid: created - 100.0}, os.getpid(), grace_s=0.2) == 0
        assert sleeper.poll() is None
        assert reap({sleeper.pid: created}, os.getpid(), grace_s=1.0) == 1
        sleeper.wait(timeout=10)  # psutil may have collected its status already
        assert not psutil.pid_exists(sleeper.pid)
    finally:
        sleeper.kill()
        sleeper.wait()


@pytest.mark.parametrize("argv", [["--parent", "not-a-pid"], []])
def test_watchdog_rejects_bad_arguments(argv: list[str]) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "trajsynth.cli.reaper", *argv], capture_output=True, text=True
    )
    assert out.returncode == 2 and "--parent" in out.stderr
