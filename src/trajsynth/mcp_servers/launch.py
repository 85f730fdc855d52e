"""How an outside MCP server is launched: exactly the command the user gave.

The command is never rewritten (a ``python`` command keeps its own interpreter, which has the
server's packages). The server runs in the sandbox with its own files mounted read-only: the
roots are found from the command (a virtualenv, an npm prefix, the interpreter's install
prefix, a script's folder) or named with ``--mount``. It runs on the host only when the user
says so (``ServerSpec.on_host``, the CLI's ``--on-host-state-not-isolated``), with a warning.

Environment variables: the cluster stores only their names (``ServerSpec.env_keys``); the
values are read from the launching process's environment here, so no secret is ever saved.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from trajsynth.sandboxes import DockerSandbox, LocalSandbox, Sandbox
from trajsynth.sandboxes.factory import docker_unusable, started
from trajsynth.schemas import (
    CopiedFile,
    InputError,
    SandboxError,
    SandboxKind,
    SandboxLimits,
    ServerKind,
    ServerSpec,
)

__all__ = [
    "HOST_FLAG",
    "MountedDockerSandbox",
    "MountedLocalSandbox",
    "copy_files",
    "copied_file",
    "docker_mounts",
    "open_mounted_sandbox",
    "server_env",
    "server_mounts",
    "state_outside_warnings",
]

log = logging.getLogger(__name__)

HOST_FLAG = "--on-host-state-not-isolated"
_LOCAL_AS_MB = 16384
# System folders are the sandbox image's own: mounting the host's over them would break it.
_SYSTEM_ROOTS = ("/usr", "/bin", "/sbin", "/lib", "/lib64", "/etc", "/proc", "/sys", "/dev")


def _is_system(path: str) -> bool:
    return path == "/" or any(path == r or path.startswith(r + "/") for r in _SYSTEM_ROOTS)


def _root_of(path: Path) -> Path:
    """The folder that holds everything ``path`` needs: its virtualenv, its npm prefix, or the
    install prefix of an interpreter (``.../bin/python3.11`` -> ``...``)."""
    for parent in [path, *path.parents]:
        if (parent / "pyvenv.cfg").is_file():
            return parent
        if parent.name == "node_modules":
            return parent.parent
    if path.parent.name == "bin" and any(
        (path.parent.parent / "lib").glob("python3*")
    ):  # an interpreter's own prefix (pyenv, a conda env, /opt/python)
        return path.parent.parent
    return path.parent if path.is_file() else path


def _shebang(path: Path) -> Path | None:
    """The interpreter a script names on its ``#!`` line (a console script's python)."""
    try:
        with path.open("rb") as fh:
            head = fh.readline(512)
    except OSError:
        return None
    if not head.startswith(b"#!"):
        return None
    parts = head[2:].decode(errors="replace").split()
    if not parts:
        return None
    exe = parts[1] if Path(parts[0]).name == "env" and len(parts) > 1 else parts[0]
    found = shutil.which(exe) if not exe.startswith("/") else exe
    return Path(found) if found and Path(found).exists() else None


def server_mounts(command: Sequence[str], extra: Sequence[str] = ()) -> list[str]:
    """Host folders the server ``command`` needs, to mount read-only in the sandbox.

    Every argv item that is an existing absolute path (and the executable, found on PATH) is
    followed through symlinks; each gives its root (``_root_of``). System folders are left out.
    ``extra`` (``--mount``) is added as given; a missing one is an InputError.
    """
    found: list[str] = []
    candidates: list[Path] = []
    exe = shutil.which(command[0]) if command else None
    if exe:
        candidates.append(Path(exe))
    candidates += [Path(a) for a in command if a.startswith("/") and Path(a).exists()]
    candidates += [i for c in list(candidates) if (i := _shebang(c)) is not None]
    for cand in candidates:
        for p in {cand.absolute(), cand.resolve()}:
            root = str(_root_of(p))
            if not _is_system(root) and root not in found:
                found.append(root)
    for m in extra:
        path = Path(m).expanduser().absolute()
        if not path.exists():
            raise InputError(f"--mount {m!r}: no such file or folder")
        if str(path) not in found:
            found.append(str(path))
    # a mount inside another is redundant
    found.sort()
    return [m for i, m in enumerate(found) if not any(m.startswith(o + "/") for o in found[:i])]


# Interpreters that run from a single file in the container: node links only libc and
# libstdc++, which the sandbox image has. A system python is not among them: its standard
# library lives in the host's /usr/lib, which the container does not see.
_SINGLE_FILE_INTERPRETERS = frozenset({"node", "nodejs"})
# Folders of the sandbox image that only root may enter (found with `find / -type d ! -perm
# -o+x` in the image).
_IMAGE_PRIVATE = ("/root",)


