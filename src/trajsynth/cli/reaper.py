"""Nothing outlives a killed ``synth``: a watchdog process that reaps what the command started.

A ``synth`` command starts servers that run in their own sessions (the embedded llama.cpp
server, Prefect's ephemeral API under uvicorn, sandbox relays), so a ``kill -9`` of the
command orphans them: they are re-parented to init and live on. ``PR_SET_PDEATHSIG`` cannot
cover them all (Prefect starts its server itself, and the signal fires when the *thread* that
forked ends). So ``guard_descendants()`` starts a small watchdog in a session of its own, tied
to the command by a pipe only the command holds: the watchdog keeps a list of the command's
descendants (pid and start time, so a reused pid is never hit), and when the pipe closes (the
command ended, however it ended) it terminates whatever on that list still runs, then kills
what ignores the request, then removes the Docker containers labelled with the command's pid.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import select
import subprocess
import sys

import psutil

__all__ = ["guard_descendants", "reap", "track_now", "watch"]

log = logging.getLogger(__name__)


_watchdog: subprocess.Popen[bytes] | None = None


def guard_descendants(*, poll_s: float = 0.5, grace_s: float = 5.0) -> int:
    """Start the watchdog for this process (once); returns its pid."""
    global _watchdog
    if _watchdog is not None and _watchdog.poll() is None:
        return _watchdog.pid
    _watchdog = subprocess.Popen(
        [sys.executable, "-m", __name__, "--parent", str(os.getpid()),
         "--poll-s", str(poll_s), "--grace-s", str(grace_s)],
        stdin=subprocess.PIPE,  # the tie: EOF when this process ends, however it ends
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # a Ctrl-C or a group kill of the command must not reach it
    )  # fmt: skip
    assert _watchdog.stdout is not None
    _watchdog.stdout.readline()  # "ready": its first list is taken
    return _watchdog.pid


def track_now() -> None:
    """Have the watchdog list this process's descendants now (call it after starting a
    server), instead of at its next poll; a no-op when no watchdog runs."""
    if _watchdog is None or _watchdog.poll() is not None:
        return
    assert _watchdog.stdin is not None and _watchdog.stdout is not None
    _watchdog.stdin.write(b"track\n")
    _watchdog.stdin.flush()
    _watchdog.stdout.readline()


def _snapshot(parent: psutil.Process, seen: dict[int, float], me: int) -> None:
    for child in parent.children(recursive=True):
        if child.pid == me:
            continue
        with contextlib.suppress(psutil.Error):
            seen[child.pid] = child.create_time()
    for pid in [p for p in seen if not psutil.pid_exists(p)]:
        del seen[pid]


def _still_same(pid: int, created: float) -> psutil.Process | None:
    try:
        proc = psutil.Process(pid)
        return proc if proc.create_time() == created else None
    except psutil.Error:
        return None


def reap(seen: dict[int, float], parent_pid: int, *, grace_s: float = 5.0) -> int:
    """Terminate, then kill, every process of ``seen`` that is still the one recorded; remove
    the Docker containers the parent labelled. Returns how many processes were ended."""
    procs = [p for pid, t in seen.items() if (p := _still_same(pid, t)) is not None]
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.terminate()
    _, alive = psutil.wait_procs(procs, timeout=grace_s)
    for proc in alive:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    psutil.wait_procs(alive, timeout=grace_s)
    _remove_containers(parent_pid)
    return len(procs)


def _remove_containers(parent_pid: int) -> None:
    try:
        import docker  # imported here: most commands never start a container

        from trajsynth.sandboxes.docker_sandbox import OWNER_LABEL

        client = docker.from_env(timeout=10)
        for container in client.containers.list(
            all=True, filters={"label": f"{OWNER_LABEL}={parent_pid}"}
        ):
            with contextlib.suppress(Exception):
                container.remove(force=True)
    except Exception:  # no engine, no socket: nothing of ours can be running there
        return


def watch(parent_pid: int, *, poll_s: float = 0.5, grace_s: float = 5.0) -> int:
    """The watchdog's loop: track the parent's descendants until stdin closes, then reap."""
    me = os.getpid()
    seen: dict[int, float] = {}
    try:
        parent = psutil.Process(parent_pid)
    except psutil.NoSuchProcess:
        return 0
    answer = "ready"
    while True:
        if not parent.is_running():  # a forked child may still hold the pipe open
            break
        with contextlib.suppress(psutil.Error):
            _snapshot(parent, seen, me)
        if answer:
            with contextlib.suppress(OSError):  # the parent may be gone already
                os.write(sys.stdout.fileno(), f"{answer}\n".encode())
            answer = ""
        ready, _, _ = select.select([sys.stdin.fileno()], [], [], poll_s)
        if ready:
            request = os.read(sys.stdin.fileno(), 4096)
            if not request:
                break
            answer = "tracked"
    return reap(seen, parent_pid, grace_s=grace_s)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "reaper").splitlines()[0])
    parser.add_argument("--parent", type=int, required=True)
    parser.add_argument("--poll-s", type=float, default=0.5)
    parser.add_argument("--grace-s", type=float, default=5.0)
    args = parser.parse_args(argv)
    watch(args.parent, poll_s=args.poll_s, grace_s=args.grace_s)


if __name__ == "__main__":
    main()
