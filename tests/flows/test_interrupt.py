"""``flows.interrupt``: SIGTERM and SIGINT end the process at once with one line, even after
a library (Prefect's flow engine) replaced the SIGTERM handler, and leave no handler behind."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from trajsynth.flows.interrupt import exit_on_signals, rearm

# a worker thread busy for a minute, as a unit in flight: the exit must not wait for it
_CHILD = """
import os, signal, threading, time
from trajsynth.flows.interrupt import exit_on_signals, rearm
threading.Thread(target=time.sleep, args=(60,)).start()
with exit_on_signals("nothing yet") as stop:
    stop.line = "resume run r1"
    signal.signal(signal.SIGTERM, lambda *a: None)  # what Prefect's engine does in a flow
    rearm()
    os.kill(os.getpid(), signal.SIG)
    time.sleep(60)
"""


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["sigterm", "sigint"])
def test_a_signal_ends_the_process_at_once_with_one_line(sig: signal.Signals) -> None:
    child = _CHILD.replace("signal.SIG)", f"signal.{sig.name})")
    done = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=30)
    assert done.returncode == 128 + sig
    assert done.stderr.strip() == f"stopped by {sig.name}: resume run r1"


def test_handlers_are_restored_and_rearm_is_a_no_op_outside() -> None:
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    with exit_on_signals("x"):
        assert signal.getsignal(signal.SIGTERM) is not before[signal.SIGTERM]
    assert {s: signal.getsignal(s) for s in before} == before
    rearm()
    assert {s: signal.getsignal(s) for s in before} == before
