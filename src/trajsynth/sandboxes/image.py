"""The Docker sandbox image, built locally with no registry.

Steps (each cached, so a rebuild redoes only what changed):

1. a Debian root file system from ``debootstrap --variant=minbase --include=python3``, with a
   ``sandbox`` user (uid 1000) and the mount points added, kept as a tarball in the cache dir;
2. ``docker import`` of that tarball as ``trajsynth-sandbox-base:<rootfs hash>``;
3. the Python packages the sandboxed MCP servers need (``mcp`` at the host's version and its
   dependencies), downloaded as wheels on the host and installed from them offline into a
   folder with ``pip install --target``;
4. a container from the base image gets that folder at ``/opt/trajsynth/site``, byte-compiles it
   (the root is read-only at run time, so nothing could be compiled later), and is committed as
   ``trajsynth-sandbox:<hash of the inputs>``.

The trajsynth package itself is not in the image: ``DockerSandbox`` bind-mounts the host's
package read-only at ``/opt/trajsynth/src/trajsynth``, so code changes need no rebuild.
"""

from __future__ import annotations

import importlib.metadata
import io
import logging
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable
from pathlib import Path

from docker.errors import DockerException, ImageNotFound

from trajsynth.sandboxes.engine import docker_client
from trajsynth.schemas import SandboxError, paths, stable_hash

__all__ = [
    "IMAGE_REPO",
    "SITE_DIR",
    "SRC_DIR",
    "WORKDIR",
    "ensure_image",
    "image_exists",
    "image_inputs",
    "image_tag",
]

log = logging.getLogger(__name__)

BUILD_VERSION = 1  # bump when this script changes what it builds
SUITE = "bookworm"  # Debian 12: python3 is 3.11, like the host's
DEB_PACKAGES = ("python3",)
PYTHON_VERSION = "3.11"
GLIBC_MINOR = 36  # bookworm's glibc is 2.36: wheels must be manylinux_2_36 or older
DEFAULT_MIRROR = "http://deb.debian.org/debian"
IMAGE_REPO = "trajsynth-sandbox"
BASE_REPO = "trajsynth-sandbox-base"
SITE_DIR = "/opt/trajsynth/site"
SRC_DIR = "/opt/trajsynth/src"
WORKDIR = "/work"
SANDBOX_UID = 1000

Progress = Callable[[str], None]


def _arch() -> tuple[str, str]:
    """(Debian arch, wheel platform arch) of this machine."""
    machine = platform.machine()
    table = {"x86_64": ("amd64", "x86_64"), "aarch64": ("arm64", "aarch64")}
    if machine not in table:
        raise SandboxError(f"no sandbox image recipe for machine type {machine!r}")
    return table[machine]


def site_requirements() -> list[str]:
    """What the MCP servers import besides the stdlib: ``mcp`` at the host's version."""
    return [f"mcp=={importlib.metadata.version('mcp')}"]


def _rootfs_inputs() -> dict:
    return {"suite": SUITE, "packages": list(DEB_PACKAGES), "arch": _arch()[0], "uid": SANDBOX_UID}


def image_inputs() -> dict:
    """Everything the image is made from; its hash is the image tag."""
    return {
        "build": BUILD_VERSION,
        "rootfs": _rootfs_inputs(),
        "python": PYTHON_VERSION,
        "site": site_requirements(),
    }


def image_tag() -> str:
    """``trajsynth-sandbox:<hash of the inputs>``: the image this code expects."""
    return f"{IMAGE_REPO}:{stable_hash(image_inputs(), length=12)}"


def image_exists(tag: str | None = None) -> bool:
    """Whether the engine has the image (``SandboxError`` when the engine is down)."""
    try:
        docker_client().images.get(tag or image_tag())
    except ImageNotFound:
        return False
    except DockerException as exc:
        raise SandboxError(f"cannot look up sandbox image: {exc}") from exc
    return True


