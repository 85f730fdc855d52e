"""The process runner shared by both sandboxes, and the agent that runs inside a container.

This module imports only the standard library, on purpose: ``DockerSandbox`` sends its source
text to the container as ``python3 -I -S -c <source> <workdir>``, so the agent needs nothing from
the image but ``python3`` and no import of ``trajsynth``. There it is the container's main
process (under ``tini``): it reads framed requests on stdin and answers on stdout, which makes an
exec round trip one write and one read on the attach socket instead of a ``docker exec``
(create, start and inspect calls, and a ``runc exec``: about 60 ms on a small machine).

``LocalSandbox`` imports the same ``run_process``, ``tar_dir``, ``untar_into`` and
``resolve_in``, so the two sandboxes kill timed-out commands, cap output and snapshot the work
directory with the same code.

Frame: an 8-byte header (two big-endian u32: header length, payload length), a UTF-8 JSON
header, then the raw payload bytes (stdin, file contents, a tar of the work directory).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import selectors
import signal
import stat
import struct
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable, Iterator

OUTPUT_CAP = 16 * 1024 * 1024  # bytes kept per stream; the rest is read and dropped
_FRAME = struct.Struct(">II")
_KILL_GRACE_S = 2.0


def encode_frame(header: dict, payload: bytes = b"") -> bytes:
    """One frame: lengths, JSON header, payload."""
    head = json.dumps(header, separators=(",", ":")).encode()
    return _FRAME.pack(len(head), len(payload)) + head + payload


def _proc_stats() -> Iterator[tuple[int, list[bytes]]]:
    """(pid, the fields of ``/proc/<pid>/stat`` after the command) for every process /proc
    shows (none without one): state, ppid, pgrp, session, ..."""
    try:
        names = os.listdir("/proc")
    except OSError:
        return
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                stat = fh.read()
        except OSError:
            continue
        yield int(name), stat[stat.rfind(b")") + 2 :].split()


def _session_members(sid: int) -> list[int]:
    """Live (not zombie) pids in session ``sid``, read from /proc (empty without one)."""
    # a zombie is already dead
    return [
        pid
        for pid, fields in _proc_stats()
        if len(fields) > 3 and int(fields[3]) == sid and fields[0] != b"Z"
    ]


def kill_session(sid: int) -> None:
    """SIGKILL the process group and every process left in the session ``sid``.

    A fork bomb keeps forking while it is being killed, so the sweep repeats until the session
    is empty (or a short deadline passes: the pids limit bounds what is left).
    """

    def members() -> list[int]:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(sid, signal.SIGKILL)
        return [pid for pid in _session_members(sid) if pid != os.getpid()]

    _sweep(members)


def _sweep(members: Callable[[], list[int]]) -> set[int]:
    """SIGKILL the pids ``members()`` names, again and again until it names none or a short
    deadline passes (a fork bomb keeps forking while it is being killed); the pids killed."""
    deadline = time.monotonic() + _KILL_GRACE_S
    killed: set[int] = set()
    while True:
        pids = members()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
        if not pids or time.monotonic() > deadline:
            return killed
        time.sleep(0.005)


def _process_table() -> dict[int, tuple[int, bytes]]:
    """pid -> (parent pid, state) for every process this /proc shows."""
    return {pid: (int(fields[1]), fields[0]) for pid, fields in _proc_stats() if len(fields) > 1}


def descendants(root: int) -> list[int]:
    """Live (not zombie) processes under ``root`` in the process tree."""
    table = _process_table()
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    found, stack = [], list(children.get(root, []))
    while stack:
        pid = stack.pop()
        if table[pid][1] != b"Z":
            found.append(pid)
        stack.extend(children.get(pid, []))
    return found


def become_subreaper() -> bool:
    """Make orphans of our descendants our children instead of init's.

    A command that double-forks or calls ``setsid`` leaves its session and process group,
    but not our subtree: with this set, ``kill_descendants`` still finds it.
    """
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        return False


def kill_descendants(root: int | None = None) -> None:
    """SIGKILL every process under ``root`` (default: this process) until none is left, then
    reap the zombies that were reparented to us."""
    root = os.getpid() if root is None else root
    _sweep(lambda: descendants(root))


def reap_orphans() -> None:
    """Collect exit statuses of children we did not start (orphans a subreaper inherits)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def kill_all_but(keep: set[int]) -> int:
    """SIGKILL every process this /proc shows except ``keep`` and pid 1; how many there were.

    Inside a container (its own pid namespace, one user) this is every process an episode
    left, the MCP servers started with ``docker exec`` included.
    """
    killed = _sweep(
        lambda: [
            pid
            for pid, (_, state) in _process_table().items()
            if pid not in keep and pid != 1 and state != b"Z"
        ]
    )
    reap_orphans()
    return len(killed)


