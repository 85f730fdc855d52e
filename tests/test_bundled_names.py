"""No second list of bundled clusters: the ``trajsynth.clusters`` entry points are the only one.

Reads every module under ``src/trajsynth`` and fails on a literal that enumerates bundled
clusters (three or more names in one list, tuple or set), a table keyed by cluster name (a
dict literal with two or more of them as keys), or a name check (``name == "shop"``,
``name in {...}``). The names come from the entry points, so this test keeps no list either.
"""

from __future__ import annotations

import ast
import importlib.metadata
from pathlib import Path

from trajsynth.mcp_servers.registry import ENTRY_POINT_GROUP

SRC = Path(__file__).parents[1] / "src" / "trajsynth"


def _bundled() -> frozenset[str]:
    eps = importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)
    return frozenset(ep.name for ep in eps if ep.dist is not None and ep.dist.name == "trajsynth")


def _strings(nodes: list[ast.expr | None]) -> list[str]:
    return [n.value for n in nodes if isinstance(n, ast.Constant) and isinstance(n.value, str)]


def _second_lists(tree: ast.AST, names: frozenset[str]) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.List | ast.Tuple | ast.Set):
            hits = set(_strings(list(node.elts))) & names
            if len(hits) >= 3:
                found.append((node.lineno, f"a list of bundled clusters {sorted(hits)}"))
        elif isinstance(node, ast.Dict):
            hits = set(_strings(node.keys)) & names
            if len(hits) >= 2:
                found.append((node.lineno, f"a table keyed by cluster name {sorted(hits)}"))
        elif isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            hits = set(_strings(list(operands))) & names
            for operand in operands:
                if isinstance(operand, ast.List | ast.Tuple | ast.Set):
                    hits |= set(_strings(list(operand.elts))) & names
            if hits:
                found.append((node.lineno, f"a check against cluster names {sorted(hits)}"))
    return found


def test_the_entry_points_name_the_bundled_clusters() -> None:
    assert _bundled() == {"calendar", "code", "shop", "travel"}


def test_no_module_keeps_a_second_list_of_bundled_clusters() -> None:
    names = _bundled()
    problems = []
    for path in sorted(SRC.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        problems += [
            f"{path.relative_to(SRC)}:{n}: {what}" for n, what in _second_lists(tree, names)
        ]
    assert problems == []


def test_the_check_finds_each_kind_of_second_list() -> None:
    """The scan is not vacuous: each pattern it forbids is found in a sample."""
    names = frozenset({"calendar", "code", "shop", "travel"})
    sample = """
BUNDLED = ("shop", "travel", "calendar", "code")
PERSONAS = {"shop": "A shopper.", "travel": "A traveller."}
if name in {"code"}: pass
if name == "shop": pass
SMOKE = ["shop", "calendar"]
"""
    found = _second_lists(ast.parse(sample), names)
    assert [line for line, _ in found] == [2, 3, 4, 5]
