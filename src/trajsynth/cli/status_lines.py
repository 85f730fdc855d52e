"""Progress for a stdout that is not a terminal (``synth run ... | tee run.log``, CI, nohup).

Rich's bars redraw in place, which a pipe cannot show: they would appear once, at the end.
``StatusLines`` takes the same progress events (``flows.progress``) and writes one plain line
per interval, and a last one when the run ends:

    [00:03:20] tasks 20/20 | rollouts 7/20 | leaves 31/80 (12 passed, 19 failed) | turns 412
      | tokens 1,204,311 | eta 00:06:40

(one line; folded here).

The ETA is the rollout stage's own rate: the time since its first event, times the leaves (or
units) still to come over those done. Every line is flushed as it is written, so a reader of
the pipe sees it then, not when the buffer fills.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from types import TracebackType

from trajsynth.flows.progress import ProgressEvent

__all__ = ["StatusLines", "clock_text"]

_NAMES = {"plan": "tasks", "rollout": "rollouts"}  # the stage as the line names it
_ORDER = ("plan", "rollout", "leaves", "turns", "tokens")


def clock_text(seconds: float) -> str:
    """``seconds`` as ``HH:MM:SS``.

    >>> clock_text(0), clock_text(3725.4)
    ('00:00:00', '01:02:05')
    """
    s = max(0, round(seconds))
    return f"{s // 3600:02d}:{s % 3600 // 60:02d}:{s % 60:02d}"


class StatusLines:
    """Progress events in, one status line per ``interval_s`` out (through ``write``)."""

    def __init__(
        self,
        write: Callable[[str], None],
        *,
        interval_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._write = write
        self._interval_s = interval_s
        self._clock = clock
        self._started = clock()
        self._rollout_began: float | None = None
        self._stages: dict[str, tuple[int, int, str]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def on_event(self, event: ProgressEvent) -> None:
        stage, done, total, note = event
        with self._lock:
            if stage in ("rollout", "leaves") and self._rollout_began is None:
                self._rollout_began = self._clock()
            self._stages[stage] = (done, total, note)

    def line(self) -> str:
        """The status now."""
        with self._lock:
            stages = dict(self._stages)
            began = self._rollout_began
        now = self._clock()
        parts = []
        for stage in (*_ORDER, *sorted(set(stages) - set(_ORDER))):
            if stage not in stages:
                continue
            done, total, note = stages[stage]
            name = _NAMES.get(stage, stage)
            if stage == "tokens":
                parts.append(f"tokens {done:,}")
            elif total:
                counts = note.split("; ")[-1] if stage == "leaves" else note
                parts.append(f"{name} {done}/{total}" + (f" ({counts})" if counts else ""))
            else:
                parts.append(f"{name} {done}")
        parts.append(f"eta {self._eta(stages, began, now)}")
        return f"[{clock_text(now - self._started)}] " + " | ".join(parts)

    @staticmethod
    def _eta(stages: dict[str, tuple[int, int, str]], began: float | None, now: float) -> str:
        done, total, _ = stages.get("leaves") or stages.get("rollout") or (0, 0, "")
        if began is None or not total:
            return "?"
        if done >= total:
            return clock_text(0)
        if done == 0:
            return "?"
        return clock_text((now - began) * (total - done) / done)

    def _loop(self) -> None:
        while not self._stop.wait(self._interval_s):
            self._write(self.line())

    def __enter__(self) -> StatusLines:
        self._thread = threading.Thread(target=self._loop, name="synth-status", daemon=True)
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._write(self.line())