def _raise_oom_score() -> None:
    """Run in the child before exec: be the first the OOM killer picks, not the agent."""
    with contextlib.suppress(OSError), open("/proc/self/oom_score_adj", "w") as fh:
        fh.write("1000")


# -- the code tool's guard: no signal to, and no ptrace of, any process started before it --
#
# A program the model wrote runs as the same user as the MCP server that runs it (and, in a
# container, as the agent). Before it execs, ``guard_untrusted`` installs a seccomp filter
# (classic BPF, assembled here: this module may import only the standard library) that
# refuses with EPERM:
#   * kill, tkill, tgkill, rt_sigqueueinfo, rt_tgsigqueueinfo, pidfd_open (and fcntl
#     F_SETOWN) aimed at a pid below the program's own: pids grow, so every process that was
#     there before it (the server, the agent, tini) is below, and its own children are
#     above; a process group is refused likewise, and -1 (every process) always;
#   * ptrace, process_vm_readv/writev, kcmp, pidfd_getfd, pidfd_send_signal, and the fcntl
#     and ioctl requests that name a signal owner by a pointer (F_SETOWN_EX, FIOSETOWN,
#     SIOCSPGRP, TIOCSPGRP), whose target a filter cannot read;
#   * every system call of another ABI (x32, i386 on x86-64), which would skip the table.
# ``become_undumpable`` makes the server itself untraceable and its /proc files (fd, mem,
# environ) closed to the same user, whatever the filter.

_AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
_NR = {
    "x86_64": {
        "kill": 62, "tkill": 200, "tgkill": 234, "rt_sigqueueinfo": 129,
        "rt_tgsigqueueinfo": 297, "pidfd_open": 434, "pidfd_send_signal": 424,
        "pidfd_getfd": 438, "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311,
        "kcmp": 312, "fcntl": 72, "ioctl": 16,
    },
    "aarch64": {
        "kill": 129, "tkill": 130, "tgkill": 131, "rt_sigqueueinfo": 138,
        "rt_tgsigqueueinfo": 240, "pidfd_open": 434, "pidfd_send_signal": 424,
        "pidfd_getfd": 438, "ptrace": 117, "process_vm_readv": 270, "process_vm_writev": 271,
        "kcmp": 272, "fcntl": 25, "ioctl": 29,
    },
}  # fmt: skip
_PID_TARGETED = ("kill", "tkill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo", "pidfd_open")
_REFUSED = (
    "ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd",
    "pidfd_send_signal",
)  # fmt: skip
_F_SETOWN, _F_SETOWN_EX = 8, 15
_OWNER_IOCTLS = (0x8901, 0x8902, 0x5410)  # FIOSETOWN, SIOCSPGRP, TIOCSPGRP
_X32_BIT = 0x40000000
_RET_ALLOW, _RET_EPERM, _RET_KILL = 0x7FFF0000, 0x00050001, 0x80000000
_LD_ABS, _JEQ, _JGE, _JGT, _RET = 0x20, 0x15, 0x35, 0x25, 0x06


