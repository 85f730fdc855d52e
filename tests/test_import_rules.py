"""DESIGN.md's "who may import whom", checked on every module of the package.

Each package may import the packages its row of the table names (a dotted name allows only
that module). The few crossings the table does not list are named below with their reason;
a new one fails this test.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "trajsynth"

MAY_IMPORT: dict[str, set[str]] = {
    "schemas": set(),
    "sandboxes": {"schemas"},
    "mcp_servers": {"schemas", "sandboxes"},
    "agents": {"schemas", "sandboxes", "mcp_servers", "curation.signals", "curation.verify"},
    "curation": {"schemas"},
    "training": {"schemas", "curation.verify", "mcp_servers", "sandboxes"},
    "synth": {"schemas", "sandboxes", "mcp_servers", "agents", "curation", "training"},
    "flows": {"schemas", "sandboxes", "mcp_servers", "agents", "curation", "training", "synth"},
    "dashboards": {"synth.store", "schemas"},
}

# (importing module, imported module): why the table's rule gives way
CROSSINGS: dict[tuple[str, str], str] = {
    ("synth/run_command.py", "flows"): "the CLI's `synth run` starts the build_dataset flow",
    ("synth/commands/deploy.py", "flows"): "the CLI's `synth deploy|serve` serves the flows",
    ("synth/commands/dashboard.py", "dashboards"): "the CLI's `synth dashboard` starts it",
    ("dashboards/app.py", "synth.views"): "read-only drawing of a stored quotient graph",
    ("agents/planner.py", "curation.constraint_lint"): "the lint is verify run on the "
    "initial state: verify's own checks, before a plan is accepted",
    ("agents/words.py", "curation.canon"): "the canonical identifier rule verify uses, so "
    "planned words and verified arguments agree",
}


def _imports(path: Path) -> set[str]:
    """The trajsynth modules ``path`` imports, at any depth (lazy imports included)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.startswith("trajsynth."):
                out.add(node.module.removeprefix("trajsynth."))
        elif isinstance(node, ast.Import):
            out |= {a.name.removeprefix("trajsynth.") for a in node.names
                    if a.name.startswith("trajsynth.")}  # fmt: skip
    return out


def _allowed(package: str, module: str) -> bool:
    if module.split(".")[0] == package:
        return True
    return any(module == rule or module.startswith(rule + ".") for rule in MAY_IMPORT[package])


MODULES = sorted(p for p in SRC.rglob("*.py") if len(p.relative_to(SRC).parts) > 1)


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(SRC)))
def test_each_module_imports_only_what_its_package_may(path: Path) -> None:
    rel = path.relative_to(SRC).as_posix()
    package = rel.split("/")[0]
    if package not in MAY_IMPORT:
        pytest.skip(f"{package}/ is not in DESIGN.md's table")
    wrong = {
        m
        for m in _imports(path)
        if not _allowed(package, m)
        and not any(rel == src and (m == dst or m.startswith(dst + ".")) for src, dst in CROSSINGS)
    }
    assert not wrong, f"{rel} imports {sorted(wrong)}; {package}/ may import {MAY_IMPORT[package]}"


def test_every_named_crossing_still_exists() -> None:
    for src, dst in CROSSINGS:
        found = _imports(SRC / src)
        assert any(m == dst or m.startswith(dst + ".") for m in found), (src, dst)
