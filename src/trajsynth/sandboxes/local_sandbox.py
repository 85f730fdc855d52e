"""``LocalSandbox``: for machines with no Docker engine. A boundary, or it refuses to start.

With bubblewrap (``bwrap``) a command sees only what it needs, read-only: ``/usr`` (and the
``/bin``, ``/lib`` links), a few files of ``/etc`` (a generated ``passwd``, no ``shadow``), the
Python interpreter and its virtualenv, and the ``trajsynth`` package directory (not the rest of
a checkout). Its work directory is the one writable place besides a size-limited ``/tmp``. No
``/var/run``, no Docker socket, no host home, no network (its own network namespace: only a
loopback of its own), and its own pid, ipc, uts and user namespaces.

As root (how ``make run`` runs) the layers are:

1. a per-sandbox cgroup (``cgroups``: v2, or v1 memory + pids) that every command and server
   of the sandbox joins before anything else runs: ``memory_mb`` and ``pids`` hold for the
   whole sandbox, whoever forks;
2. an outer ``bwrap`` (root: it can read the interpreter under ``/root``) that builds the
   read-only view, with the work directory and ``/tmp`` as size-limited tmpfs mounts
   (``disk_mb``, ``tmp_mb``), in new pid, ipc, net and uts namespaces;
3. ``setpriv`` to a per-sandbox unprivileged uid with every capability dropped and
   ``no_new_privs``;
4. an inner, unprivileged ``bwrap`` that adds the user namespace (and forbids nested ones)
   and loads a seccomp filter (``seccomp_filter``, compiled with libseccomp through
   ``pyseccomp``) that refuses, as Docker's default profile does, the calls that reach past
   a sandbox: ``ptrace`` and ``process_vm_readv/writev``, module loading, ``kexec``,
   ``bpf``, ``perf_event_open``, keyrings, mounts and namespaces, clock and swap
   changes, ``userfaultfd``, ``open_by_handle_at``, ``io_uring`` (every call of another
   ABI is killed);
5. rlimits: CPU seconds from the timeout, no core files, a process count for that uid.

Not as root, one unprivileged ``bwrap`` does 2 and 4; the work directory's size cannot be
enforced (no tmpfs mount), nor memory and pids unless this user may make cgroups.

Where a limit cannot be enforced here (``unenforced_limits``; ``synth doctor`` lists them),
``start`` refuses unless ``limits.allow_unsafe_local_sandbox`` is set. With it, and without
bubblewrap, a command is a plain subprocess with the rlimits and the timeout only.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import logging
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path

import trajsynth
from trajsynth.sandboxes import _agent
from trajsynth.sandboxes.base import WORKDIR_ENV, Sandbox, TarSnapshots, as_bytes, decode
from trajsynth.sandboxes.cgroups import (
    Cgroup,
    create_cgroup,
    owner_alive,
    probe_cgroups,
    reap_stale_cgroups,
)
from trajsynth.schemas import (
    ExecResult,
    SandboxError,
    SandboxGone,
    SandboxLimits,
    SandboxStartError,
    SnapshotHandle,
)

__all__ = ["LocalSandbox", "bwrap_usable", "unenforced_limits"]

log = logging.getLogger(__name__)

# Sets rlimits and the directory, then becomes the command:
# `python -S -c SRC AS NPROC CPU CWD -- argv...` (a limit below 0 is left alone).
_RLIMIT_SRC = """\
import os, resource as r, sys
a = sys.argv
for res, v in ((r.RLIMIT_AS, a[1]), (r.RLIMIT_NPROC, a[2]), (r.RLIMIT_CPU, a[3])):
    if int(v) >= 0:
        r.setrlimit(res, (int(v), int(v)))
r.setrlimit(r.RLIMIT_CORE, (0, 0))
os.chdir(a[4])
try:
    os.execvp(a[6], a[6:])
except OSError as e:
    sys.stderr.write(f"cannot run {a[6]!r}: {e}\\n")
    sys.exit(127)