def _arg_low(i: int) -> int:
    """Offset of the low 32 bits of argument ``i`` in ``struct seccomp_data`` (little
    endian; the kernel reads a pid_t or an int from exactly those bits)."""
    return 16 + 8 * i


def guard_program(own_pid: int, machine: str | None = None) -> list[tuple[int, int, int, int]]:
    """The filter (``(code, jt, jf, k)`` instructions) for a program whose pid is
    ``own_pid`` (see above); ``ValueError`` on an architecture it has no table for."""
    machine = machine or os.uname().machine
    if machine not in _NR:
        raise ValueError(f"no system call table for {machine}")
    nr = _NR[machine]
    prog: list[tuple] = []  # (code, jt, jf, k); jt/jf may be label names, resolved below
    labels: dict[str, int] = {}

    def at(name: str) -> None:
        labels[name] = len(prog)

    def op(code: int, k: int, jt: object = 0, jf: object = 0) -> None:
        prog.append((code, jt, jf, k))

    op(_LD_ABS, 4)  # arch
    op(_JEQ, _AUDIT_ARCH[machine], 0, "kill")
    op(_LD_ABS, 0)  # nr
    if machine == "x86_64":
        op(_JGE, _X32_BIT, "deny", 0)
    for name in _REFUSED:
        op(_JEQ, nr[name], "deny", 0)
    for name in _PID_TARGETED:
        op(_JEQ, nr[name], "pid_arg0", 0)
    op(_JEQ, nr["fcntl"], "fcntl", 0)
    op(_JEQ, nr["ioctl"], "ioctl", 0)
    op(_RET, _RET_ALLOW)
    at("fcntl")  # (classic BPF jumps only forward: these come before the pid checks)
    op(_LD_ABS, _arg_low(1))
    op(_JEQ, _F_SETOWN_EX, "deny", 0)
    op(_JEQ, _F_SETOWN, "pid_arg2", "allow")
    at("ioctl")
    op(_LD_ABS, _arg_low(1))
    for request in _OWNER_IOCTLS:
        op(_JEQ, request, "deny", 0)
    op(_RET, _RET_ALLOW)
    for arg in (0, 2):  # a pid (or -pgid) in argument 0, or in fcntl's argument 2
        at(f"pid_arg{arg}")
        op(_LD_ABS, _arg_low(arg))
        op(_JEQ, 0, "allow", 0)  # 0: the caller's own process group
        op(_JGE, 0x80000000, f"neg{arg}", 0)
        op(_JGE, own_pid, "allow", "deny")  # a pid: its own or one started after it
        at(f"neg{arg}")
        op(_JGT, (1 << 32) - own_pid, "deny", "allow")  # -pgid: likewise; -1 is refused
    at("allow")
    op(_RET, _RET_ALLOW)
    at("deny")
    op(_RET, _RET_EPERM)
    at("kill")
    op(_RET, _RET_KILL)
    resolved = []
    for i, (code, jt, jf, k) in enumerate(prog):
        jumps = [labels[j] - i - 1 if isinstance(j, str) else j for j in (jt, jf)]
        if not all(0 <= j < 256 for j in jumps):
            raise ValueError(f"jump out of range at {i}")
        resolved.append((code, jumps[0], jumps[1], k))
    return resolved


