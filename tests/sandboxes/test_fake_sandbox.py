"""The scripted fake sandbox fails loudly: past its script, off its script, or left unused."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from fakes.sandbox import (
    ExecCall,
    FakeSandbox,
    UnconsumedSandboxSteps,
    UnexpectedSandboxCall,
    expect,
    failed,
    ok,
    timed_out,
)

from trajsynth.sandboxes import WORKDIR_ENV, Sandbox
from trajsynth.schemas import ExecResult, SandboxError


def test_replays_the_script_in_order_and_records_calls(tmp_path: Path) -> None:
    fake = FakeSandbox(
        [
            expect(["python3", "-m", "state"], ok('{"state_hash": "h0"}')),
            expect(lambda argv: argv[0] == "pytest", failed(1, stderr="1 failed")),
            timed_out(5.0),
        ],
        workdir=tmp_path,
    )
    assert isinstance(fake, Sandbox)
    with fake:
        assert fake.exec(["python3", "-m", "state"]).stdout == '{"state_hash": "h0"}'
        assert fake.exec(["pytest", "-q"], stdin="x", env={"A": "1"}).exit_code == 1
        assert fake.exec(["anything"], timeout=5.0).timed_out
    fake.assert_consumed()
    assert fake.calls[1] == ExecCall(
        ("pytest", "-q"), b"x", None, {WORKDIR_ENV: str(tmp_path), "A": "1"}, None
    )


def test_past_the_script_raises() -> None:
    with FakeSandbox([ok()]) as fake:
        fake.exec(["true"])
        with pytest.raises(UnexpectedSandboxCall, match="past the end"):
            fake.exec(["true"])


def test_off_script_argv_raises() -> None:
    with FakeSandbox([expect(["a"], ok())]) as fake, pytest.raises(UnexpectedSandboxCall):
        fake.exec(["b"])


def test_unused_steps_and_faults_fail_assert_consumed() -> None:
    fake = FakeSandbox([ok(), ok()])
    with fake:
        fake.exec(["x"])
    with pytest.raises(UnconsumedSandboxSteps, match="1 scripted"):
        fake.assert_consumed()
    fake2 = FakeSandbox().fault("snapshot", SandboxError("scripted"))
    with pytest.raises(UnconsumedSandboxSteps, match="snapshot fault"):
        fake2.assert_consumed()


def test_scripted_faults_raise_once() -> None:
    fake = FakeSandbox([SandboxError("container died")])
    fake.fault("restore", SandboxError("restore failed"))
    with fake:
        with pytest.raises(SandboxError, match="container died"):
            fake.exec(["x"])
        handle = fake.snapshot()
        with pytest.raises(SandboxError, match="restore failed"):
            fake.restore(handle)
        fake.restore(handle)  # the fault was used up
    fake.assert_consumed()


def test_use_before_start_or_after_close_raises() -> None:
    fake = FakeSandbox([ok()])
    with pytest.raises(UnexpectedSandboxCall, match="before start"):
        fake.exec(["x"])
    fake.start()
    fake.close()
    with pytest.raises(UnexpectedSandboxCall, match="closed"):
        fake.put_file("a", b"")


def test_files_snapshots_and_step_functions_are_real(tmp_path: Path) -> None:
    def writes_state(call: ExecCall, sb: FakeSandbox) -> ExecResult:
        sb.put_file("state.json", b'{"n": 2}')
        return ok("seeded")

    with FakeSandbox([writes_state], workdir=tmp_path) as fake:
        fake.put_file("state.json", b'{"n": 1}')
        handle = fake.snapshot()
        assert fake.exec(["seed"]).stdout == "seeded"
        assert fake.get_file("state.json") == b'{"n": 2}'
        fake.restore(handle)
        assert (tmp_path / "state.json").read_bytes() == b'{"n": 1}'
        assert fake.restored == [handle.snapshot_id]
        with pytest.raises(ValueError):
            fake.get_file("../outside")
    fake.assert_consumed()


def test_stdio_command_runs_on_the_host_against_the_workdir(tmp_path: Path) -> None:
    with FakeSandbox(workdir=tmp_path) as fake:
        argv = fake.stdio_command(["sh", "-c", 'echo "$TRAJSYNTH_WORKDIR $X"'], env={"X": "1"})
        out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    assert out == f"{tmp_path} 1\n"
    assert fake.stdio_calls == [argv]