"""
# Joins the cgroup (one procs file per hierarchy, up to "--"), then becomes the rest.
_JOIN_SRC = 'while [ "$1" != -- ]; do echo $$ > "$1" || exit 125; shift; done; shift; exec "$@"'
_PACKAGE_DIR = str(Path(trajsynth.__file__).resolve().parent)
_UID_BASE = 1_500_000_000  # per-sandbox uids: far above any real account
_SYSTEM_LINKS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
_ETC_FILES = (
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/localtime",
    "/etc/alternatives",
    "/etc/nsswitch.conf",
    "/etc/ssl/certs",
)
UNSAFE_SETTING = "run.sandbox_limits.allow_unsafe_local_sandbox"
# What the seccomp filter refuses with EPERM: the calls of Docker's default profile that let
# a process reach past its sandbox (the rest of that profile is for capabilities no
# sandboxed process here has). A name this kernel's table lacks is skipped.
SECCOMP_DENIED = (
    "ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd",
    "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
    "create_module", "query_module", "get_kernel_syms", "bpf", "perf_event_open",
    "add_key", "request_key", "keyctl", "mount", "umount", "umount2", "pivot_root",
    "move_mount", "open_tree", "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr",
    "unshare", "setns", "swapon", "swapoff", "reboot", "acct", "settimeofday", "stime",
    "clock_settime", "clock_adjtime", "adjtimex", "iopl", "ioperm", "syslog", "quotactl",
    "lookup_dcookie", "nfsservctl", "uselib", "ustat", "sysfs", "_sysctl", "vhangup",
    "userfaultfd", "open_by_handle_at", "io_uring_setup", "io_uring_enter",
    "io_uring_register", "vm86", "vm86old",
)  # fmt: skip
_SECCOMP_FD = 9  # the fd the filter reaches bubblewrap on


def _is_root() -> bool:
    return os.geteuid() == 0


@functools.cache
def _tmpfs_mount_problem() -> str | None:
    """Why a size-limited tmpfs cannot be mounted on the host here, or ``None``."""
    if not _is_root():
        return "not root: no size-limited tmpfs can be mounted for it"
    probe = tempfile.mkdtemp(prefix="trajsynth-tmpfs-probe-")
    try:
        proc = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=1m", "trajsynth-probe", probe],
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0:
            return f"mount -t tmpfs failed: {proc.stderr.strip()[:120]}"
        subprocess.run(["umount", probe], capture_output=True)
        return None
    except OSError as exc:
        return f"mount -t tmpfs failed: {exc}"
    finally:
        with contextlib.suppress(OSError):
            os.rmdir(probe)


@functools.cache
def _cgroup_problem() -> str | None:
    return probe_cgroups()


@functools.cache
def bwrap_usable() -> bool:
    """Whether bubblewrap is installed and can build the sandbox here (probed once)."""
    problem = _bwrap_problem()
    if problem:
        log.info("bubblewrap not usable: %s", problem)
    return problem is None


@functools.cache
def _bwrap_problem() -> str | None:
    if shutil.which("bwrap") is None:
        return "bubblewrap (bwrap) is not installed"
    if _is_root() and shutil.which("setpriv") is None:
        return "setpriv (util-linux) is missing: root cannot drop to an unprivileged user"
    with tempfile.TemporaryDirectory(prefix="trajsynth-bwrap-probe-") as tmp:
        work = Path(tmp) / "work"
        work.mkdir()
        uid = _UID_BASE if _is_root() else os.getuid()
        if _is_root():
            os.chown(work, uid, uid)
        argv = _bwrap_argv(
            work=str(work), cwd=str(work), uid=uid, tmp_mb=8, passwd=None, extra_ro=()
        )
        try:
            proc = subprocess.run([*argv, "true"], capture_output=True, timeout=20)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"bwrap failed: {exc}"
    if proc.returncode != 0:
        return f"bwrap cannot make the namespaces: {proc.stderr.decode(errors='replace')[:200]}"
    return None


def seccomp_filter() -> bytes:
    """The compiled BPF program ``bwrap --seccomp`` loads (see ``SECCOMP_DENIED``)."""
    import pyseccomp

    rules = pyseccomp.SyscallFilter(pyseccomp.ALLOW)  # calls of another ABI: killed
    for name in SECCOMP_DENIED:
        with contextlib.suppress(OSError, ValueError):  # not in this kernel's table
            rules.add_rule(pyseccomp.ERRNO(errno.EPERM), name)
    with tempfile.TemporaryFile() as fh:
        rules.export_bpf(fh)
        fh.seek(0)
        return fh.read()


@functools.cache
def _seccomp_problem() -> str | None:
    """Why no seccomp filter can be built here, or ``None``."""
    try:
        program = seccomp_filter()
    except (ImportError, OSError, RuntimeError) as exc:
        return f"no seccomp filter (pyseccomp / libseccomp): {exc}"
    return None if program else "libseccomp exported an empty filter"


def unenforced_limits() -> dict[str, str]:
    """Each limit a ``LocalSandbox`` cannot enforce on this host, with why (empty: all hold)."""
    missing: dict[str, str] = {}
    problem = _bwrap_problem()
    if problem:
        missing["isolation (file system, network, namespaces)"] = problem
        missing["unprivileged user"] = problem
        missing["/tmp size"] = problem
    cgroup = _cgroup_problem()
    if cgroup:
        missing["memory (whole sandbox)"] = cgroup
        missing["pids (whole sandbox)"] = cgroup
    if not problem and not _is_root():
        missing.pop("pids (whole sandbox)", None)  # RLIMIT_NPROC holds for a non-root user
    seccomp = _seccomp_problem()
    if seccomp:
        missing["seccomp filter (ptrace, kexec, bpf, mounts, ...)"] = seccomp
    tmpfs = _tmpfs_mount_problem()
    if tmpfs:
        missing["work-dir size"] = tmpfs
    return missing


@functools.cache
def _reap_stale_once() -> None:
    """Once per process: remove the work-dir mounts and cgroups of sandboxes whose owner died
    (``kill -9`` gives ``close`` no chance); a live owner's are never touched."""
    if _cgroup_problem() is None:
        n = reap_stale_cgroups()
        if n:
            log.info("removed %d cgroups of sandboxes whose process died", n)
    if not _is_root():
        return
    try:
        mounts = Path("/proc/self/mounts").read_text().splitlines()
    except OSError:
        return
    for line in mounts:
        source, target, fstype = line.split()[:3]
        if fstype != "tmpfs" or not source.startswith("trajsynth-") or owner_alive(source):
            continue
        subprocess.run(["umount", "-l", target], capture_output=True)
        parent = Path(target).parent
        if parent.name.startswith("trajsynth-sbx-") and target.endswith("/work"):
            shutil.rmtree(parent, ignore_errors=True)
        log.info("removed the work directory %s of a sandbox whose process died", target)


