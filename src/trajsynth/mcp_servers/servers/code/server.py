"""Code interpreter: run Python and edit files in the sandbox work directory (MCP server).

The whole server already runs inside the sandbox, so ``run_python`` is a plain subprocess in the
work directory with a wall-clock limit, under a seccomp guard: the program cannot signal or ptrace
this server (or any process started before it), and the server is not dumpable, so its /proc files
are closed to the program too (``sandboxes._agent.guard_untrusted``). The server is a child
subreaper: when the program ends or its time is up, every process it started is killed, ``setsid``
children included, and only the first ``OUTPUT_CAP`` bytes of each stream are kept, so no program
can outlive its call, hang the server or fill its memory. What the program's own code causes (a
timeout, a full work directory, a kill at the sandbox's memory or process limit) is a tool error the
model sees. State is the files under the work directory, seeded by ``state.py``'s ``STORE``.
Paths must stay inside the work directory.

Run: ``python -m trajsynth.mcp_servers.servers.code`` (stdio).
"""

from __future__ import annotations

import errno
import os
import re
import signal
import sys
import threading
from pathlib import Path
from typing import Annotated

from mcp.server.mcpserver import MCPServer
from pydantic import BaseModel, Field

from trajsynth.mcp_servers.servers._backend import (
    PRIVATE_DIR,
    fail,
    ignored_path,
    read_tool,
    serve_state,
    write_tool,
)
from trajsynth.mcp_servers.servers._stdio import serve_stdio
from trajsynth.mcp_servers.servers.code.state import STORE
from trajsynth.sandboxes._agent import become_subreaper, become_undumpable, run_process

__all__ = ["STORE", "main", "server"]

MAX_FILE_BYTES = 1_000_000
MAX_OUTPUT_CHARS = 8_000
OUTPUT_CAP = 1_000_000  # bytes of each stream read into memory; the rest is read and dropped
# the client's own limit for one call (the environment sets it): a program gets less, so its
# timeout is this server's tool error, not the client's "no answer" (an infra fault)
TOOL_TIMEOUT_ENV = "TRAJSYNTH_TOOL_TIMEOUT_S"
_CALL_MARGIN_S = 3.0
_RUN_LOCK = threading.Lock()  # one program at a time: after it, every descendant is killed
_TIMING = re.compile(r" in \d+(\.\d+)?s\b")


server = MCPServer(
    name="code",
    instructions=(
        "A Python interpreter and a project work directory. Paths are relative to the work "
        "directory; there is no network."
    ),
)
serve_state(server, STORE)

# ---------------------------------------------------------------- output models


class RunResult(BaseModel):
    exit_code: int = Field(description="Process exit status (0 = success)")
    stdout: str = Field(description="What the program printed (cut at 8000 characters)")
    stderr: str = Field(description="Warnings the program wrote to stderr")


class FileInfo(BaseModel):
    path: str = Field(description="Path relative to the work directory")
    size: int = Field(description="Size in bytes")


class FileList(BaseModel):
    directory: str = Field(description="Directory listed")
    files: list[FileInfo] = Field(description="Files under it, recursively, by path")


class FileContent(BaseModel):
    path: str = Field(description="Path relative to the work directory")
    size: int = Field(description="Size in bytes")
    content: str = Field(description="The file's text")


class WriteResult(BaseModel):
    path: str = Field(description="Path written, relative to the work directory")
    size: int = Field(description="Bytes written")
    created: bool = Field(description="True if the file did not exist before")


class DeleteResult(BaseModel):
    path: str = Field(description="Path deleted")
    deleted: bool = Field(description="Always true on success")


class TestReport(BaseModel):
    path: str = Field(description="Test file or directory that ran")
    passed: bool = Field(description="True when every test passed")
    tests_run: int = Field(description="Number of tests run")
    failures: int = Field(description="Tests whose assertions failed")
    errors: int = Field(description="Tests that raised an error")
    failed_tests: list[str] = Field(description="Names of failed or erroring tests")
    output: str = Field(description="The test runner's report (timings removed)")


# ---------------------------------------------------------------- helpers

Path_ = Annotated[
    str, Field(description="Path relative to the work directory, e.g. 'inventory.py'")
]


def _root() -> Path:
    return STORE.ensure().resolve()


def _resolve(path: str, *, root: Path) -> Path:
    if not path.strip():
        raise fail("path is empty")
    if "\x00" in path:
        raise fail("path contains a NUL character")
    target = (root / path.strip()).resolve()
    try:
        rel = target.relative_to(root)
    except ValueError:
        raise fail(f"path '{path}' is outside the work directory") from None
    if rel.parts and rel.parts[0] == PRIVATE_DIR:
        raise fail(f"path '{path}' is reserved")
    return target


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _clip(text: str) -> str:
    if len(text) <= MAX_OUTPUT_CHARS:
        return text
    return text[:MAX_OUTPUT_CHARS] + f"\n... [{len(text) - MAX_OUTPUT_CHARS} more characters cut]"


