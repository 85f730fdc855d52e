"""What this process knows about each LLM server it talks to: its slots, its speed, its keeper.

Every ``OpenAILLMClient`` of the process that talks to one base URL shares one ``Endpoint``:

* ``slots``: how many requests the server computes at once. A request holds a slot from
  before it is sent until its answer (or its last retry) is back, so requests wait here, in
  the client, never in the server's queue. A request the client times out on has therefore
  been *computing* for that long, not queueing behind others. The embedded llama.cpp server
  has one slot (it computes one request at a time); any other server gets the client's
  ``max_concurrency``.
* ``timeout_for``: the per-attempt timeout. A ``timeout_s`` the user set is exactly that:
  the seconds a request may take before it is retried, on every try. Left unset, it adapts:
  at least ``ADAPTIVE_FLOOR_S`` and longer when the server has been measured slower than that
  allows (seconds per token of work, an exponentially weighted mean over answered requests,
  a prompt token counting a tenth of a generated one; before any answer, a pessimistic 4
  tokens/s), doubled on each retry, so a slow but working server is not given up on while it
  computes.
* ``dead``: an endpoint that has answered nothing while ``DEAD_AFTER`` requests were given
  up on (every try timed out or found no server) fails the next requests at once, so a run
  against a server that answers nothing ends in minutes with one clear line, not after
  every unit has waited out its own retries.
* ``keeper``: for a server this process started (``llm.embedded``), a function that
  makes it idle before a retry: a dead server is started again, and one that was given up
  on mid-request is restarted, since llama.cpp goes on computing an abandoned request and a
  retry would queue behind it (the work would be done twice).

The slot gate works across event loops and threads (units of work run on a thread task
runner, each with its own loop), which ``asyncio.Semaphore`` does not.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

__all__ = [
    "ADAPTIVE_FLOOR_S",
    "DEAD_AFTER",
    "Endpoint",
    "SlotGate",
    "endpoint",
    "forget_endpoint",
    "forget_faults",
    "register_endpoint",
]

Keeper = Callable[[str], None]
"""Called (in a worker thread) with why (``"timeout"`` or ``"connection"``) before a retry."""

ADAPTIVE_FLOOR_S = 120.0
"""The shortest per-attempt timeout when ``[run.llm] timeout_s`` is unset."""
DEAD_AFTER = 2
"""Requests given up on, with not one answered, after which an endpoint counts as dead."""
_TIMEOUT_FACTOR = 3.0  # an attempt may take this many times its expected time
_TIMEOUT_SLACK_S = 5.0
_EWMA = 0.3
_PRIOR_SECONDS_PER_TOKEN = 0.25  # before any measurement: 4 tokens/s, a loaded 2-core box
_PROMPT_WEIGHT = 0.1  # reading a prompt token costs about a tenth of generating one on CPU


def _work(prompt_tokens: int, completion_tokens: int) -> float:
    """A request's work in generated-token equivalents."""
    return completion_tokens + _PROMPT_WEIGHT * prompt_tokens


@dataclass(eq=False)
class _Waiter:
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[None]
    granted: bool = False


