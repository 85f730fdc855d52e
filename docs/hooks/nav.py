"""mkdocs hook: leave out of the nav the pages that are named there but not written yet.

The nav names pages that land on other branches (docs/verification.md, ...). Without this hook
a strict build fails on every such entry until the page exists; with it, the entry appears as
soon as the page does, and a page that exists but is missing from the nav still fails the
strict build (``validation.nav.omitted_files``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def _present(item: Any, docs_dir: Path) -> Any:
    if isinstance(item, str):
        return item if not item.endswith(".md") or (docs_dir / item).is_file() else None
    if isinstance(item, dict):
        kept = {}
        for title, value in item.items():
            value = _present(value, docs_dir)
            if value not in (None, []):
                kept[title] = value
        return kept or None
    if isinstance(item, list):
        return [v for v in (_present(i, docs_dir) for i in item) if v is not None]
    return item


def on_config(config: Any, **_: Any) -> Any:
    if config.nav:
        config.nav = _present(config.nav, Path(config.docs_dir))
    return config