def ensure_image(
    force: bool = False,
    *,
    cache_dir: Path | None = None,
    mirror: str = DEFAULT_MIRROR,
    progress: Progress | None = None,
) -> str:
    """Return the sandbox image tag, building the image first if it is missing (or ``force``).

    ``force`` rebuilds the packages layer and the image but reuses the cached root file system
    (delete ``<cache_dir>/sandbox`` to redo that too).
    """
    tag = image_tag()
    old_id = _image_id(tag)
    if old_id is not None and not force:
        return tag
    say = progress or (lambda msg: None)
    cache = (cache_dir or paths.cache_dir()) / "sandbox"
    cache.mkdir(parents=True, exist_ok=True)
    rootfs = _rootfs_tarball(cache, mirror, say)
    base = _base_image(rootfs, say)
    with tempfile.TemporaryDirectory(prefix="site-", dir=cache) as tmp:
        site = _site_packages(cache, Path(tmp), say)
        _commit_image(base, site, tag, say)
    if old_id is not None and old_id != _image_id(tag):
        _remove_image(old_id)  # the image --force replaced, now untagged
    say(f"built {tag}")
    log.debug("built sandbox image %s", tag)
    return tag


def image_id(tag: str | None = None) -> str | None:
    """The id of the built image (``tag`` defaults to the current inputs' tag), or None."""
    return _image_id(tag or image_tag())


def _image_id(tag: str) -> str | None:
    try:
        return docker_client().images.get(tag).id
    except ImageNotFound:
        return None
    except DockerException as exc:
        raise SandboxError(f"cannot look up sandbox image: {exc}") from exc


def _remove_image(image_id: str) -> None:
    try:
        docker_client().images.remove(image_id)
    except DockerException as exc:  # still used by a container: leave it
        log.info("kept the replaced image %s: %s", image_id[:19], exc)