def _grant(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class SlotGate:
    """A counting semaphore shared by every event loop and thread of the process (FIFO)."""

    def __init__(self, slots: int) -> None:
        if slots < 1:
            raise ValueError(f"a server needs at least one slot, got {slots}")
        self.slots = slots
        self._free = slots
        self._lock = threading.Lock()
        self._waiters: deque[_Waiter] = deque()
        self.in_use_peak = 0

    @property
    def in_use(self) -> int:
        return self.slots - self._free

    async def acquire(self) -> None:
        loop = asyncio.get_running_loop()
        with self._lock:
            if self._free > 0 and not self._waiters:
                self._free -= 1
                self.in_use_peak = max(self.in_use_peak, self.in_use)
                return
            waiter = _Waiter(loop, loop.create_future())
            self._waiters.append(waiter)
        try:
            await waiter.future
        except asyncio.CancelledError:
            with self._lock:
                granted = waiter.granted
                if not granted:
                    self._waiters.remove(waiter)
            if granted:  # the slot was handed to us as we were cancelled: pass it on
                self.release()
            raise

    def release(self) -> None:
        with self._lock:
            while self._waiters:
                waiter = self._waiters.popleft()
                waiter.granted = True
                try:
                    waiter.loop.call_soon_threadsafe(_grant, waiter.future)
                except RuntimeError:  # that loop is closed: its waiter is gone
                    continue
                return  # the slot moves to the waiter; _free is unchanged
            self._free += 1

    @contextlib.asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        await self.acquire()
        try:
            yield
        finally:
            self.release()


@dataclass(eq=False)
class Endpoint:
    """One server's slots, measured speed and keeper (see the module doc)."""

    base_url: str
    gate: SlotGate
    keeper: Keeper | None = None
    seconds_per_token: float | None = None
    answered: int = 0
    given_up: int = 0  # requests whose every try timed out or found no server
    recovered: list[str] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def observe(self, latency_s: float, prompt_tokens: int, completion_tokens: int) -> None:
        """Fold one answered request (seconds at the server, its tokens) into the speed."""
        rate = latency_s / max(1.0, _work(prompt_tokens, completion_tokens))
        with self._lock:
            old = self.seconds_per_token
            self.seconds_per_token = rate if old is None else (1 - _EWMA) * old + _EWMA * rate
            self.answered += 1

    def timeout_for(
        self, prompt_tokens: int, max_tokens: int, fixed_s: float | None, attempt: int = 1
    ) -> float:
        """Seconds attempt ``attempt`` of a request may take.

        ``fixed_s`` (the user's ``timeout_s``) is the answer, on every try. ``None`` adapts:
        three times what the measured speed says the request needs (prompt and
        ``max_tokens``), never less than ``ADAPTIVE_FLOOR_S``, doubled on each retry (a cold
        server, restarted and without its prompt cache, is slower than the one measured).

        >>> e = Endpoint("u", SlotGate(1))
        >>> e.timeout_for(2000, 256, 5.0), e.timeout_for(2000, 256, 5.0, attempt=4)
        (5.0, 5.0)
        >>> e.timeout_for(100, 64, None), e.timeout_for(100, 64, None, attempt=2)
        (120.0, 240.0)
        >>> e.timeout_for(2000, 256, None)  # the prior: (256 + 2000 / 10) x 0.25 s x 3 + 5 s
        347.0
        >>> e.observe(10.0, 0, 10)  # measured: one second a generated token
        >>> e.timeout_for(1000, 256, None)  # (256 + 1000 / 10) s, times 3, plus 5 s
        1073.0
        """
        if fixed_s is not None:
            return fixed_s
        rate = (
            _PRIOR_SECONDS_PER_TOKEN if self.seconds_per_token is None else self.seconds_per_token
        )
        expected = rate * _work(prompt_tokens, max_tokens)
        single = max(ADAPTIVE_FLOOR_S, _TIMEOUT_FACTOR * expected + _TIMEOUT_SLACK_S)
        return single * 2 ** max(0, attempt - 1)

    def give_up(self) -> None:
        """A request whose every try timed out or found no server."""
        with self._lock:
            self.given_up += 1

    @property
    def dead(self) -> bool:
        """Nothing answered, and ``DEAD_AFTER`` requests given up on (see the module doc)."""
        return self.answered == 0 and self.given_up >= DEAD_AFTER

    async def make_idle(self, why: str) -> None:
        """Before a retry: have the keeper restart a dead or abandoned server (if any)."""
        if self.keeper is None:
            return
        self.recovered.append(why)
        await asyncio.to_thread(self.keeper, why)


_endpoints: dict[str, Endpoint] = {}  # servers this process runs, by URL
_others: dict[tuple[str, int], Endpoint] = {}  # any other server, by URL and slots asked
_registry_lock = threading.Lock()


def _key(base_url: str) -> str:
    return base_url.rstrip("/")


def register_endpoint(base_url: str, *, slots: int, keeper: Keeper | None = None) -> Endpoint:
    """Declare a server this process runs: its slots and the function that keeps it up."""
    with _registry_lock:
        ep = Endpoint(_key(base_url), SlotGate(slots), keeper)
        _endpoints[ep.base_url] = ep
        return ep


def forget_endpoint(base_url: str) -> None:
    with _registry_lock:
        _endpoints.pop(_key(base_url), None)


def endpoint(base_url: str, default_slots: int) -> Endpoint:
    """The process's record of ``base_url``: the registered one (a server this process
    runs), else one per ``default_slots`` (clients configured alike share it)."""
    with _registry_lock:
        url = _key(base_url)
        ep = _endpoints.get(url)
        if ep is None:
            ep = _others.get((url, default_slots))
            if ep is None:
                ep = _others[(url, default_slots)] = Endpoint(url, SlotGate(default_slots))
        return ep


def forget_faults() -> None:
    """Count no request as given up on any endpoint (a new run in a long-lived process)."""
    with _registry_lock:
        for ep in (*_endpoints.values(), *_others.values()):
            ep.given_up = 0
