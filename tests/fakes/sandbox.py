"""A strict scripted ``Sandbox`` for tests of code that drives one (docs/style.md §7).

Every ``exec`` takes the next step of the script, in order. A step says what argv it expects
(the exact list, a predicate, or ``None`` for any) and what happens: an ``ExecResult``, an
exception to raise (an infra fault such as ``SandboxError``), or a function of the call and
the sandbox (to write the files a real command would). An exec past the end of the script, or
one whose argv does not match, raises ``UnexpectedSandboxCall``; ``assert_consumed()`` raises
``UnconsumedSandboxSteps`` when steps (or queued faults) were left unused.

Files are real: the work directory is a real folder, so ``put_file``, ``get_file``,
``snapshot`` and ``restore`` behave like the real sandboxes, and ``stdio_command`` gives a host
argv (``env TRAJSYNTH_WORKDIR=... argv``) that runs a server on this machine against it.

    fake = FakeSandbox([
        expect(["python3", "-m", "x", "--init"], ok('{"state_hash": "h0"}')),
        expect(lambda argv: argv[0] == "python3", SandboxError("scripted: container died")),
    ], workdir=tmp_path)
    with fake:
        ...
    fake.assert_consumed()
    assert fake.calls[0].env["TRAJSYNTH_WORKDIR"] == fake.workdir
"""

from __future__ import annotations

import io
import shutil
import sys
import tarfile
import tempfile
import uuid
import weakref
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from trajsynth.sandboxes.base import WORKDIR_ENV, Sandbox
from trajsynth.schemas import ExecResult, SandboxError, SandboxLimits, SnapshotHandle

__all__ = [
    "ExecCall",
    "Expect",
    "FakeSandbox",
    "UnconsumedSandboxSteps",
    "UnexpectedSandboxCall",
    "expect",
    "failed",
    "ok",
    "timed_out",
]


class UnexpectedSandboxCall(AssertionError):
    """The code under test called the sandbox in a way the script did not allow."""


class UnconsumedSandboxSteps(AssertionError):
    """The test ended with scripted steps or faults left unused."""


@dataclass(frozen=True)
class ExecCall:
    """One ``exec`` as the code under test made it (``env`` includes ``TRAJSYNTH_WORKDIR``)."""

    argv: tuple[str, ...]
    stdin: bytes | None
    timeout: float | None
    env: dict[str, str]
    cwd: str | None


Outcome = ExecResult | BaseException | Callable[[ExecCall, "FakeSandbox"], ExecResult]
ArgvMatch = Sequence[str] | Callable[[Sequence[str]], bool] | None


@dataclass(frozen=True)
class Expect:
    argv: ArgvMatch
    outcome: Outcome

    def matches(self, argv: Sequence[str]) -> bool:
        if self.argv is None:
            return True
        if callable(self.argv):
            return bool(self.argv(argv))
        return list(self.argv) == list(argv)


def expect(argv: ArgvMatch, outcome: Outcome) -> Expect:
    """A step: an exec whose argv matches ``argv`` gets ``outcome``."""
    return Expect(argv, outcome)


def ok(stdout: str = "", stderr: str = "", duration_s: float = 0.01) -> ExecResult:
    return ExecResult(exit_code=0, stdout=stdout, stderr=stderr, duration_s=duration_s)


def failed(exit_code: int = 1, stderr: str = "", stdout: str = "") -> ExecResult:
    return ExecResult(exit_code=exit_code, stdout=stdout, stderr=stderr, duration_s=0.01)


def timed_out(after_s: float = 30.0, stdout: str = "", stderr: str = "") -> ExecResult:
    """What a real sandbox returns for a command it killed at its timeout."""
    return ExecResult(
        exit_code=-9, stdout=stdout, stderr=stderr, duration_s=after_s, timed_out=True
    )


_FAULTABLE = ("start", "put_file", "get_file", "snapshot", "restore", "stdio_command")