def guard_untrusted() -> None:
    """Install the guard filter on this process (run in the child before it execs the
    program). Raises ``OSError`` when it cannot: the program must not run unguarded."""
    import ctypes

    program = guard_program(os.getpid())

    class _Filter(ctypes.Structure):
        _fields_ = [
            ("code", ctypes.c_ushort),
            ("jt", ctypes.c_ubyte),
            ("jf", ctypes.c_ubyte),
            ("k", ctypes.c_uint32),
        ]

    class _Prog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_Filter))]

    filters = (_Filter * len(program))(*(_Filter(*ins) for ins in program))
    prog = _Prog(len(program), filters)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p, ctypes.c_ulong,
                           ctypes.c_ulong]  # fmt: skip
    if libc.prctl(38, 1, None, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
        raise OSError(ctypes.get_errno(), "cannot set no_new_privs")
    if libc.prctl(22, 2, ctypes.addressof(prog), 0, 0) != 0:  # PR_SET_SECCOMP, FILTER
        raise OSError(ctypes.get_errno(), "cannot install the seccomp guard")


def become_undumpable() -> bool:
    """PR_SET_DUMPABLE 0: no process of the same user may ptrace this one or open its
    /proc files (fd, mem, environ) without CAP_SYS_PTRACE, which no sandbox grants."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(4, 0, 0, 0, 0) == 0  # PR_SET_DUMPABLE
    except (OSError, AttributeError):
        return False


def _guarded_child() -> None:
    _raise_oom_score()
    guard_untrusted()


def _exited(pid: int) -> bool:
    """Whether ``pid`` has exited, without reaping it (so its pid stays ours)."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def run_process(
    argv: list[str],
    *,
    stdin: bytes | None,
    timeout: float,
    env: dict[str, str] | None,
    cwd: str,
    cap: int = OUTPUT_CAP,
    own_tree: bool = False,
    guarded: bool = False,
) -> dict:
    """Run ``argv`` in a new session; kill the whole session when ``timeout`` seconds pass.

    When the command exits, whatever it left running in its session is killed too, so an
    exec never leaves work behind. ``own_tree``: this process runs nothing else (the agent, a
    subreaper), so every descendant is the command's and is killed too, ``setsid`` children
    included; the command also gets the highest OOM score. ``guarded``: the command is
    the model's program and runs under ``guard_untrusted`` (it cannot signal or trace any
    process that was there before it; it does not run at all when the guard cannot be set).

    Returns ``{"exit_code", "stdout", "stderr", "duration_s", "timed_out", "stdout_total",
    "stderr_total"}`` with the outputs as bytes (each cut to ``cap`` bytes) and the bytes each
    stream wrote in all (more than was kept when it was cut). A negative exit code is the
    signal that killed it; a command that cannot be started gives exit code 127 and the reason
    on stderr.
    """
    start = time.monotonic()
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd=cwd,
            start_new_session=True,
            preexec_fn=_guarded_child if guarded else _raise_oom_score if own_tree else None,
        )
    except (OSError, subprocess.SubprocessError) as exc:  # the guard failed in the child
        return {
            "exit_code": 127,
            "stdout": b"",
            "stderr": f"cannot run {argv[0]!r}: {exc}".encode(),
            "duration_s": time.monotonic() - start,
            "timed_out": False,
            "stdout_total": 0,
            "stderr_total": 0,
        }
    proc_out, proc_err = proc.stdout, proc.stderr
    assert proc_out is not None and proc_err is not None  # both were opened with PIPE above
    out = {proc_out.fileno(): bytearray(), proc_err.fileno(): bytearray()}
    totals = dict.fromkeys(out, 0)
    pending = memoryview(stdin or b"")
    sel = selectors.DefaultSelector()
    sel.register(proc_out, selectors.EVENT_READ)
    sel.register(proc_err, selectors.EVENT_READ)
    if proc.stdin is not None:
        os.set_blocking(proc.stdin.fileno(), False)
        sel.register(proc.stdin, selectors.EVENT_WRITE)
    try:
        pidfd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):
        pidfd = None  # no pidfd: poll for the exit instead
    else:
        sel.register(pidfd, selectors.EVENT_READ)
    streams = 3 if proc.stdin is not None else 2
    deadline = start + timeout
    timed_out = exited = False
    drain_until = None
    while streams or not exited:
        now = time.monotonic()
        if not exited and now >= deadline:
            timed_out = exited = True
            kill_session(proc.pid)
            if own_tree:
                kill_descendants()
            drain_until = time.monotonic() + 0.5
        if drain_until is not None and now >= drain_until:
            break  # an escaped process still holds a pipe; stop reading it
        wait = (drain_until if drain_until is not None else deadline) - now
        if pidfd is None:
            wait = min(wait, 0.02)
        for key, _ in sel.select(max(wait, 0.0)):
            if pidfd is not None and key.fileobj == pidfd:
                sel.unregister(pidfd)
                exited = True
            elif proc.stdin is not None and key.fileobj is proc.stdin:
                try:
                    pending = pending[os.write(key.fd, pending[:65536]) :]
                except BlockingIOError:
                    continue
                except BrokenPipeError:
                    pending = pending[:0]
                if not pending:
                    sel.unregister(proc.stdin)
                    proc.stdin.close()
                    streams -= 1
            else:
                chunk = os.read(key.fd, 65536)
                if not chunk:
                    sel.unregister(key.fileobj)
                    streams -= 1
                    continue
                buf = out[key.fd]
                totals[key.fd] += len(chunk)
                if len(buf) < cap:
                    buf += chunk[: cap - len(buf)]
        if pidfd is None and not exited:
            exited = _exited(proc.pid)
        if exited and drain_until is None:
            # the command is done: kill what it left behind, then read what is still buffered
            kill_session(proc.pid)
            if own_tree:
                kill_descendants()
            drain_until = time.monotonic() + 0.5
    sel.close()
    if pidfd is not None:
        os.close(pidfd)
    code = proc.wait()
    if own_tree:
        reap_orphans()
    stdout, stderr = bytes(out[proc_out.fileno()]), bytes(out[proc_err.fileno()])
    stdout_total, stderr_total = totals[proc_out.fileno()], totals[proc_err.fileno()]
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        if stream is not None and not stream.closed:
            stream.close()
    return {
        "exit_code": code,
        "stdout": stdout,
        "stderr": stderr,
        "duration_s": time.monotonic() - start,
        "timed_out": timed_out,
        "stdout_total": stdout_total,
        "stderr_total": stderr_total,
    }


