"""Stored goals against today's words check, and today's template over the same paths.

For every blueprint of the stores given (e.g. the databases ``bench/outside.py`` leaves under
``/tmp/outside-bench-<server>-*/data/synth.duckdb``, with the cluster beside them in
``data/clusters/<id>.json``), rebuilds the words' spec as the planner does
(``planning.words.words_spec`` from the stored path, slots and gold run; the question from
``pick_answer`` on a read-only path), then prints per server how many of the stored goals the
words check refuses now, by kind, and how many of the goals today's template writes for the
same paths it refuses. ``-v`` prints each stored goal, its problems and today's template goal.
The stores are opened read-only.

Run: ``PYTHONPATH=src python bench/goal_words.py '/tmp/outside-bench-*/data/synth.duckdb'
[--before 2026-11-29T04:35] [-v]``.
"""

from __future__ import annotations

import argparse
import glob
import json
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import duckdb

from trajsynth.planning.words import (
    Words,
    check_words,
    pick_answer,
    template_words,
    words_spec,
)
from trajsynth.schemas import GoldCall, PlannedCall, ReasoningMode, ToolAccess, ToolCluster

_COLUMNS = "goal, persona, hidden_info, tool_path, slots, gold_run, cell, cluster_id"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("stores", nargs="+", help="DuckDB files or glob patterns")
    parser.add_argument("--before", help="only stores last written before this UTC time")
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args()
    cut = (
        datetime.fromisoformat(args.before).replace(tzinfo=UTC).timestamp() if args.before else None
    )
    stores = sorted({p for pattern in args.stores for p in glob.glob(pattern)})
    seen: Counter[str] = Counter()
    refused: Counter[str] = Counter()
    kinds: Counter[str] = Counter()
    fresh: Counter[str] = Counter()
    for store in stores:
        path = Path(store)
        if cut is not None and path.stat().st_mtime >= cut:
            continue
        with duckdb.connect(store, read_only=True) as con:
            rows = con.execute(f"SELECT {_COLUMNS} FROM blueprints").fetchall()
        for goal, persona, hidden, tool_path, slots, gold, cell, cluster_id in rows:
            clusters = path.parent / "clusters" / f"{cluster_id}.json"
            cluster = ToolCluster.model_validate_json(clusters.read_text())
            access = {t.name: t.access for t in cluster.tools}
            steps = [PlannedCall.model_validate(s) for s in json.loads(tool_path)]
            calls = [GoldCall.model_validate(c) for c in json.loads(gold)["calls"]]
            values = json.loads(slots)
            writes = any(access.get(s.tool) is ToolAccess.WRITE for s in steps)
            answer = None
            if not writes and calls:
                answer = pick_answer(calls, values, inputs=list(calls[-1].arguments))
            mode = ReasoningMode(json.loads(cell)["target_mode"])
            spec = words_spec(cluster, mode, steps, values, calls, answer)
            stored = Words(persona=persona, goal=goal, hidden_info=json.loads(hidden or "{}"))
            problems = check_words(stored, spec)
            today = template_words(spec)
            again = check_words(today, spec)
            seen[cluster_id] += 1
            refused[cluster_id] += bool(problems)
            fresh[cluster_id] += bool(again)
            kinds.update({p.split(":")[0] for p in problems})
            if args.verbose:
                print(f"[{cluster_id}] {mode}\n  stored: {goal}\n    refused: {problems}")
                print(f"  today:  {today.goal}\n    refused: {again}")
    print("server | stored goals | refused now | today's template refused")
    for name in sorted(seen):
        print(f"{name} | {seen[name]} | {refused[name]} | {fresh[name]}")
    total = sum(seen.values())
    print(f"all | {total} | {sum(refused.values())} | {sum(fresh.values())}")
    print("refusals by kind:", dict(kinds.most_common()))


if __name__ == "__main__":
    main()
