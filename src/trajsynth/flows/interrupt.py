"""Stop a command at once on SIGTERM or SIGINT (a scheduler's stop, a user's Ctrl-C).

Left to Prefect, a SIGTERM during a flow raises ``TerminationSignal`` in the main thread and
the flow engine then leaves its thread task runner, whose executor *joins* every worker
thread: each unit in flight (a whole tree of rollouts) runs to its end first, 40 s and more
on the embedded model. Ctrl-C goes the same way (asyncio cancels the flow, the runner joins).

``exit_on_signals()`` instead ends the process as soon as the signal arrives: one line on
stderr, then ``os._exit(128 + signal)``. Nothing is lost that a run needs: units commit their
rows in one transaction each, so what was written is whole and a unit in flight is simply
not marked done (the same state a SIGKILL leaves, which resume is tested against), and the
watchdog (``cli/reaper.py``) ends every server, relay and sandbox the command started and
removes its containers once the command is gone. Prefect installs its own SIGTERM handler
while a flow runs, so a flow calls ``rearm()`` as it starts to put ours back (a no-op unless
a command armed it, e.g. under a Prefect worker).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

__all__ = ["Stop", "exit_on_signals", "rearm"]

SIGNALS = (signal.SIGTERM, signal.SIGINT)

_handler: Callable[[int, FrameType | None], Any] | None = None


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


class Stop:
    """What the line printed on a stop says after ``stopped by SIGTERM: `` (settable)."""

    def __init__(self, line: str) -> None:
        self.line = line


@contextlib.contextmanager
def exit_on_signals(line: str) -> Iterator[Stop]:
    """While inside, SIGTERM and SIGINT print ``stopped by SIG...: <line>`` to stderr and end
    the process with status 128 + the signal's number. Restores the previous handlers on
    leaving (commands run in-process by tests must not keep them)."""
    global _handler
    armed = Stop(line)
    if not _in_main_thread():  # signals can only be handled on the main thread
        yield armed
        return

    def stop(signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        text = f"\nstopped by {name}: {armed.line}\n"
        with contextlib.suppress(OSError, ValueError):
            if sys.stdout.isatty():  # a live progress bar hides the cursor: show it again
                os.write(sys.stdout.fileno(), b"\x1b[?25h")
        with contextlib.suppress(OSError, ValueError):
            os.write(sys.stderr.fileno(), text.encode())
        os._exit(128 + signum)  # no thread joins, no atexit: the watchdog reaps the rest

    previous = {sig: signal.getsignal(sig) for sig in SIGNALS}
    for sig in SIGNALS:
        signal.signal(sig, stop)
    _handler = stop
    try:
        yield armed
    finally:
        _handler = None
        for sig, old in previous.items():
            signal.signal(sig, old if old is not None else signal.SIG_DFL)


def rearm() -> None:
    """Put the armed handlers back over those a library installed since (Prefect's flow
    engine replaces SIGTERM's while a flow runs); a no-op when nothing is armed."""
    if _handler is None or not _in_main_thread():
        return
    for sig in SIGNALS:
        if signal.getsignal(sig) is not _handler:
            signal.signal(sig, _handler)
