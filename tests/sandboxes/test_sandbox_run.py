"""`synth sandbox run`, the host checks behind `synth doctor`, and the per-sandbox cgroup."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from trajsynth.cli.settings import Settings
from trajsynth.sandboxes import LocalSandbox
from trajsynth.sandboxes.cgroups import create_cgroup, probe_cgroups
from trajsynth.sandboxes.local_sandbox import unenforced_limits
from trajsynth.schemas import SandboxError, SandboxLimits


def _synth(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "trajsynth.cli", *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.fixture(params=["local", pytest.param("docker", marks=pytest.mark.docker)])
def kind(request: pytest.FixtureRequest) -> str:
    if request.param == "local" and unenforced_limits():
        pytest.skip(f"LocalSandbox cannot enforce {', '.join(unenforced_limits())} here")
    return request.param


@pytest.mark.slow
def test_sandbox_run_prints_output_and_exits_with_the_status(kind: str, tmp_path: Path) -> None:
    script = "echo out; echo err >&2; cat /etc/shadow 2>/dev/null || echo no-shadow; exit 3"
    proc = _synth(tmp_path, "sandbox", "run", "--kind", kind, "--", "sh", "-c", script)
    assert proc.returncode == 3, proc.stderr
    assert proc.stdout == "out\nno-shadow\n"
    assert "err" in proc.stderr


@pytest.mark.slow
def test_sandbox_run_says_when_it_cut_output_and_by_how_much(kind: str, tmp_path: Path) -> None:
    script = "import sys; sys.stdout.write('x' * 1_500_000); sys.stderr.write('e' * 10)"
    proc = _synth(tmp_path, "sandbox", "run", "--kind", kind, "--", "python3", "-c", script)
    assert proc.returncode == 0, proc.stderr
    assert len(proc.stdout) == 1_000_000
    assert "stdout cut at 1,000,000 bytes; 500,000 more bytes of 1,500,000 dropped" in proc.stderr
    assert "stderr cut" not in proc.stderr
    proc = _synth(
        tmp_path, "sandbox", "run", "--kind", kind, "--max-output", "2000000",
        "--", "python3", "-c", script,
    )  # fmt: skip
    assert proc.returncode == 0 and len(proc.stdout) == 1_500_000
    assert "cut at" not in proc.stderr


@pytest.mark.slow
def test_sandbox_run_times_out_like_the_code_tool(kind: str, tmp_path: Path) -> None:
    marker = "303.5"
    script = f"setsid sleep {marker} & sleep {marker}"
    proc = _synth(
        tmp_path, "sandbox", "run", "--kind", kind, "--timeout", "1", "--", "sh", "-c", script
    )
    assert proc.returncode == 124
    assert "timed out after 1s; the program and all it started were killed" in proc.stderr
    leftovers = subprocess.run(["pgrep", "-f", f"sleep {marker}"], capture_output=True, text=True)
    assert leftovers.stdout == ""


@pytest.mark.slow
def test_sandbox_run_without_a_command_is_one_clear_error(tmp_path: Path) -> None:
    proc = _synth(tmp_path, "sandbox", "run", "--kind", "local")
    assert proc.returncode == 2
    assert "no command" in proc.stderr and "Traceback" not in proc.stderr


def test_doctor_names_each_limit_the_host_cannot_enforce(monkeypatch: pytest.MonkeyPatch) -> None:
    from trajsynth.cli import doctor
    from trajsynth.sandboxes import local_sandbox

    enforced = doctor._local_sandbox(Settings())
    assert enforced[0] is (not unenforced_limits())
    missing = {"memory (whole sandbox)": "no cgroup", "work-dir size": "not root"}
    monkeypatch.setattr(local_sandbox, "unenforced_limits", lambda: missing)
    ok, detail = doctor._local_sandbox(Settings())
    assert not ok and "memory (whole sandbox): no cgroup" in detail and "work-dir size" in detail
    ok, detail = doctor._local_sandbox(
        Settings.model_validate({"sandbox": {"allow_unsafe_local_sandbox": True}})
    )
    assert ok and detail.startswith("UNSAFE")


def test_local_sandbox_refuses_what_it_cannot_enforce(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from trajsynth.sandboxes import local_sandbox

    monkeypatch.setattr(local_sandbox, "unenforced_limits", lambda: {"pids (whole sandbox)": "x"})
    sb = LocalSandbox(SandboxLimits(), root=tmp_path)
    with pytest.raises(SandboxError, match=r"pids \(whole sandbox\).*allow_unsafe_local_sandbox"):
        sb.start()
    assert list(tmp_path.iterdir()) == []


def test_cgroup_limits_and_kill() -> None:
    if probe_cgroups() is not None:
        pytest.skip(f"no cgroup here: {probe_cgroups()}")
    group = create_cgroup(64 * 1024 * 1024, 16)
    try:
        memory = [d / n for d in group.dirs for n in ("memory.max", "memory.limit_in_bytes")]
        assert [p.read_text().strip() for p in memory if p.exists()] == [str(64 << 20)]
        assert [
            (d / "pids.max").read_text().strip() for d in group.dirs if (d / "pids.max").exists()
        ] == ["16"]

        def join() -> None:
            for path in group.procs_files:
                Path(path).write_text(str(os.getpid()))

        proc = subprocess.Popen(["sleep", "304.5"], preexec_fn=join)
        assert proc.pid in group.pids()  # Popen returns after the exec, so it has joined
        group.kill()
        assert proc.wait(timeout=10) == -signal.SIGKILL
        assert group.pids() == []
    finally:
        group.remove()
    assert not any(d.exists() for d in group.dirs)


@pytest.mark.slow
def test_what_a_killed_owner_left_is_reaped_at_the_next_start(tmp_path: Path) -> None:
    if unenforced_limits():
        pytest.skip(f"LocalSandbox cannot enforce {', '.join(unenforced_limits())} here")
    from trajsynth.sandboxes import local_sandbox

    owner = (
        "import json, sys, time\n"
        "from trajsynth.sandboxes import LocalSandbox\n"
        "sb = LocalSandbox(root=__import__('pathlib').Path(sys.argv[1]))\n"
        "sb.start()\n"
        "print(json.dumps([sb.workdir, [str(d) for d in sb._cgroup.dirs]]), flush=True)\n"
        "time.sleep(300)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", owner, str(tmp_path)], stdout=subprocess.PIPE, text=True
    )
    workdir, cgroup_dirs = json.loads(proc.stdout.readline())
    proc.kill()  # SIGKILL: close() never runs
    proc.wait()
    assert any(line.split()[1] == workdir for line in Path("/proc/mounts").read_text().splitlines())
    assert all(Path(d).exists() for d in cgroup_dirs)
    local_sandbox._reap_stale_once.cache_clear()
    local_sandbox._reap_stale_once()
    assert not any(
        line.split()[1] == workdir for line in Path("/proc/mounts").read_text().splitlines()
    )
    assert not any(Path(d).exists() for d in cgroup_dirs)
    assert not Path(workdir).parent.exists()
