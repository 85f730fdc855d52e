"""The documentation site builds with ``mkdocs build --strict``: no broken link or anchor, no
page missing from the nav, no nav entry left dangling (slow: mkdocs-material takes seconds)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_the_site_builds_strict(tmp_path: Path) -> None:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
        cwd=ROOT, capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    for page in ("index.html", "design/index.html", "methods/index.html"):
        assert (tmp_path / "site" / page).is_file(), page
    methods = (tmp_path / "site" / "methods" / "index.html").read_text()
    assert 'id="s6"' in methods and 'id="s9.2"' in methods