class FakeSandbox(Sandbox):
    """The scripted sandbox. Pass ``workdir`` (e.g. ``tmp_path``) or get a temporary one.

    A bare ``ExecResult`` or exception in the script is a step that accepts any argv.
    """

    def __init__(
        self,
        script: Sequence[Expect | ExecResult | BaseException] = (),
        *,
        workdir: Path | None = None,
        limits: SandboxLimits | None = None,
        python: str = sys.executable,
    ) -> None:
        self._steps: deque[Expect] = deque(
            s if isinstance(s, Expect) else Expect(None, s) for s in script
        )
        root = workdir or Path(tempfile.mkdtemp(prefix="fake-sandbox-"))
        root.mkdir(parents=True, exist_ok=True)
        # a temporary directory goes with the sandbox, also when a test never closes it
        self._remove_dir = (
            weakref.finalize(self, shutil.rmtree, str(root), True) if workdir is None else None
        )
        self.workdir = str(root)
        self.limits = limits or SandboxLimits()
        self.python = python
        self.sandbox_id = f"fake-{uuid.uuid4().hex[:8]}"
        self.calls: list[ExecCall] = []
        self.stdio_calls: list[list[str]] = []
        self.restored: list[str] = []
        self.started = False
        self.closed = False
        self._faults: dict[str, deque[BaseException]] = {op: deque() for op in _FAULTABLE}
        self._snapshots: dict[str, bytes] = {}

    # -- scripting -------------------------------------------------------------------------
    def fault(self, op: str, exc: BaseException) -> FakeSandbox:
        """Make the next ``op`` (one of start, put_file, get_file, snapshot, restore,
        stdio_command) raise ``exc`` once."""
        if op not in self._faults:
            raise ValueError(f"cannot fault {op!r}; one of {', '.join(_FAULTABLE)}")
        self._faults[op].append(exc)
        return self

    def assert_consumed(self) -> None:
        left = [f"exec {step.argv!r}" for step in self._steps]
        left += [f"{op} fault {exc!r}" for op, q in self._faults.items() for exc in q]
        if left:
            raise UnconsumedSandboxSteps(f"{len(left)} scripted step(s) unused: {left}")

    def _maybe_fault(self, op: str) -> None:
        if self._faults[op]:
            raise self._faults[op].popleft()

    def _live(self, op: str) -> None:
        if self.closed:
            raise UnexpectedSandboxCall(f"{op} on a closed sandbox")
        if not self.started:
            raise UnexpectedSandboxCall(f"{op} before start()")

    # -- the Sandbox interface -------------------------------------------------------------
    def start(self) -> None:
        if self.closed:
            raise UnexpectedSandboxCall("start() on a closed sandbox")
        self._maybe_fault("start")
        self.started = True

    def exec(
        self,
        argv: Sequence[str],
        *,
        stdin: bytes | str | None = None,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
    ) -> ExecResult:
        self._live("exec")
        data = stdin.encode() if isinstance(stdin, str) else stdin
        call = ExecCall(tuple(argv), data, timeout, {WORKDIR_ENV: self.workdir, **(env or {})}, cwd)
        self.calls.append(call)
        if not self._steps:
            raise UnexpectedSandboxCall(
                f"exec #{len(self.calls)} {list(argv)!r} is past the end of the script"
            )
        step = self._steps.popleft()
        if not step.matches(argv):
            raise UnexpectedSandboxCall(
                f"exec #{len(self.calls)} {list(argv)!r} does not match the script's "
                f"next step {step.argv!r}"
            )
        outcome = step.outcome
        if isinstance(outcome, BaseException):
            raise outcome
        if isinstance(outcome, ExecResult):
            return outcome
        return outcome(call, self)

    def _path(self, path: str) -> Path:
        root = Path(self.workdir).resolve()
        full = (root / path).resolve()
        if full != root and root not in full.parents:
            raise ValueError(f"path {path!r} is outside the work directory {self.workdir}")
        return full

    def put_file(self, path: str, data: bytes) -> None:
        self._live("put_file")
        self._maybe_fault("put_file")
        full = self._path(path)
        full.parent.mkdir(parents=True, exist_ok=True)
        full.write_bytes(data)

    def get_file(self, path: str) -> bytes:
        self._live("get_file")
        self._maybe_fault("get_file")
        return self._path(path).read_bytes()

    def snapshot(self) -> SnapshotHandle:
        self._live("snapshot")
        self._maybe_fault("snapshot")
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            for entry in sorted(Path(self.workdir).iterdir()):
                tar.add(entry, arcname=entry.name)
        snapshot_id = f"snap-{len(self._snapshots)}"
        self._snapshots[snapshot_id] = buf.getvalue()
        return SnapshotHandle(snapshot_id=snapshot_id, sandbox_id=self.sandbox_id)

    def restore(self, handle: SnapshotHandle) -> None:
        self._live("restore")
        self._maybe_fault("restore")
        if handle.sandbox_id != self.sandbox_id or handle.snapshot_id not in self._snapshots:
            raise SandboxError(f"no snapshot {handle.snapshot_id} in {self.sandbox_id}")
        root = Path(self.workdir)
        for entry in root.iterdir():
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
        with tarfile.open(fileobj=io.BytesIO(self._snapshots[handle.snapshot_id])) as tar:
            tar.extractall(root, filter="data")
        self.restored.append(handle.snapshot_id)

    def discard(self, handle: SnapshotHandle) -> None:
        self._snapshots.pop(handle.snapshot_id, None)

    def stdio_command(
        self, argv: Sequence[str], *, env: Mapping[str, str] | None = None
    ) -> list[str]:
        self._live("stdio_command")
        self._maybe_fault("stdio_command")
        assignments = [f"{k}={v}" for k, v in {WORKDIR_ENV: self.workdir, **(env or {})}.items()]
        command = ["env", *assignments, *argv]
        self.stdio_calls.append(command)
        return command

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self._remove_dir is not None:
            self._remove_dir()