def _user_tasks() -> int:
    """Processes and threads this user runs now (RLIMIT_NPROC counts them all)."""
    uid, count = os.getuid(), 0
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if os.stat(f"/proc/{name}").st_uid == uid:
                    count += len(os.listdir(f"/proc/{name}/task"))
            except OSError:
                continue
    return count


def _ro_paths(extra: Sequence[str]) -> list[str]:
    """Host paths the sandbox sees read-only at the same place: the interpreter, its
    virtualenv and the trajsynth package (not the checkout around it), plus ``extra``."""
    wanted = {sys.prefix, sys.base_prefix, sys.exec_prefix, _PACKAGE_DIR, *extra}
    wanted.add(str(Path(sys.executable).resolve().parent.parent))
    # a virtualenv layered on another (a .pth naming the other's site-packages) imports
    # from there too; only site dirs, never a source checkout that a .pth also names
    wanted.update(p for p in sys.path if Path(p).name in ("site-packages", "dist-packages"))
    paths = sorted(
        os.path.abspath(p)
        for p in wanted
        if os.path.exists(p) and not (p == "/usr" or p.startswith("/usr/"))
    )
    kept: list[str] = []
    for path in paths:  # sorted: a parent comes before what is under it
        if not any(path == k or path.startswith(k + "/") for k in kept):
            kept.append(path)
    return kept