def _run(argv: list[str], what: str) -> None:
    log.debug("running %s", " ".join(argv))
    proc = subprocess.run(argv, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip()[-2000:]
        raise SandboxError(f"{what} failed (exit {proc.returncode}): {tail}")


def _rootfs_tarball(cache: Path, mirror: str, say: Progress) -> Path:
    out = cache / f"rootfs-{stable_hash(_rootfs_inputs(), length=12)}.tar"
    if out.exists():
        return out
    if shutil.which("debootstrap") is None:
        raise SandboxError("debootstrap is not installed: apt-get install debootstrap (as root)")
    if os.geteuid() != 0:
        raise SandboxError("building the sandbox root file system needs root (debootstrap)")
    say(f"debootstrap {SUITE} (minbase + {', '.join(DEB_PACKAGES)}) from {mirror}")
    with tempfile.TemporaryDirectory(prefix="rootfs-", dir=cache) as tmp:
        root = Path(tmp) / "root"
        _run(
            [
                "debootstrap",
                "--variant=minbase",
                f"--arch={_arch()[0]}",
                f"--include={','.join(DEB_PACKAGES)}",
                SUITE,
                str(root),
                mirror,
            ],
            "debootstrap",
        )
        _customise_rootfs(root)
        partial = Path(tmp) / "rootfs.tar"
        _run(["tar", "--numeric-owner", "-C", str(root), "-cf", str(partial), "."], "tar")
        partial.replace(out)
    return out


def _customise_rootfs(root: Path) -> None:
    """Add the sandbox user and the mount points; drop the package caches."""
    uid = SANDBOX_UID
    with (root / "etc/passwd").open("a") as fh:
        fh.write(f"sandbox:x:{uid}:{uid}:trajsynth sandbox:{WORKDIR}:/bin/sh\n")
    with (root / "etc/group").open("a") as fh:
        fh.write(f"sandbox:x:{uid}:\n")
    for mount in (WORKDIR, SITE_DIR, f"{SRC_DIR}/trajsynth"):
        (root / mount.lstrip("/")).mkdir(parents=True, exist_ok=True)
    os.chown(root / WORKDIR.lstrip("/"), uid, uid)
    for cache in ("var/cache/apt/archives", "var/lib/apt/lists"):
        for entry in (root / cache).glob("*"):
            if entry.is_file():
                entry.unlink()


def _base_image(rootfs: Path, say: Progress) -> str:
    tag = f"{BASE_REPO}:{rootfs.stem.removeprefix('rootfs-')}"
    if image_exists(tag):
        return tag
    say(f"docker import {rootfs.name} as {tag}")
    repo, _, version = tag.partition(":")
    try:
        docker_client().api.import_image_from_file(str(rootfs), repository=repo, tag=version)
    except DockerException as exc:
        raise SandboxError(f"docker import failed: {exc}") from exc
    return tag


def _pip_target_args() -> list[str]:
    arch = _arch()[1]
    platforms = [f"manylinux_2_{minor}_{arch}" for minor in range(GLIBC_MINOR, 16, -1)]
    args = ["--only-binary=:all:", "--python-version", PYTHON_VERSION, "--implementation", "cp"]
    for plat in [*platforms, f"manylinux2014_{arch}", f"linux_{arch}"]:
        args += ["--platform", plat]
    return args


def _site_packages(cache: Path, tmp: Path, say: Progress) -> Path:
    """Wheels downloaded once into the cache, then installed from them with no index."""
    reqs = site_requirements()
    wheels = cache / f"wheels-{stable_hash([reqs, _pip_target_args()], length=12)}"
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    if not (wheels / ".complete").exists():
        say(f"downloading wheels for {', '.join(reqs)}")
        wheels.mkdir(parents=True, exist_ok=True)
        _run([*pip, "download", "-d", str(wheels), *_pip_target_args(), *reqs], "pip download")
        (wheels / ".complete").touch()
    site = tmp / "site"
    say(f"installing {', '.join(reqs)} offline from {wheels.name}")
    _run(
        [
            *pip,
            "install",
            "--no-index",
            "--find-links",
            str(wheels),
            "--target",
            str(site),
            "--no-compile",
            *_pip_target_args(),
            *reqs,
        ],
        "pip install --target",
    )
    return site


def _site_tar(site: Path) -> bytes:
    buf = io.BytesIO()

    def owned_by_root(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.uid = info.gid = 0
        info.uname = info.gname = "root"
        info.mode = info.mode | 0o444 | (0o111 if info.isdir() or info.mode & 0o100 else 0)
        return info

    with tarfile.open(fileobj=buf, mode="w") as tar:
        tar.add(site, arcname=SITE_DIR.lstrip("/"), filter=owned_by_root)
    return buf.getvalue()


def _commit_image(base: str, site: Path, tag: str, say: Progress) -> None:
    say(f"installing the packages into {base} and committing {tag}")
    client = docker_client()
    repo, _, version = tag.partition(":")
    try:
        container = client.containers.create(
            base,
            ["python3", "-m", "compileall", "-q", "-j", "0", SITE_DIR],
            user="0:0",
            network_mode="none",
        )
    except DockerException as exc:
        raise SandboxError(f"cannot create the build container from {base}: {exc}") from exc
    try:
        container.put_archive("/", _site_tar(site))
        container.start()
        status = container.wait(timeout=600)
        if status.get("StatusCode") != 0:
            logs = container.logs().decode(errors="replace")[-2000:]
            raise SandboxError(f"byte-compiling the packages failed: {logs}")
        container.commit(
            repository=repo,
            tag=version,
            changes=[
                f"ENV PYTHONPATH={SITE_DIR}:{SRC_DIR}",
                "ENV PYTHONDONTWRITEBYTECODE=1",
                "ENV LANG=C.UTF-8",
                f"ENV HOME={WORKDIR}",
                f"WORKDIR {WORKDIR}",
                f"USER {SANDBOX_UID}:{SANDBOX_UID}",
                'CMD ["python3"]',
                f"LABEL trajsynth.inputs={stable_hash(image_inputs(), length=12)}",
            ],
        )
    except DockerException as exc:
        raise SandboxError(f"building {tag} failed: {exc}") from exc
    finally:
        try:
            container.remove(force=True)
        except DockerException as exc:
            log.debug("could not remove the build container: %s", exc)
