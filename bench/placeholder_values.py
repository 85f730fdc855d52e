"""Blueprints whose argument values the value check refuses, read from stored runs.

For each store given (a ``synth.duckdb`` of ``bench/outside.py`` or ``synth run``), every
blueprint's slot values are read by ``planning.values.placeholder_reason`` against the tool's
own schema and the texts a fill request shows beside them (the tool's description and name,
the server's description), and the blueprints carrying a refused value are counted, each
refused value printed with why. A store planned before the check shows what it would have
refused; one planned after it should show none, and real values (time zones, paths) none
either.

Run: ``PYTHONPATH=src python bench/placeholder_values.py /tmp/outside-bench-*/data/synth.duckdb``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import duckdb

from trajsynth.planning.values import placeholder_reason


def refused_values(db: Path) -> tuple[int, list[list[str]]]:
    """(blueprints, the refused values of each blueprint that has any)."""
    con = duckdb.connect(str(db), read_only=True)
    try:
        row = con.execute("select description from clusters").fetchone()
        server = str(row[0]) if row else ""
        tools = {
            name: (desc or "", json.loads(schema or "{}"))
            for name, desc, schema in con.execute(
                "select name, description, input_schema from tools"
            ).fetchall()
        }
        rows = con.execute("select tool_path, slots from blueprints").fetchall()
    finally:
        con.close()
    found: list[list[str]] = []
    for path, slots in rows:
        values = json.loads(slots or "{}")
        reasons = []
        for step in json.loads(path or "[]"):
            desc, schema = tools.get(step["tool"], ("", {}))
            props = schema.get("properties") or {}
            for param, arg in step["args"].items():
                if arg.get("kind") != "slot" or arg.get("name") not in values:
                    continue
                value = values[arg["name"]]
                said = [desc, step["tool"], server]
                why = placeholder_reason(value, props.get(param) or {}, said, param=param)
                if why:
                    shown = json.dumps(value)[:80]
                    reasons.append(f"{step['tool']}.{param} = {shown}: {why}")
        if reasons:
            found.append(reasons)
    return len(rows), found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("stores", nargs="+", type=Path)
    args = parser.parse_args()
    for db in args.stores:
        total, found = refused_values(db)
        print(f"{db}: {len(found)}/{total} blueprints carry a value the check refuses")
        for reasons in found:
            for reason in reasons:
                print(f"    {reason}")


if __name__ == "__main__":
    main()
