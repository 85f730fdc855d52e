"""The process runner and work-directory helpers both sandboxes share (``sandboxes._agent``)."""

from __future__ import annotations

import io
import json
import os
import signal
import struct
import sys
import tarfile
from pathlib import Path

import pytest

from trajsynth.sandboxes import _agent


def run(argv: list[str], cwd: Path, **kw) -> dict:
    kw.setdefault("stdin", None)
    kw.setdefault("timeout", 10.0)
    return _agent.run_process(argv, env=None, cwd=str(cwd), **kw)


def test_run_process_collects_output_and_exit_code(tmp_path: Path) -> None:
    res = run(["sh", "-c", "cat; echo err >&2; exit 7"], tmp_path, stdin=b"abc" * 100_000)
    assert res["exit_code"] == 7
    assert res["stdout"] == b"abc" * 100_000  # larger than a pipe buffer, both ways
    assert res["stderr"] == b"err\n"
    assert res["timed_out"] is False


def test_run_process_timeout_kills_with_sigkill(tmp_path: Path) -> None:
    res = run(["sleep", "30"], tmp_path, timeout=0.3)
    assert res["timed_out"] is True
    assert res["exit_code"] == -signal.SIGKILL
    assert res["duration_s"] < 3


def test_run_process_caps_output(tmp_path: Path) -> None:
    res = run(["sh", "-c", "head -c 1000000 /dev/zero"], tmp_path, cap=1000)
    assert res["exit_code"] == 0
    assert len(res["stdout"]) == 1000


def test_run_process_unknown_program_is_127(tmp_path: Path) -> None:
    res = run(["definitely-not-a-program"], tmp_path)
    assert res["exit_code"] == 127
    assert b"definitely-not-a-program" in res["stderr"]


def test_run_process_returns_when_a_background_child_keeps_the_pipe(tmp_path: Path) -> None:
    res = run(["sh", "-c", "sleep 321.5 & echo done"], tmp_path, timeout=10)
    assert res["stdout"] == b"done\n"
    assert res["timed_out"] is False
    assert res["duration_s"] < 3


def test_frame_round_trip() -> None:
    frame = _agent.encode_frame({"op": "put", "path": "a"}, b"\x00payload")
    hlen, plen = struct.unpack(">II", frame[:8])
    assert json.loads(frame[8 : 8 + hlen]) == {"op": "put", "path": "a"}
    assert frame[8 + hlen :] == b"\x00payload"
    assert plen == 8


def test_resolve_in_refuses_escapes_and_links(tmp_path: Path) -> None:
    root = tmp_path / "work"
    root.mkdir()
    assert _agent.resolve_in(str(root), "a/b") == str(root / "a/b")
    assert _agent.resolve_in(str(root), str(root / "c")) == str(root / "c")
    for bad in ("../x", "/etc/passwd", "a/../../x"):
        with pytest.raises(ValueError):
            _agent.resolve_in(str(root), bad)
    os.symlink("/etc", root / "etc-link")
    with pytest.raises(ValueError):
        _agent.resolve_in(str(root), "etc-link/passwd")


def test_tar_then_untar_restores_exactly(tmp_path: Path) -> None:
    root = tmp_path / "work"
    (root / "d").mkdir(parents=True)
    (root / "d" / "f.txt").write_bytes(b"one")
    (root / "top.bin").write_bytes(bytes(range(256)))
    os.symlink("d/f.txt", root / "link")
    data = _agent.tar_dir(str(root))
    (root / "d" / "f.txt").write_bytes(b"two")
    (root / "extra").write_text("x")
    os.unlink(root / "top.bin")
    _agent.untar_into(str(root), data)
    assert sorted(os.listdir(root)) == ["d", "link", "top.bin"]
    assert (root / "d" / "f.txt").read_bytes() == b"one"
    assert (root / "top.bin").read_bytes() == bytes(range(256))
    assert os.readlink(root / "link") == "d/f.txt"


def test_clear_keeps_mount_points_and_removes_everything_else(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """/tmp with an outside server's venv mounted read-only at /tmp/venvs/time: the mount and
    the folder above it stay, the last episode's files go (whatever order scandir gives)."""
    root = tmp_path / "tmp"
    mounted = root / "venvs" / "time"
    (mounted / "bin").mkdir(parents=True)
    (mounted / "bin" / "mcp-server-time").write_text("#!/bin/sh")
    (root / "venvs" / "stray.txt").write_text("x")
    (root / "memory.jsonl").write_text('{"name": "notes"}')
    (root / "cache" / "deep").mkdir(parents=True)
    (root / "cache" / "deep" / "f").write_text("x")
    os.symlink(str(mounted), root / "link")
    real_ismount = os.path.ismount
    monkeypatch.setattr(os.path, "ismount", lambda p: str(p) == str(mounted) or real_ismount(p))
    _agent.clear_dir(str(root))
    assert sorted(os.listdir(root)) == ["venvs"]
    assert os.listdir(root / "venvs") == ["time"]
    assert (mounted / "bin" / "mcp-server-time").read_text() == "#!/bin/sh"


def _tar_with(name: str) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo(name)
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))
    return buf.getvalue()


@pytest.mark.parametrize("name", ["../evil", "/abs/evil", "a/../../evil"])
def test_untar_refuses_paths_outside(tmp_path: Path, name: str) -> None:
    root = tmp_path / "work"
    root.mkdir()
    with pytest.raises(ValueError):
        _agent.untar_into(str(root), _tar_with(name))
    assert not (tmp_path / "evil").exists()


def test_untar_does_not_write_through_a_link(tmp_path: Path) -> None:
    root = tmp_path / "work"
    root.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        link = tarfile.TarInfo("ln")
        link.type = tarfile.SYMTYPE
        link.linkname = str(outside)
        tar.addfile(link)
        info = tarfile.TarInfo("ln/evil")
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))
    with pytest.raises(ValueError):
        _agent.untar_into(str(root), buf.getvalue())
    assert list(outside.iterdir()) == []


def test_agent_source_imports_only_the_stdlib() -> None:
    """The agent runs in the image with ``python3 -I -S``: no trajsynth, no third party."""
    source = Path(_agent.__file__).read_text()
    imported = {
        line.split()[1].split(".")[0]
        for line in source.splitlines()
        if line.startswith(("import ", "from "))
    }
    assert imported <= set(sys.stdlib_module_names) | {"__future__"}