def _dirs_for(dest: str, made: set[str]) -> list[str]:
    """``--dir`` arguments (world-traversable) for the parents of ``dest`` not made yet:
    bwrap would make them 0700, which the unprivileged inner layer could not cross."""
    args: list[str] = []
    parts = Path(dest).parts[1:-1]
    for i in range(len(parts)):
        parent = "/" + "/".join(parts[: i + 1])
        if parent in made or parent == "/tmp":
            continue
        made.add(parent)
        args += ["--perms", "0755", "--dir", parent]
    return args


def _bwrap_argv(
    *,
    work: str,
    cwd: str,
    uid: int,
    tmp_mb: int,
    passwd: str | None,
    extra_ro: Sequence[str],
    seccomp: str | None = None,
) -> list[str]:
    """The bubblewrap layers up to (not including) the command; see the module docstring.

    ``seccomp``: a file holding the compiled filter; a shell in front opens it on fd 9, which
    the outer layer and ``setpriv`` pass down to the bubblewrap that loads it."""
    view = ["--ro-bind", "/usr", "/usr"]
    for link in _SYSTEM_LINKS:
        if os.path.islink(link):
            view += ["--symlink", os.readlink(link), link]
        elif os.path.isdir(link):
            view += ["--ro-bind", link, link]
    made: set[str] = set()
    for path in _ETC_FILES:
        if os.path.exists(path):
            view += [*_dirs_for(path, made), "--ro-bind", path, path]
    if passwd is not None:
        view += [*_dirs_for("/etc/passwd", made), "--ro-bind", f"{passwd}/passwd", "/etc/passwd"]
        view += ["--ro-bind", f"{passwd}/group", "/etc/group"]
    view += ["--dev", "/dev", "--proc", "/proc"]
    for tmpfs in ("/tmp", "/dev/shm"):  # shm: multiprocessing's semaphores live there
        view += ["--perms", "1777", "--size", str(tmp_mb * 1024 * 1024), "--tmpfs", tmpfs]
    for path in _ro_paths(extra_ro):
        view += [*_dirs_for(path, made), "--ro-bind", path, path]
    view += [*_dirs_for(work, made), "--bind", work, work]
    common = ["--die-with-parent", "--new-session", "--unshare-ipc", "--unshare-uts"]
    common += ["--unshare-pid", "--unshare-net", "--unshare-cgroup-try"]
    opener: list[str] = []
    filtered: list[str] = []
    if seccomp is not None:
        opener = ["sh", "-c", f'exec {_SECCOMP_FD}<"$0" && exec "$@"', seccomp]
        filtered = ["--seccomp", str(_SECCOMP_FD)]
    if not _is_root():
        # one unprivileged layer: its user namespace makes the mounts possible
        return [
            *opener, "bwrap", *common, "--unshare-user", "--disable-userns", *filtered, *view,
            "--chdir", cwd,
        ]  # fmt: skip
    outer = ["bwrap", *common, *view, "--remount-ro", "/", "--"]
    drop = [
        "setpriv",
        f"--reuid={uid}",
        f"--regid={uid}",
        "--clear-groups",
        "--inh-caps=-all",
        "--bounding-set=-all",
        "--no-new-privs",
        "--",
    ]
    inner = ["bwrap", "--unshare-user", "--disable-userns", "--die-with-parent", *filtered]
    # --ro-bind marks every mount under it nodev; /dev gets its devices back (null, urandom)
    inner += ["--ro-bind", "/", "/", "--dev-bind", "/dev", "/dev"]
    inner += ["--bind", "/tmp", "/tmp", "--bind", work, work]
    inner += ["--chdir", cwd]
    return [*opener, *outer, *drop, *inner]