def _time_limit(asked: float) -> float:
    """``asked``, but never past the caller's own limit for the whole call."""
    try:
        budget = float(os.environ.get(TOOL_TIMEOUT_ENV, ""))
    except ValueError:
        return asked
    return max(0.5, min(asked, budget - _CALL_MARGIN_S))


def _run(argv: list[str], *, root: Path, timeout_s: float) -> tuple[int, str, str]:
    """Run argv in the work directory; when it ends or times out, kill all it started."""
    code, out, err, _ = _run_counted(argv, root=root, timeout_s=timeout_s, cap=OUTPUT_CAP)
    return code, out, err


def _run_counted(
    argv: list[str], *, root: Path, timeout_s: float, cap: int
) -> tuple[int, str, str, tuple[int, int]]:
    """``_run`` with the output cap given, and the bytes each stream wrote in all."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(root)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["PYTHONHASHSEED"] = "0"
    limit = _time_limit(timeout_s)
    with _RUN_LOCK:
        res = run_process(
            argv,
            stdin=None,
            timeout=limit,
            env=env,
            cwd=str(root),
            cap=cap,
            own_tree=True,
            guarded=True,  # it cannot signal or trace this server (sandboxes._agent)
        )
    if res["timed_out"]:
        raise fail(f"timed out after {limit:g}s; the program and all it started were killed")
    out = res["stdout"].decode("utf-8", errors="replace")
    err = res["stderr"].decode("utf-8", errors="replace")
    code = res["exit_code"]
    if code < 0:
        name = signal.Signals(-code).name if -code in signal.valid_signals() else str(-code)
        why = " (the sandbox's memory, process or CPU limit)" if code == -signal.SIGKILL else ""
        err = f"{err}\nkilled by {name}{why}".lstrip()
    return code, out, err, (res["stdout_total"], res["stderr_total"])


# ---------------------------------------------------------------- tools


@server.tool(annotations=write_tool("Run Python", destructive=True))
def run_python(
    source: Annotated[str, Field(description="Python source code to run as a script")],
    timeout_s: Annotated[
        float, Field(description="Wall-clock limit in seconds (1-120)", ge=1, le=120)
    ] = 10,
) -> RunResult:
    """Run a Python script in the work directory (it may read and write files there)."""
    root = _root()
    if "\x00" in source:
        raise fail("source contains a NUL character")
    if not _encodable(source):
        raise fail("source is not valid Unicode text (a lone surrogate)")
    code, out, err = _run([sys.executable, "-c", source], root=root, timeout_s=timeout_s)
    if code != 0:
        tail = err.strip()[-MAX_OUTPUT_CHARS:]
        shown = f"\nstdout:\n{_clip(out)}" if out.strip() else ""
        raise fail(f"exit code {code}\n{tail}{shown}")
    return RunResult(exit_code=code, stdout=_clip(out), stderr=_clip(err))


@server.tool(annotations=write_tool("Write file", idempotent=True))
def write_file(
    path: Path_,
    content: Annotated[str, Field(description="Full new text of the file")],
) -> WriteResult:
    """Create or overwrite a text file (parent directories are created)."""
    root = _root()
    target = _resolve(path, root=root)
    if target.is_dir():
        raise fail(f"'{path}' is a directory")
    if not _encodable(content):
        raise fail("content is not valid Unicode text (a lone surrogate)")
    data = content.encode("utf-8")
    if len(data) > MAX_FILE_BYTES:
        raise fail(f"content is {len(data)} bytes; the limit is {MAX_FILE_BYTES}")
    created = not target.exists()
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise fail(f"cannot write '{path}': the work directory is full") from None
        raise fail(f"cannot write '{path}': {exc.strerror}") from None
    return WriteResult(path=target.relative_to(root).as_posix(), size=len(data), created=created)


@server.tool(annotations=read_tool("Read file"))
def read_file(path: Path_) -> FileContent:
    """Read a text file."""
    root = _root()
    target = _resolve(path, root=root)
    if target.is_dir():
        raise fail(f"'{path}' is a directory")
    if not target.is_file():
        raise fail(f"file '{path}' not found")
    data = target.read_bytes()
    if len(data) > MAX_FILE_BYTES:
        raise fail(f"file '{path}' is {len(data)} bytes; the limit is {MAX_FILE_BYTES}")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise fail(f"file '{path}' is not UTF-8 text") from None
    return FileContent(path=target.relative_to(root).as_posix(), size=len(data), content=text)


@server.tool(annotations=read_tool("List files"))
def list_files(
    directory: Annotated[str, Field(description="Directory to list, relative; '.' for all")] = ".",
) -> FileList:
    """List the files under a directory of the work directory, recursively."""
    root = _root()
    target = _resolve(directory, root=root)
    if not target.is_dir():
        raise fail(f"directory '{directory}' not found")
    files = [
        FileInfo(path=p.relative_to(root).as_posix(), size=p.stat().st_size)
        for p in sorted(target.rglob("*"))
        if p.is_file() and not ignored_path(p.relative_to(root))
    ]
    return FileList(directory=directory, files=files)


@server.tool(annotations=write_tool("Delete file", destructive=True, idempotent=False))
def delete_file(path: Path_) -> DeleteResult:
    """Delete one file."""
    root = _root()
    target = _resolve(path, root=root)
    if target.is_dir():
        raise fail(f"'{path}' is a directory; only files can be deleted")
    if not target.is_file():
        raise fail(f"file '{path}' not found")
    target.unlink()
    return DeleteResult(path=target.relative_to(root).as_posix(), deleted=True)


_TEST_LINE = re.compile(r"^(\w+) \(([\w.]+)\) \.\.\. (ok|FAIL|ERROR|skipped.*|expected failure)$")


@server.tool(annotations=read_tool("Run tests"))
def run_tests(
    path: Annotated[
        str, Field(description="Test file or directory, relative, e.g. 'tests'")
    ] = "tests",
    timeout_s: Annotated[
        float, Field(description="Wall-clock limit in seconds (1-300)", ge=1, le=300)
    ] = 60,
) -> TestReport:
    """Run unittest tests (test*.py) in a file or directory and report what failed."""
    root = _root()
    target = _resolve(path, root=root)
    if target.is_dir():
        start, pattern = target, "test*.py"
    elif target.is_file():
        start, pattern = target.parent, target.name
    else:
        raise fail(f"test path '{path}' not found")
    argv = [sys.executable, "-m", "unittest", "discover", "-v", "-s", str(start), "-p", pattern]
    _, out, err = _run(argv, root=root, timeout_s=timeout_s)
    report = _TIMING.sub("", err + out).replace(str(root) + os.sep, "")
    ran = re.search(r"^Ran (\d+) tests?", report, re.MULTILINE)
    tests_run = int(ran.group(1)) if ran else 0
    if tests_run == 0:
        raise fail(f"no tests found in '{path}'\n{_clip(report.strip())}")
    failed = [
        f"{m.group(2)}"
        for m in map(_TEST_LINE.match, report.splitlines())
        if m and m.group(3) in ("FAIL", "ERROR")
    ]
    counts = dict.fromkeys(("failures", "errors"), 0)
    summary = re.search(r"^FAILED \((.*)\)$", report, re.MULTILINE)
    if summary:
        for part in summary.group(1).split(","):
            key, _, value = part.strip().partition("=")
            if key in counts:
                counts[key] = int(value)
    return TestReport(
        path=target.relative_to(root).as_posix(),
        passed=summary is None and re.search(r"^OK\b", report, re.MULTILINE) is not None,
        tests_run=tests_run,
        failures=counts["failures"],
        errors=counts["errors"],
        failed_tests=sorted(failed),
        output=_clip(report.strip()),
    )


def run_command(argv: list[str], timeout_s: float, cap: int = OUTPUT_CAP) -> int:
    """Run ``argv`` in the work directory exactly as ``run_python`` runs a program (same
    runner, limits and kill of everything it started; output kept up to ``cap`` bytes a
    stream, ``OUTPUT_CAP`` as the tool keeps); print its output, a line on stderr for each
    stream that was cut (how much was dropped), and return its exit status (124: timed
    out). ``synth sandbox run`` calls this in a sandbox."""
    become_subreaper()
    root = Path(os.environ.get("TRAJSYNTH_WORKDIR") or os.getcwd()).resolve()
    try:
        code, out, err, totals = _run_counted(argv, root=root, timeout_s=timeout_s, cap=cap)
    except Exception as exc:  # noqa: BLE001 - the ToolError the model would see
        sys.stderr.write(f"{exc}\n")
        return 124
    sys.stdout.write(out)
    sys.stderr.write(err)
    for stream, total in zip(("stdout", "stderr"), totals, strict=True):
        if total > cap:
            sys.stderr.write(
                f"\n[synth sandbox run: {stream} cut at {cap:,} bytes; {total - cap:,} more "
                f"bytes of {total:,} dropped (--max-output sets the limit)]\n"
            )
    return code if code >= 0 else 128 - code


def main() -> None:
    """Seed the work directory if needed, then serve over stdio.

    ``python -m trajsynth.mcp_servers.servers.code exec TIMEOUT_S [CAP_BYTES] -- CMD ...``
    instead runs one command as ``run_python`` would (``run_command``).
    """
    if len(sys.argv) > 3 and sys.argv[1] == "exec" and "--" in sys.argv[3:5]:
        split = sys.argv.index("--", 3)
        cap = int(sys.argv[3]) if split == 4 else OUTPUT_CAP
        sys.exit(run_command(sys.argv[split + 1 :], float(sys.argv[2]), cap))
    become_subreaper()
    become_undumpable()  # the programs it runs cannot trace it or read its /proc files
    STORE.ensure()
    serve_stdio(server)


if __name__ == "__main__":
    main()
