"""DESIGN.md's "who may import whom", checked on every module of the package.

Each package may import the packages its row of the table names (a dotted name allows only
that module). The crossings the table does not list are named below with their reason (at
most two); a new one fails this test. No package imports another in a circle.
"""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx
import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "trajsynth"

_BELOW_TOP = {
    "schemas",
    "sandboxes",
    "mcp_servers",
    "curation",
    "agents",
    "training",
    "store",
    "export",
}
MAY_IMPORT: dict[str, set[str]] = {
    "schemas": set(),
    "sandboxes": {"schemas"},
    "mcp_servers": {"schemas", "sandboxes"},
    "curation": {"schemas"},
    "agents": {"schemas", "sandboxes", "mcp_servers", "curation"},
    "training": {"schemas", "sandboxes", "mcp_servers", "curation", "agents"},
    "store": {"schemas"},
    "export": {"schemas", "store", "curation"},
    "flows": _BELOW_TOP,
    "cli": _BELOW_TOP,
    "dashboards": {"schemas", "store", "curation"},
}

# (importing file, or folder ending in "/"; the modules it may import): why the table's rule
# gives way. At most two.
CROSSINGS: dict[tuple[str, tuple[str, ...]], str] = {
    ("cli/", ("flows", "dashboards")): "the `synth` command starts the flows (`synth run`, "
    "`deploy`, `serve`) and the dashboard: the top floor's entry point wires its neighbours",
    ("export/write.py", ("training.chat_template",)): "the export counts SFT tokens under the "
    "tool-aware chat template the trainer renders with, so both agree on the mask",
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


def _hit(module: str, dsts: tuple[str, ...]) -> bool:
    return any(module == dst or module.startswith(dst + ".") for dst in dsts)


def _crossing(rel: str, module: str) -> bool:
    return any(
        (rel == src or (src.endswith("/") and rel.startswith(src))) and _hit(module, dsts)
        for src, dsts in CROSSINGS
    )


MODULES = sorted(p for p in SRC.rglob("*.py") if len(p.relative_to(SRC).parts) > 1)


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(SRC)))
def test_each_module_imports_only_what_its_package_may(path: Path) -> None:
    rel = path.relative_to(SRC).as_posix()
    package = rel.split("/")[0]
    assert package in MAY_IMPORT, f"{package}/ is not in DESIGN.md's table"
    wrong = {m for m in _imports(path) if not _allowed(package, m) and not _crossing(rel, m)}
    assert not wrong, f"{rel} imports {sorted(wrong)}; {package}/ may import {MAY_IMPORT[package]}"


def test_every_named_crossing_still_exists() -> None:
    assert len(CROSSINGS) <= 2
    for src, dsts in CROSSINGS:
        files = sorted((SRC / src).rglob("*.py")) if src.endswith("/") else [SRC / src]
        found = set().union(*(_imports(f) for f in files))
        for dst in dsts:
            assert any(_hit(m, (dst,)) for m in found), (src, dst)


def test_no_package_imports_another_in_a_circle() -> None:
    graph = nx.DiGraph()
    for path in MODULES:
        package = path.relative_to(SRC).parts[0]
        graph.add_node(package)
        for module in _imports(path):
            if module.split(".")[0] != package:
                graph.add_edge(package, module.split(".")[0])
    assert list(nx.simple_cycles(graph)) == []