def docker_mounts(command: Sequence[str], mounts: Sequence[str]) -> tuple[list[str], str | None]:
    """The mounts the server ``command`` needs in the Docker sandbox, and why it cannot run
    there (None: it can).

    The container has its own system folders: an interpreter the command finds in one (node
    in /usr/bin) is mounted as a file when it runs from one file, else the server cannot run
    there. A mount under a folder of the image that other users cannot enter (a pyenv python
    under /root) is out of the container user's reach.
    """
    out = list(mounts)
    exe = shutil.which(command[0]) if command else None
    interpreters = [Path(exe)] if exe else []
    interpreters += [i for c in [*interpreters, *map(Path, command[1:2])] if (i := _shebang(c))]
    for interpreter in interpreters:
        real = interpreter.resolve()
        if not _is_system(str(real.parent)) or any(str(real).startswith(m + "/") for m in out):
            continue
        if real.name not in _SINGLE_FILE_INTERPRETERS:
            return out, f"its interpreter {real} lives in the host's system folders"
        if str(real) not in out:
            out.append(str(real))
    for m in out:
        # a folder the image itself has, closed to other users: Docker creates the missing
        # parents of a mount open, but cannot open one the image has
        for private in _IMAGE_PRIVATE:
            if m.startswith(private + "/"):
                return out, f"{m} lies under {private}, which the sandbox's user cannot enter"
    return out, None