def resolve_in(root: str, path: str) -> str:
    """``path`` (relative to ``root`` or absolute under it) as a real path inside ``root``.

    Symlinks are followed before the check, so a link the sandboxed code planted cannot lead a
    read or write outside the work directory. Raises ``ValueError`` when it would.
    """
    root_real = os.path.realpath(root)
    full = os.path.realpath(os.path.join(root_real, path))
    if full != root_real and not full.startswith(root_real + os.sep):
        raise ValueError(f"path {path!r} is outside the work directory {root}")
    return full


def tar_dir(root: str) -> bytes:
    """An uncompressed tar of everything under ``root`` (paths relative to it).

    Regular files, directories and symlinks, with their modes and mtimes; no owner names
    (``tarfile.add`` looks each one up in /etc/passwd, which makes it several times slower).
    """
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        stack = [""]
        while stack:
            rel = stack.pop()
            with os.scandir(os.path.join(root, rel)) as it:
                entries = sorted(it, key=lambda e: e.name)
            for entry in entries:
                name = f"{rel}/{entry.name}" if rel else entry.name
                st = entry.stat(follow_symlinks=False)
                info = tarfile.TarInfo(name)
                info.mode = stat.S_IMODE(st.st_mode)
                info.mtime = int(st.st_mtime)
                if stat.S_ISLNK(st.st_mode):
                    info.type = tarfile.SYMTYPE
                    info.linkname = os.readlink(entry.path)
                    tar.addfile(info)
                elif stat.S_ISDIR(st.st_mode):
                    info.type = tarfile.DIRTYPE
                    tar.addfile(info)
                    stack.append(name)
                elif stat.S_ISREG(st.st_mode):
                    with open(entry.path, "rb") as fh:
                        data = fh.read()  # its size now, even if it grew since the stat
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def clear_dir(root: str) -> None:
    """Remove everything under ``root`` and keep ``root`` itself, except mount points.

    An outside server's own files are mounted read-only where they live on the host, which
    may be under ``/tmp`` (``/tmp/venvs/time``): a mount and the folders above it stay, and
    everything else goes. One entry that cannot be removed does not stop the rest: a clear
    that ended at the first read-only mount left the last episode's state (a server's
    ``/tmp/memory.jsonl``) to the next.
    """
    for entry in os.scandir(root):
        try:
            if os.path.ismount(entry.path):
                continue
            if entry.is_dir(follow_symlinks=False):
                clear_dir(entry.path)
                with contextlib.suppress(OSError):  # it holds a mount
                    os.rmdir(entry.path)
            else:
                os.unlink(entry.path)
        except FileNotFoundError:  # a process of the sandbox removed it first
            continue