class LocalSandbox(Sandbox):
    """A sandbox on this machine: bubblewrap when it works here, else (only when unsafe is
    allowed) a plain subprocess.

    ``use_bwrap=None`` picks bubblewrap when ``bwrap_usable()``; ``True`` insists on it;
    ``False`` is a plain subprocess, which needs ``limits.allow_unsafe_local_sandbox``.
    ``extra_ro``: more host paths the commands may read (an outside server's files).
    """

    def __init__(
        self,
        limits: SandboxLimits | None = None,
        *,
        use_bwrap: bool | None = None,
        root: Path | None = None,
        extra_ro: Sequence[str] = (),
    ) -> None:
        self.limits = limits or SandboxLimits()
        if use_bwrap and not bwrap_usable():
            raise SandboxStartError(
                f"bubblewrap cannot build the sandbox here: {_bwrap_problem() or 'not usable'}"
            )
        self.use_bwrap = bwrap_usable() if use_bwrap is None else use_bwrap
        self.sandbox_id = f"sbx-{uuid.uuid4().hex[:12]}"
        self.python = sys.executable
        self.workdir = ""
        self.extra_ro = tuple(extra_ro)
        # a uid of its own: RLIMIT_NPROC counts only this sandbox, and no other can signal it
        self.uid = _UID_BASE + int(uuid.uuid4().int % 400_000_000) if _is_root() else os.getuid()
        self._parent = root
        self._root: Path | None = None
        self._cgroup: Cgroup | None = None
        self._work_mounted = False
        # the owner's pid is in the mount's name: a later process reaps what a killed one left
        self._mount_name = f"trajsynth-{os.getpid()}-{self.sandbox_id}"
        self._nproc = -1
        self._seccomp: Path | None = None
        self._closed = False
        self._snapshots = TarSnapshots(self.sandbox_id)

    def unenforced(self) -> dict[str, str]:
        """The limits this sandbox cannot enforce, with why."""
        if not self.use_bwrap:
            missing = {
                "isolation (file system, network, namespaces)": "plain subprocess (no bwrap)",
                "unprivileged user": "plain subprocess (no bwrap)",
                "/tmp size": "plain subprocess (no bwrap)",
            }
            for key, why in unenforced_limits().items():
                missing.setdefault(key, why)
            return missing
        return unenforced_limits()

    def start(self) -> None:
        if self._closed:
            raise SandboxGone(f"sandbox {self.sandbox_id} is closed")
        if self._root is not None:
            return
        missing = self.unenforced()
        if missing and not self.limits.allow_unsafe_local_sandbox:
            what = "; ".join(f"{key}: {why}" for key, why in missing.items())
            raise SandboxStartError(
                f"LocalSandbox cannot enforce these limits here ({what}); use the Docker "
                f"sandbox, or set {UNSAFE_SETTING} = true to run model code anyway"
            )
        _reap_stale_once()
        try:
            self._root = Path(
                tempfile.mkdtemp(prefix=f"trajsynth-{self.sandbox_id}-", dir=self._parent)
            )
            work = self._root / "work"
            work.mkdir()
            self.workdir = str(work.resolve())
            self._write_passwd()
            if self.use_bwrap and _seccomp_problem() is None:
                self._seccomp = self._root / "seccomp.bpf"
                self._seccomp.write_bytes(seccomp_filter())
            self._mount_work()
            if _cgroup_problem() is None:
                self._cgroup = create_cgroup(self.limits.memory_mb * 1024 * 1024, self.limits.pids)
        except (OSError, SandboxError) as exc:
            self._closed = True
            self._cleanup()
            raise SandboxStartError(f"cannot make the sandbox: {exc}") from exc
        if _is_root():
            self._nproc = self.limits.pids
        else:
            self._nproc = _user_tasks() + self.limits.pids
        if missing:
            log.warning(
                "sandbox %s runs with limits it cannot enforce (%s allows it): %s",
                self.sandbox_id,
                UNSAFE_SETTING,
                ", ".join(missing),
            )

    def _write_passwd(self) -> None:
        assert self._root is not None
        etc = self._root / "etc"
        etc.mkdir()
        home = self.workdir
        (etc / "passwd").write_text(f"sandbox:x:{self.uid}:{self.uid}:sandbox:{home}:/bin/sh\n")
        (etc / "group").write_text(f"sandbox:x:{self.uid}:\n")
        for path in (etc, etc / "passwd", etc / "group"):
            os.chmod(path, 0o755 if path.is_dir() else 0o644)

    def _mount_work(self) -> None:
        """As root: the work directory is a tmpfs of ``disk_mb`` owned by the sandbox uid."""
        if not _is_root():
            return
        if _tmpfs_mount_problem() is None:
            opts = f"size={self.limits.disk_mb}m,mode=0700,uid={self.uid},gid={self.uid}"
            proc = subprocess.run(
                ["mount", "-t", "tmpfs", "-o", f"{opts},nosuid,nodev", self._mount_name,
                 self.workdir],
                capture_output=True,
                text=True,
            )  # fmt: skip
            if proc.returncode != 0:
                raise SandboxError(f"cannot mount the work directory: {proc.stderr.strip()}")
            self._work_mounted = True
        else:
            os.chown(self.workdir, self.uid, self.uid)
            os.chmod(self.workdir, 0o700)

    def _hand_over(self, path: str) -> None:
        """Give what the host wrote (as root) under ``path`` to the sandbox's uid."""
        if not _is_root():
            return
        top = Path(path)
        os.lchown(top, self.uid, self.uid)
        if top.is_dir() and not top.is_symlink():
            for dirpath, dirnames, filenames in os.walk(top):
                for name in (*dirnames, *filenames):
                    os.lchown(os.path.join(dirpath, name), self.uid, self.uid)

    def _env(self, env: Mapping[str, str] | None) -> dict[str, str]:
        bindir = str(Path(sys.executable).parent)
        return {
            "PATH": f"{bindir}:/usr/local/bin:/usr/bin:/bin",
            "HOME": self.workdir,
            "LANG": "C.UTF-8",
            "TMPDIR": "/tmp" if self.use_bwrap else str(self._require_root() / "tmp"),
            "PYTHONPATH": str(Path(_PACKAGE_DIR).parent),
            "PYTHONDONTWRITEBYTECODE": "1",
            WORKDIR_ENV: self.workdir,
            **(env or {}),
        }

    def _require_root(self) -> Path:
        if self._closed:
            raise SandboxGone(f"sandbox {self.sandbox_id} is closed")
        if self._root is None:
            raise SandboxGone(f"sandbox {self.sandbox_id} is not started")
        return self._root

    def _wrap(self, argv: Sequence[str], cwd: str, cpu_s: int) -> list[str]:
        root = self._require_root()
        # with a cgroup the memory limit is the sandbox's; RLIMIT_AS (per process, and fatal
        # to runtimes that reserve address space) is the fallback only
        mem = -1 if self._cgroup else self.limits.memory_mb * 1024 * 1024
        limited = [sys.executable, "-S", "-c", _RLIMIT_SRC, str(mem), str(self._nproc)]
        limited += [str(cpu_s), cwd, "--", *argv]
        wrapped = limited
        if self.use_bwrap:
            layers = _bwrap_argv(
                work=self.workdir,
                cwd=cwd,
                uid=self.uid,
                tmp_mb=self.limits.tmp_mb,
                passwd=str(root / "etc"),
                extra_ro=self.extra_ro,
                seccomp=str(self._seccomp) if self._seccomp else None,
            )
            wrapped = [*layers, "--", *limited]
        if self._cgroup is not None:
            wrapped = ["sh", "-c", _JOIN_SRC, "sh", *self._cgroup.procs_files, "--", *wrapped]
        return wrapped

    def exec(
        self,
        argv: Sequence[str],
        *,
        stdin: bytes | str | None = None,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
    ) -> ExecResult:
        root = self._require_root()
        limit = self._timeout(timeout)
        workdir_cwd = _agent.resolve_in(self.workdir, cwd or ".")
        if not self.use_bwrap:
            (root / "tmp").mkdir(exist_ok=True)
        started = time.perf_counter()
        res = _agent.run_process(
            self._wrap(argv, workdir_cwd, math.ceil(limit) + 1),
            stdin=as_bytes(stdin),
            timeout=limit,
            env=self._env(env),
            cwd=workdir_cwd if not self.use_bwrap else str(root),
        )
        code = res["exit_code"]
        if self.use_bwrap and 128 < code <= 128 + 64:
            # bwrap (like a shell) reports a command a signal killed as 128 + signal; the
            # interface says -signal (-9: the OOM killer, or a kill at a limit)
            code = 128 - code
        return ExecResult(
            exit_code=code,
            stdout=decode(res["stdout"]),
            stderr=decode(res["stderr"]),
            duration_s=time.perf_counter() - started,
            timed_out=res["timed_out"],
        )

    def put_file(self, path: str, data: bytes) -> None:
        self._require_root()
        full = _agent.resolve_in(self.workdir, path)
        existed = {p for p in Path(full).parents if p.exists()}
        _agent.write_file(self.workdir, path, data)
        for parent in Path(full).parents:
            if parent in existed:
                break
            self._hand_over(str(parent))
        self._hand_over(full)

    def get_file(self, path: str) -> bytes:
        self._require_root()
        return _agent.read_file(self.workdir, path)

    def snapshot(self) -> SnapshotHandle:
        self._require_root()
        return self._snapshots.add(_agent.tar_dir(self.workdir))

    def restore(self, handle: SnapshotHandle) -> None:
        self._require_root()
        _agent.untar_into(self.workdir, self._snapshots.get(handle))
        self._hand_over(self.workdir)
        if self._work_mounted:
            os.chmod(self.workdir, 0o700)

    def reset(self, handle: SnapshotHandle) -> None:
        """Kill every process of the sandbox (servers too), then restore. Under bubblewrap
        each command's ``/tmp`` and ``/dev/shm`` (and IPC namespace) already ended with it;
        a plain subprocess's shared ``TMPDIR`` is emptied here."""
        root = self._require_root()
        if self._cgroup is not None:
            self._cgroup.kill()
        if not self.use_bwrap and (root / "tmp").is_dir():
            _agent.clear_dir(str(root / "tmp"))
        self.restore(handle)

    def discard(self, handle: SnapshotHandle) -> None:
        self._snapshots.discard(handle)

    def stdio_command(
        self, argv: Sequence[str], *, env: Mapping[str, str] | None = None
    ) -> list[str]:
        """``env VAR=... <layers> argv``: the clean environment travels in the argv itself."""
        self._require_root()
        assignments = [f"{key}={value}" for key, value in self._env(env).items()]
        return ["env", "-i", *assignments, *self._wrap(argv, self.workdir, -1)]

    def close(self) -> None:
        if self._closed and self._root is None:
            return
        self._closed = True
        self._snapshots.clear()
        self._cleanup()

    def _cleanup(self) -> None:
        if self._cgroup is not None:
            self._cgroup.remove()
            self._cgroup = None
        if self._work_mounted:
            subprocess.run(["umount", "-l", self.workdir], capture_output=True)
            self._work_mounted = False
        if self._root is not None:
            shutil.rmtree(self._root, ignore_errors=True)
            self._root = None
