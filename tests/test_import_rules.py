"""The import table of docs/design.md, checked on every module of the package.

The table is read from the page itself, so the page a maintainer reads and the rule the test
holds cannot drift apart. Each package may import the packages its row names (a dotted name
allows only that module). The crossings the page's second table lists, each with its reason,
are allowed (at most one); a new one fails this test. No package imports another in a circle.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "trajsynth"
DESIGN = ROOT / "docs" / "design.md"


def _tables(text: str) -> list[list[list[str]]]:
    """Every Markdown table of ``text`` as rows of stripped cells (header first, rule dropped)."""
    tables: list[list[list[str]]] = []
    current: list[list[str]] = []
    for line in [*text.splitlines(), ""]:
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if not all(set(c) <= {"-", ":", " "} for c in cells):
                current.append(cells)
        elif current:
            tables.append(current)
            current = []
    return tables


def _names(cell: str) -> set[str]:
    """The backticked names of a cell, without a trailing ``/``."""
    return {n.rstrip("/") for n in re.findall(r"`([^`]+)`", cell)}


def _read_design() -> tuple[dict[str, set[str]], dict[tuple[str, tuple[str, ...]], str]]:
    rules: dict[str, set[str]] = {}
    crossings: dict[tuple[str, tuple[str, ...]], str] = {}
    for table in _tables(DESIGN.read_text()):
        header = [c.lower() for c in table[0]]
        if header[0] == "package" and header[-1] == "may import":
            for row in table[1:]:
                (package,) = _names(row[0])
                rules[package] = _names(row[-1])
        elif header[0].startswith("importer"):
            for row in table[1:]:
                src = re.findall(r"`([^`]+)`", row[0])[0]
                crossings[(src, tuple(sorted(_names(row[1]))))] = row[2]
    assert rules, f"no import table (header 'package | ... | may import') in {DESIGN}"
    return rules, crossings


MAY_IMPORT, CROSSINGS = _read_design()


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
    assert package in MAY_IMPORT, f"{package}/ is not in the table of docs/design.md"
    wrong = {m for m in _imports(path) if not _allowed(package, m) and not _crossing(rel, m)}
    assert not wrong, f"{rel} imports {sorted(wrong)}; {package}/ may import {MAY_IMPORT[package]}"


def test_every_named_crossing_still_exists() -> None:
    assert len(CROSSINGS) <= 1
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