def writable_scratch(exclude: str) -> list[str]:
    """Every writable in-memory mount this process sees (tmpfs: ``/tmp``, ``/dev/shm``; the
    POSIX message queues of ``/dev/mqueue``) but ``exclude`` (the work directory, restored
    from its snapshot instead): what an episode could leave for the next one to read."""
    try:
        with open("/proc/self/mounts") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return []
    found = []
    for line in lines:
        fields = line.split()
        if len(fields) < 4 or fields[2] not in ("tmpfs", "mqueue"):
            continue
        target = fields[1].replace("\\040", " ")
        if "rw" not in fields[3].split(",") or target == exclude:
            continue
        if os.access(target, os.W_OK) and target not in found:
            found.append(target)
    return found


_IPC_RMID = 0


def clear_sysv_ipc() -> int:
    """Remove every System V shared memory segment, message queue and semaphore set this
    user may remove (the container's IPC namespace outlives an episode); how many."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
    except (OSError, AttributeError):
        return 0
    removed = 0
    for kind, call in (("shm", "shmctl"), ("msg", "msgctl"), ("sem", "semctl")):
        try:
            with open(f"/proc/sysvipc/{kind}") as fh:
                rows = fh.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if len(fields) < 2:
                continue
            ipc_id = int(fields[1])
            args = (ipc_id, 0, _IPC_RMID) if kind == "sem" else (ipc_id, _IPC_RMID, None)
            if getattr(libc, call)(*args) == 0:
                removed += 1
    return removed


def untar_into(root: str, data: bytes) -> None:
    """Make ``root`` hold exactly what the tar ``data`` holds.

    Refuses members that would land outside ``root`` (absolute, ``..``, or under a link).
    """
    clear_dir(root)
    dirs = []
    with tarfile.open(fileobj=io.BytesIO(data), mode="r") as tar:
        for member in tar:
            name = member.name
            if name.startswith("/") or ".." in name.split("/"):
                raise ValueError(f"unsafe path in snapshot: {name!r}")
            parent = resolve_in(root, os.path.dirname(name) or ".")  # no writing through a link
            dest = os.path.join(parent, os.path.basename(name))
            if member.isdir():
                os.makedirs(dest, exist_ok=True)
                dirs.append((dest, member))
            elif member.isfile():
                os.makedirs(parent, exist_ok=True)
                contents = tar.extractfile(member)
                assert contents is not None  # a regular file member always has contents
                with open(dest, "wb") as fh:
                    fh.write(contents.read())
                os.chmod(dest, member.mode)
                os.utime(dest, (member.mtime, member.mtime))
            elif member.issym():
                os.makedirs(parent, exist_ok=True)
                os.symlink(member.linkname, dest)
    for dest, member in reversed(dirs):  # last, so a read-only directory could be filled
        os.chmod(dest, member.mode)
        os.utime(dest, (member.mtime, member.mtime))


def write_file(root: str, path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` under ``root``, making parent directories."""
    full = resolve_in(root, path)
    os.makedirs(os.path.dirname(full), exist_ok=True)
    with open(full, "wb") as fh:
        fh.write(data)


