"""The code cluster's state: the files of a small project in the work directory.

The first start writes a small seeded project from ``seed.json`` beside this module (an
inventory module with one real bug, its unittest tests, and CSV data whose quantities
``$TRAJSYNTH_SEED`` perturbs).

Imported by ``server.py`` (the tools) and by ``_state --init``, which seeds a work
directory without loading the server (this module imports no ``mcp``).
"""

from __future__ import annotations

import csv
import io
import random
from pathlib import Path
from typing import Any

from trajsynth.mcp_servers.servers._backend import FileStore

__all__ = ["STORE"]


def _csv(rows: list[dict[str, Any]]) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(rows[0]), lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buf.getvalue()


def _seed_files(data: dict[str, Any], rng: random.Random) -> dict[str, str]:
    """The project files; the rng moves stock and sales quantities."""
    files = dict(data["files"])
    stock = [
        {**r, "qty": max(0, r["qty"] + rng.randint(-3, 3)) if r["qty"] else 0}
        for r in data["stock"]
    ]
    sales = [{**r, "qty": max(1, r["qty"] + rng.randint(-1, 2))} for r in data["sales"]]
    files["data/stock.csv"] = _csv(stock)
    files["data/sales.csv"] = _csv(sales)
    return files


STORE = FileStore("code", _seed_files, Path(__file__).with_name("seed.json"))
