"""Public MCP servers installed from their registries for the slow tests: a PyPI package into
its own venv, npm packages into one prefix, each under a test's temp folder. Not fakes: the
real servers; a test that uses them skips where the registry, npm or node is missing."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest


def pypi_server(tmp: Path, package: str, *extra: str) -> Path:
    """``package`` (and ``extra`` requirements) installed into a venv ``tmp/package``; the
    path of its console script of the same name."""
    venv = tmp / package
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = subprocess.run(
        [str(venv / "bin/pip"), "install", "-q", package, *extra],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    if pip.returncode != 0:
        pytest.skip(f"PyPI unreachable or {package} failed to install: {pip.stderr[-300:]}")
    return venv / "bin" / package


def npm_servers(prefix: Path, *packages: str) -> Path:
    """``packages`` installed into the npm prefix ``prefix``; its ``node_modules/.bin``."""
    if shutil.which("npm") is None or shutil.which("node") is None:
        pytest.skip("npm or node is not installed")
    npm = subprocess.run(
        ["npm", "install", "--prefix", str(prefix), *packages],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    if npm.returncode != 0:
        pytest.skip(f"npm registry unreachable: {npm.stderr[-300:]}")
    return prefix / "node_modules" / ".bin"