def read_file(root: str, path: str) -> bytes:
    with open(resolve_in(root, path), "rb") as fh:
        return fh.read()


class _Channel:
    """Framed reads from stdin and writes to stdout (binary, unbuffered)."""

    def __init__(self) -> None:
        self.rfd = sys.stdin.buffer.fileno()
        self.wfd = sys.stdout.buffer.fileno()

    def _read_exact(self, n: int) -> bytes | None:
        parts, left = [], n
        while left:
            chunk = os.read(self.rfd, min(left, 1 << 20))
            if not chunk:
                return None
            parts.append(chunk)
            left -= len(chunk)
        return b"".join(parts)

    def read(self) -> tuple[dict, bytes] | None:
        lengths = self._read_exact(_FRAME.size)
        if lengths is None:
            return None
        hlen, plen = _FRAME.unpack(lengths)
        head = self._read_exact(hlen)
        payload = self._read_exact(plen) if plen else b""
        if head is None or payload is None:
            return None
        return json.loads(head), payload

    def write(self, header: dict, payload: bytes = b"") -> None:
        view = memoryview(encode_frame(header, payload))
        while view:
            view = view[os.write(self.wfd, view) :]


def _handle(workdir: str, op: str, req: dict, payload: bytes) -> tuple[dict, bytes]:
    if op == "exec":
        cwd = resolve_in(workdir, req.get("cwd") or ".")
        env = dict(os.environ)
        env.update(req.get("env") or {})
        res = run_process(
            req["argv"],
            stdin=payload or None,
            timeout=req["timeout"],
            env=env,
            cwd=cwd,
            own_tree=True,
        )
        stdout, stderr = res.pop("stdout"), res.pop("stderr")
        res["stdout_len"] = len(stdout)
        return res, stdout + stderr
    if op == "put":
        write_file(workdir, req["path"], payload)
        return {}, b""
    if op == "get":
        return {}, read_file(workdir, req["path"])
    if op == "snapshot":
        return {}, tar_dir(workdir)
    if op == "restore":
        untar_into(workdir, payload)
        return {}, b""
    if op == "reset":
        # a new episode: no process and no file of the last one (servers included)
        killed = kill_all_but({os.getpid()})
        # /tmp, /dev/shm, /dev/mqueue and any other writable scratch mount, and SysV IPC
        scratch = [*(req.get("clear") or []), *writable_scratch(os.path.realpath(workdir))]
        cleared = []
        for tmp in dict.fromkeys(scratch):
            with contextlib.suppress(OSError):
                clear_dir(tmp)
                cleared.append(tmp)
        ipc = clear_sysv_ipc()
        untar_into(workdir, payload)
        return {"killed": killed, "cleared": cleared, "ipc_removed": ipc}, b""
    if op == "ping":
        return {"pid": os.getpid()}, b""
    raise ValueError(f"unknown op {op!r}")


def serve(workdir: str) -> None:
    """Answer requests until stdin closes; each answer says ok or names the error."""
    become_subreaper()
    chan = _Channel()
    chan.write({"ok": True, "ready": True, "pid": os.getpid()})
    while True:
        msg = chan.read()
        if msg is None:
            return
        req, payload = msg
        op = req.get("op", "")
        if op == "exit":
            chan.write({"ok": True})
            return
        try:
            header, body = _handle(workdir, op, req, payload)
        except (OSError, ValueError, KeyError, tarfile.TarError) as exc:
            chan.write({"ok": False, "error": type(exc).__name__, "message": str(exc)[:2000]})
            continue
        header["ok"] = True
        chan.write(header, body)


if __name__ == "__main__":
    serve(sys.argv[1] if len(sys.argv) > 1 else os.getcwd())
