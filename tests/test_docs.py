"""The docs in docs/: every section the code cites exists, and the generated pages are current.

A docstring or comment cites a page by name and section (``methods.md §6``, ``design.md §3``,
``style.md §1``); a bare ``§6`` cites methods.md, the page the code cites most, unless a page
named earlier on the same line says otherwise. Ranges (``§9-§11``) check both ends.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
CODE = [ROOT / "src", ROOT / "tests", ROOT / "bench"]
SUFFIXES = {".py", ".toml", ".yaml"}

_SECTION = r"\d+(?:\.\d+)*"
# a page is cited as docs/NAME.md, or as NAME.md followed by a section sign
_TOKEN = re.compile(
    r"docs/(?P<page>[a-z0-9-]+\.md)|\b(?P<short>[a-z][a-z0-9-]*\.md)(?=(?:'s)?[\s,]*§)"
    rf"|§\s?(?P<a>{_SECTION})(?:\s?-\s?§?(?P<b>{_SECTION}))?"
)
_HEADING = re.compile(rf"^#{{1,4}} (?P<n>{_SECTION})\.? ", re.M)


def sections(page: Path) -> set[str]:
    """The section numbers of a page: its headings that start with a number."""
    return {m.group("n") for m in _HEADING.finditer(page.read_text())}


def citations(text: str) -> list[tuple[int, str, str | None]]:
    """``(line number, page, section or None)`` for every doc citation in ``text``."""
    out: list[tuple[int, str, str | None]] = []
    for number, line in enumerate(text.splitlines(), 1):
        page = None
        for m in _TOKEN.finditer(line):
            if m.group("page") or m.group("short"):
                page = m.group("page") or m.group("short")
                out.append((number, page, None))
                continue
            for section in (m.group("a"), m.group("b")):
                if section:
                    out.append((number, page or "methods.md", section))
    return out


def _code_files() -> list[Path]:
    return sorted(p for d in CODE for p in d.rglob("*") if p.suffix in SUFFIXES and p.is_file())


def broken_citations(files: list[Path], root: Path = ROOT) -> list[str]:
    """One line per citation in ``files`` of a page or section that docs/ does not have."""
    known = {p.name: sections(p) for p in DOCS.glob("*.md")}
    wrong = []
    for path in files:
        for number, page, section in citations(path.read_text(errors="replace")):
            where = f"{path.relative_to(root)}:{number}"
            if page not in known:
                wrong.append(f"{where}: cites {page}, which is not a page of docs/")
            elif section is not None and section not in known[page]:
                wrong.append(f"{where}: cites {page} §{section}, which has no such section")
    return wrong


def test_every_cited_doc_section_exists() -> None:
    wrong = broken_citations([p for p in _code_files() if p != Path(__file__).resolve()])
    assert not wrong, "\n".join(wrong)


def test_the_check_catches_a_missing_section_and_page(tmp_path: Path) -> None:
    good = tmp_path / "good.py"
    good.write_text('"""Rounds (design.md §9; docs/methods.md §6), trees (§9.2-§9.6)."""\n')
    bad = tmp_path / "bad.py"
    bad.write_text("# the rule of methods.md §6.9, design.md §3-§31, and docs/notes.md\n§99\n")
    assert broken_citations([good], tmp_path) == []
    assert broken_citations([bad], tmp_path) == [
        "bad.py:1: cites methods.md §6.9, which has no such section",
        "bad.py:1: cites design.md §31, which has no such section",
        "bad.py:1: cites notes.md, which is not a page of docs/",
        "bad.py:2: cites methods.md §99, which has no such section",
    ]


def test_the_configuration_reference_is_current() -> None:
    spec = importlib.util.spec_from_file_location("gen_config", DOCS / "gen_config.py")
    assert spec and spec.loader
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    committed = (DOCS / "configuration.md").read_text()
    assert committed == gen.render(), "docs/configuration.md is stale: python docs/gen_config.py"


def test_the_configuration_reference_names_every_run_field() -> None:
    from trajsynth.schemas import RunConfig

    page = (DOCS / "configuration.md").read_text()
    for name in RunConfig.model_fields:
        assert f"SYNTH_RUN__{name.upper()}" in page or f"[run.{name}]" in page, name


@pytest.mark.parametrize("page", sorted(p.name for p in DOCS.glob("*.md")))
def test_links_between_pages_resolve(page: str) -> None:
    text = (DOCS / page).read_text()
    for target, anchor in re.findall(r"\]\(([a-z0-9-]+\.md)(?:#([^)]+))?\)", text):
        assert (DOCS / target).is_file(), f"{page} links to missing {target}"
        if anchor:
            body = (DOCS / target).read_text()
            ids = set()
            for heading in re.findall(r"^#+ (.+)$", body, re.M):
                explicit = re.search(r"\{ ?#([\w.-]+) ?\}$", heading)
                ids.add(explicit.group(1) if explicit else _slug(heading))
            assert anchor in ids, f"{page} links to {target}#{anchor}, which is not there"


def _slug(heading: str) -> str:
    """The anchor mkdocs' toc extension gives a heading (its default slugify)."""
    text = re.sub(r"[^\w\s-]", "", heading.replace("`", "")).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def _change_table(text: str) -> str:
    """The table under the "Where a change goes" heading."""
    after = re.split(r"^#+ Where a change goes\s*$", text, flags=re.M)[1].strip().splitlines()
    rows = []
    for line in after:
        if not line.startswith("|"):
            break
        rows.append(line)
    return "\n".join(rows)


def test_the_where_a_change_goes_tables_agree() -> None:
    """The README keeps the table for newcomers and design.md for the site: one content."""
    readme = _change_table((ROOT / "README.md").read_text())
    design = _change_table((DOCS / "design.md").read_text())
    assert readme and readme == design
