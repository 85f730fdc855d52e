"""Start the Streamlit dashboard server on loopback, and wait for it to answer."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

from trajsynth.schemas import InfraError
from trajsynth.schemas.health import wait_until_answers

__all__ = ["APP_PATH", "dashboard_command", "free_port", "start_dashboard", "wait_until_ready"]

APP_PATH = Path(__file__).with_name("app.py")


def dashboard_command(store_path: Path | str, *, port: int, host: str = "127.0.0.1") -> list[str]:
    """The ``streamlit run`` command line for the dashboard over ``store_path``."""
    return [
        sys.executable, "-m", "streamlit", "run", str(APP_PATH),
        "--server.address", host,
        "--server.port", str(port),
        "--server.headless", "true",
        "--server.fileWatcherType", "none",
        "--server.runOnSave", "false",
        "--browser.gatherUsageStats", "false",
        "--global.developmentMode", "false",
        "--client.toolbarMode", "minimal",
        "--theme.base", "light",
        "--",
        "--store", str(Path(store_path).resolve()),
    ]  # fmt: skip


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free on ``host`` right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def start_dashboard(
    store_path: Path | str, *, port: int, host: str = "127.0.0.1", log_path: Path | None = None
) -> subprocess.Popen[bytes]:
    """Start the server in the background; the caller stops it (``terminate``)."""
    log_file = open(log_path, "wb") if log_path else None  # noqa: SIM115
    try:
        return subprocess.Popen(
            dashboard_command(store_path, port=port, host=host),
            stdout=log_file if log_file is not None else subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    finally:
        if log_file is not None:
            log_file.close()


def wait_until_ready(
    url: str, *, timeout_s: float = 60.0, process: subprocess.Popen[bytes] | None = None
) -> None:
    """Poll Streamlit's health endpoint until it answers ``ok``; raise ``InfraError`` if the
    process exits first or the time runs out."""
    health = url.rstrip("/") + "/_stcore/health"
    if not wait_until_answers(
        health,
        process=process,
        timeout_s=timeout_s,
        exited=lambda code: InfraError(f"the dashboard server exited with code {code}"),
        request_timeout_s=1.0,
    ):
        raise InfraError(f"the dashboard at {url} did not answer within {timeout_s:.0f} s")