def server_env(spec: ServerSpec, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The server's environment: stored non-secret ``env`` plus ``env_keys`` read now from
    ``environ`` (the process environment); InputError naming a key that is not set."""
    environ = os.environ if environ is None else environ
    missing = [k for k in spec.env_keys if k not in environ]
    if missing:
        raise InputError(
            f"environment variable(s) {', '.join(missing)} not set: the server was added with "
            f"--env {missing[0]}=...; export it before running (values are never stored)"
        )
    return {**spec.env, **{k: environ[k] for k in spec.env_keys}}


def copied_file(source: str, dest: str | None = None) -> CopiedFile:
    """A ``--copy SRC[:DEST]`` entry with the content hash of SRC (a file or a folder)."""
    path = Path(source).expanduser().absolute()
    if not path.exists():
        raise InputError(f"--copy {source!r}: no such file or folder")
    digest = hashlib.sha256()
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    for f in files:
        digest.update(str(f.relative_to(path.parent)).encode())
        digest.update(f.read_bytes())
    return CopiedFile(source=str(path), dest=dest or path.name, sha256=digest.hexdigest())


def copy_files(sandbox: Sandbox, copies: Sequence[CopiedFile]) -> None:
    """Copy each ``--copy`` source into the sandbox work dir (the user's originals are never
    touched); InputError when a source changed since it was added (its hash differs)."""
    for item in copies:
        now = copied_file(item.source, item.dest)
        if now.sha256 != item.sha256:
            raise InputError(
                f"--copy {item.source}: content changed since the cluster was added "
                f"(sha256 {now.sha256[:12]} != {item.sha256[:12]}); add the cluster again"
            )
        src = Path(item.source)
        files = [(src, item.dest)] if src.is_file() else []
        if src.is_dir():
            files = [
                (f, f"{item.dest}/{f.relative_to(src)}")
                for f in sorted(src.rglob("*"))
                if f.is_file()
            ]
        for f, rel in files:
            sandbox.put_file(rel, f.read_bytes())


_REPO_PARAMS = ("repo_path",)


def host_folder_copies(
    command: list[str], mounts: Sequence[str] = ()
) -> tuple[list[str], list[str], dict[str, str]]:
    """The command with each host folder among its arguments (``/abs/repo`` or
    ``--repository=/abs/repo``) replaced by a copy in the sandbox work dir: the rewritten
    command, the ``--copy SRC:DEST`` entries, and ``repo_path`` fixed to the copy when the
    folder is a git repository (mcp-server-git's tools take it on every call). The folder
    that holds the executable (a venv, an npm prefix) and ``--mount`` folders stay mounted.
    A repository mounted read-only and owned by another user is refused by git ("detected
    dubious ownership"); a copy is the sandbox user's own and writable."""
    out = [command[0]] if command else []
    copies: list[str] = []
    fixed: dict[str, str] = {}
    exe = Path(command[0]).expanduser().absolute() if command else None
    taken: set[str] = set()
    for arg in command[1:]:
        flag, eq, value = arg.partition("=") if arg.startswith("-") else ("", "", arg)
        path = Path(value)
        own = exe is not None and (exe == path or path in exe.parents)
        mounted = any(value == m or value.startswith(m.rstrip("/") + "/") for m in mounts)
        if not (value.startswith("/") and path.is_dir()) or own or mounted or value == "/":
            out.append(arg)
            continue
        dest = path.name or "folder"
        while dest in taken:
            dest += "_"
        taken.add(dest)
        copies.append(f"{path}:{dest}")
        out.append(f"{flag}={dest}" if eq else dest)
        if (path / ".git").exists():
            fixed.update({p: dest for p in _REPO_PARAMS})
    return out, copies, fixed


def state_outside_warnings(spec: ServerSpec, mounts: Sequence[str] = ()) -> list[str]:
    """Why episodes of this server may change things outside the sandbox."""
    out: list[str] = []
    if spec.kind is ServerKind.HTTP:
        out.append(
            f"{spec.url}: an HTTP server keeps its state outside the sandbox; episodes share it "
            "and it cannot be reset (reset=replay only rewinds the trace)"
        )
    if spec.on_host:
        out.append(
            f"runs on the host ({HOST_FLAG}): its state is not isolated; episodes can change "
            "your real files and data"
        )
    for arg in spec.command or []:
        if (
            arg.startswith("/")
            and Path(arg).is_dir()
            and not any(arg == m or arg.startswith(m + "/") for m in mounts)
        ):
            out.append(
                f"argument {arg} is a host folder: mounted read-only in the sandbox, so writes "
                "there fail; use --copy to give the server a writable copy in its work dir"
            )
    return out


class MountedLocalSandbox(LocalSandbox):
    """A LocalSandbox whose bubblewrap view adds the server's own files, read-only (the
    sandbox's minimal view would otherwise hide them)."""

    def __init__(self, limits: SandboxLimits | None = None, *, mounts: Sequence[str] = ()):
        super().__init__(limits, extra_ro=mounts)
        self.mounts = list(mounts)


class MountedDockerSandbox(DockerSandbox):
    """A DockerSandbox with the server's own files bind-mounted read-only at the same paths."""

    def __init__(
        self,
        limits: SandboxLimits | None = None,
        *,
        image: str | None = None,
        mounts: Sequence[str] = (),
    ) -> None:
        super().__init__(limits, image=image)
        self.mounts = list(mounts)

    def _container_kwargs(self) -> dict[str, Any]:
        kwargs = super()._container_kwargs()
        volumes = dict(kwargs.get("volumes") or {})
        for m in self.mounts:
            volumes[m] = {"bind": m, "mode": "ro"}
        kwargs["volumes"] = volumes
        return kwargs


_noted: set[str] = set()


def _note_local(message: str) -> None:
    if message not in _noted:  # once per server and reason per process, not per episode
        _noted.add(message)
        log.info(message)


def open_mounted_sandbox(
    kind: SandboxKind | str,
    limits: SandboxLimits | None,
    image: str | None,
    mounts: Sequence[str],
    command: Sequence[str] = (),
) -> Sandbox:
    """A started sandbox of ``kind`` with ``mounts`` read-only, for the server ``command``;
    ``auto`` is Docker when the engine answers and the server can run in the container
    (``docker_mounts``), else the local sandbox."""
    kind = SandboxKind(kind)
    in_docker, why_not = docker_mounts(command, mounts)
    if kind is SandboxKind.AUTO:
        # Docker when the engine is there and the server can run in the container; else
        # bubblewrap, which sees the host read-only with the mounts added (a pyenv python
        # under /root, a system python whose library is the host's)
        why_not = why_not or docker_unusable(image)
        kind = SandboxKind.LOCAL if why_not else SandboxKind.DOCKER
        if why_not:
            _note_local(f"{' '.join(command)[:80]}: local sandbox, not Docker: {why_not}")
    elif kind is SandboxKind.DOCKER and (reason := why_not or docker_unusable(image)):
        raise SandboxError(f"sandbox docker: {reason}")
    sandbox: Sandbox
    if kind is SandboxKind.DOCKER:
        sandbox = MountedDockerSandbox(limits, image=image, mounts=in_docker)
    else:
        # the local sandbox caps address space (RLIMIT_AS); a JIT runtime (node's V8) reserves
        # gigabytes of it up front without using them, so an outside server gets room for that
        limits = limits or SandboxLimits()
        limits = limits.model_copy(update={"memory_mb": max(limits.memory_mb, _LOCAL_AS_MB)})
        sandbox = MountedLocalSandbox(limits, mounts=mounts)
    return started(sandbox)
