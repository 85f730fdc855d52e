"""Outside MCP servers end to end: join, discover, plan, act, verify.

For each public server installed from a registry (PyPI venvs under ``--venvs``, npm packages
under ``--npm``): ``synth clusters add`` (the server started as a run starts it), then
``synth run`` with the embedded model in a fresh folder, and per server:

    joined, tools, tags agreeing with the server's own annotations (probing with the
    annotations ignored), edges with evidence, blueprints planned / accepted (>= 2 calls),
    trajectories stored, verified passes, blueprints the mutation lint leaves with no wrong
    variant passing, write tasks whose final-state check a wrong variant fails, read-backs
    the probe search found over the blueprints it searched for, gold runs
    rejected for a failing step and accepted with an error result, pseudo-calls per 100
    calls (``_checks``), minutes; and three planned goals per server, to read

with the targets beside the figures. Install the servers first, e.g.::

    python3.11 -m venv /tmp/outside-venvs/time && /tmp/outside-venvs/time/bin/pip install \
        mcp-server-time
    python3.11 -m venv /tmp/outside-venvs/sqlite && /tmp/outside-venvs/sqlite/bin/pip install \
        mcp-server-sqlite 'mcp<2'
    npm install --prefix /tmp/outside-npm @modelcontextprotocol/server-filesystem \
        @modelcontextprotocol/server-memory @modelcontextprotocol/server-everything

Run: ``PYTHONPATH=src python bench/outside.py --tasks 10 --samples 4``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import duckdb

from trajsynth.mcp_servers.discovery import discover
from trajsynth.mcp_servers.environment import open_environment
from trajsynth.mcp_servers.registry import get_cluster, tool_spec


def _seed_docs() -> Path:
    """A small folder the filesystem server gets a copy of (``--copy``)."""
    docs = Path(tempfile.mkdtemp(prefix="outside-bench-docs-")) / "docs"
    docs.mkdir()
    (docs / "meeting.txt").write_text("Meeting at 10am with Sam about the budget.\n")
    (docs / "groceries.txt").write_text("milk\neggs\nbread\n")
    return docs


# a user's small shop database: the sqlite server gets a copy (``--copy``), so its reads
# return the user's tables and rows, as a database a user connects would
_SHOP_SQL = """
CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT NOT NULL, city TEXT NOT NULL);
CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER NOT NULL REFERENCES customers,
                     item TEXT NOT NULL, amount REAL NOT NULL, ordered_on TEXT NOT NULL);
INSERT INTO customers VALUES (1, 'Ada Lovelace', 'London'), (2, 'Grace Hopper', 'New York'),
                             (3, 'Alan Turing', 'Manchester');
INSERT INTO orders VALUES (1, 1, 'notebook', 12.5, '2026-11-02'), (2, 2, 'keyboard', 49.0,
  '2026-11-03'), (3, 1, 'fountain pen', 30.0, '2026-11-10'), (4, 3, 'chess set', 75.0,
  '2026-11-12');
"""
# a user's small knowledge graph: the memory server reads it from its file (a copy)
_GRAPH = [
    {"type": "entity", "name": "Ada Lovelace", "entityType": "person",
     "observations": ["Wrote the first program for the Analytical Engine"]},
    {"type": "entity", "name": "Charles Babbage", "entityType": "person",
     "observations": ["Designed the Analytical Engine"]},
    {"type": "entity", "name": "Analytical Engine", "entityType": "machine",
     "observations": ["A mechanical general-purpose computer"]},
    {"type": "relation", "from": "Ada Lovelace", "to": "Analytical Engine",
     "relationType": "programmed"},
    {"type": "relation", "from": "Charles Babbage", "to": "Analytical Engine",
     "relationType": "designed"},
]  # fmt: skip
# where the memory server keeps its graph in the sandbox (its work dir, where --copy lands)
MEMORY_FILE = "/work/memory.jsonl"


def _seed_database() -> Path:
    """The shop database the sqlite server gets a copy of."""
    import sqlite3

    path = Path(tempfile.mkdtemp(prefix="outside-bench-db-")) / "bench.db"
    with sqlite3.connect(path) as con:
        con.executescript(_SHOP_SQL)
    return path


def _seed_graph() -> Path:
    """The knowledge graph the memory server gets a copy of (one JSON record a line)."""
    path = Path(tempfile.mkdtemp(prefix="outside-bench-graph-")) / "memory.jsonl"
    path.write_text("".join(json.dumps(record) + "\n" for record in _GRAPH))
    return path


def servers(venvs: Path, npm: Path, empty: bool = False) -> dict[str, tuple[list[str], list[str]]]:
    """name -> (command, extra `clusters add` options). ``empty``: sqlite and memory start
    with nothing, as before they were given a user's data."""
    bin_ = npm / "node_modules" / ".bin"
    database = [] if empty else ["--copy", f"{_seed_database()}:bench.db"]
    graph = [] if empty else ["--copy", f"{_seed_graph()}:memory.jsonl"]
    return {
        "time": ([str(venvs / "time/bin/mcp-server-time")], []),
        "sqlite": (
            [str(venvs / "sqlite/bin/mcp-server-sqlite"), "--db-path", "bench.db"],
            database,
        ),
        "memory": (
            ["node", str(bin_ / "mcp-server-memory")],
            ["--env", f"MEMORY_FILE_PATH={MEMORY_FILE}", *graph],
        ),
        "filesystem": (
            ["node", str(bin_ / "mcp-server-filesystem"), "."],
            ["--copy", f"{_seed_docs()}:docs"],
        ),
        "everything": (["node", str(bin_ / "mcp-server-everything")], []),
    }


def synth(args: list[str], cwd: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200", "MEMORY_FILE_PATH": MEMORY_FILE}
    return subprocess.run(
        [sys.executable, "-m", "trajsynth.cli", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


async def tag_agreement(name: str, clusters_dir: Path) -> tuple[int, int]:
    """Tools with annotations whose probed tag (annotations ignored) agrees with them."""
    cluster = get_cluster(name, clusters_dir=clusters_dir)
    annotated = [t for t in cluster.tools if t.access_source == "annotation"]
    if not annotated:
        return 0, 0
    os.environ.setdefault("MEMORY_FILE_PATH", MEMORY_FILE)
    async with open_environment(cluster) as env:
        blind = [tool_spec({"name": t.name, "inputSchema": t.input_schema}) for t in cluster.tools]
        found = await discover(env, blind, fixed=cluster.server.args)
    probed = {t.name: t.access for t in found.tools}
    agree = sum(probed[t.name] == t.access for t in annotated)
    return agree, len(annotated)


def one(
    name: str,
    command: list[str],
    extra: list[str],
    tasks: int,
    samples: int,
    rollout: str,
    llm_edges: bool = False,
    user_stop_when_met: str = "default",
    distractors: int | None = None,
) -> dict:
    work = Path(tempfile.mkdtemp(prefix=f"outside-bench-{name}-"))
    run_section = (
        f"[run]\nuser_stop_when_met = {'true' if user_stop_when_met == 'on' else 'false'}\n"
        if user_stop_when_met != "default"
        else ""
    )
    shown = f"distractors = {distractors}\n" if distractors is not None else ""
    (work / "synth.toml").write_text("[llm]\nembedded_ctx = 8192\n" + shown + run_section)
    started = time.perf_counter()
    row: dict = {"server": name, "joined": False}
    flags = ["--llm-edges"] if llm_edges else []
    added = synth(["clusters", "add", name, *flags, *extra, "--", *command], work, 300)
    if added.returncode != 0:
        row["error"] = (added.stderr or added.stdout).strip().splitlines()[-1:]
        row["minutes"] = (time.perf_counter() - started) / 60
        return row
    row["joined"] = True
    clusters_dir = work / "data" / "clusters"
    cluster = get_cluster(name, clusters_dir=clusters_dir)
    row["tools"] = len(cluster.tools)
    row["edges_evidence"] = sum(1 for e in cluster.edges if e.evidence)
    row["edges_llm"] = sum(1 for e in cluster.edges if e.origin == "llm")
    row["probes"] = len(cluster.probes)
    try:
        row["tags_agree"] = asyncio.run(tag_agreement(name, clusters_dir))
    except Exception as exc:  # noqa: BLE001 - a bench row records the fault and goes on
        row["tags_agree"] = f"error: {exc}"[:80]
    ran = synth(
        [
            "run",
            "--clusters",
            name,
            "--tasks",
            str(tasks),
            "--samples",
            str(samples),
            "--rollout",
            rollout,
        ],
        work,
        3600,
    )
    row["run_exit"] = ran.returncode
    store = work / "data" / "synth.duckdb"
    if store.exists():
        con = duckdb.connect(str(store), read_only=True)
        attempts = con.execute("SELECT count(*) FROM blueprint_attempts").fetchone()[0]
        bps = con.execute("SELECT tool_path FROM blueprints").fetchall()
        lengths = [len(json.loads(p) if isinstance(p, str) else p) for (p,) in bps]
        row["planned"] = attempts
        row["accepted"] = len(bps)
        row["accepted_2calls"] = sum(n >= 2 for n in lengths)
        row["trajectories"] = con.execute("SELECT count(*) FROM trajectories").fetchone()[0]
        # a verified pass counts only when the trajectory is counted (not excluded as an
        # infra or simulator fault)
        row["passes"] = con.execute(
            "SELECT count(*) FROM verdicts WHERE passed AND NOT coalesce(excluded, false)"
        ).fetchone()[0]
        row["words_llm"] = con.execute(
            "SELECT count(*) FROM blueprints WHERE words_source = 'llm'"
        ).fetchone()[0]
        row.update(_checks(con, {t.name for t in cluster.tools}))
        con.close()
    else:
        row["error"] = (ran.stderr or ran.stdout).strip().splitlines()[-3:]
    row["minutes"] = (time.perf_counter() - started) / 60
    return row


def _checks(con: duckdb.DuckDBPyConnection, tools: set[str]) -> dict:
    """What the constraints can tell apart, read from the store:

    - lint: blueprints the mutation lint ran on, and those no wrong variant passes;
    - readbacks: blueprints whose probe search found a read that sees the gold run's writes,
      over those it searched for (a writing task the cluster's probes could not see);
    - state_checks: write tasks whose final-state check a wrong variant (drop, change, error)
      fails, over write tasks;
    - gold_error_rejected: gold runs rejected for a failing step (``gold_run_error``), and
      gold_error_accepted: accepted gold runs with a step whose result reads as an error;
    - refused: the units with a path refused as ``noop_write`` / ``unseen_write``, and the
      paths so refused: an attempt's detail lists every path it tried and refused, an
      accepted unit's those before its blueprint (``store.summary.refused_in``);
    - pseudo_per_100: calls of the stored trajectories to a tool the cluster does not offer
      (a harness control, a made-up name) or with arguments that did not parse, per 100;
    - goals: three planned goals, to read.
    """
    from trajsynth.schemas.results import result_error
    from trajsynth.store.summary import refused_in

    cols = {r[0] for r in con.execute("DESCRIBE blueprints").fetchall()}
    lints = []
    if "mutation_lint" in cols:
        lints = [
            json.loads(x) if isinstance(x, str) else x
            for (x,) in con.execute(
                "SELECT mutation_lint FROM blueprints WHERE mutation_lint IS NOT NULL"
            ).fetchall()
        ]
    writes = con.execute(
        "SELECT constraints, n_writes, gold_run, goal FROM blueprints ORDER BY blueprint_id"
    ).fetchall()
    lint_by = []
    if "mutation_lint" in cols:
        lint_by = [
            json.loads(x) if isinstance(x, str) else x
            for (x,) in con.execute(
                "SELECT mutation_lint FROM blueprints ORDER BY blueprint_id"
            ).fetchall()
        ]
    write_tasks = state_ok = accepted_error = state_present = 0
    for i, (constraints, n_writes, gold_run, _) in enumerate(writes):
        cs = json.loads(constraints) if isinstance(constraints, str) else constraints
        gr = json.loads(gold_run) if isinstance(gold_run, str) else gold_run
        if any(result_error(c.get("observation")) is not None for c in gr.get("calls", [])):
            accepted_error += 1
        if not n_writes:
            continue
        write_tasks += 1
        lint = lint_by[i] if i < len(lint_by) else None
        has_state = any(c.get("kind") == "final_state" for c in cs)
        state_present += has_state
        if has_state and lint and lint.get("final_state_catches", 0) > 0:
            state_ok += 1
    calls = [
        json.loads(c) if isinstance(c, str) else c
        for (c,) in con.execute("SELECT unnest(CAST(calls AS JSON[])) FROM trajectories").fetchall()
    ]
    pseudo = sum(1 for c in calls if c.get("tool") not in tools or c.get("arguments") is None)
    searched = [x for x in lints if x.get("readback_tried")]
    tried = [
        refused_in(d, r, a)
        for r, d, a in con.execute(
            "SELECT coalesce(reason, ''), coalesce(detail, ''), accepted FROM blueprint_attempts"
        ).fetchall()
    ]
    refused = {
        reason: (sum(1 for t in tried if reason in t), sum(t.count(reason) for t in tried))
        for reason in ("noop_write", "unseen_write")
    }
    return {
        "readbacks": (sum(1 for x in searched if x.get("readback")), len(searched)),
        "lint": (
            sum(1 for x in lints if not x.get("survived") and x.get("gold_passes")),
            len(lints),
        ),
        "state_checks": (state_ok, write_tasks),
        "state_present": (state_present, write_tasks),
        "gold_error_rejected": con.execute(
            "SELECT count(*) FROM blueprint_attempts WHERE reason = 'gold_run_error'"
        ).fetchone()[0],
        "gold_error_accepted": accepted_error,
        "pseudo_per_100": 100 * pseudo / len(calls) if calls else 0.0,
        "refused": refused,
        "goals": [g for (_, _, _, g) in writes[:3]],
    }


def _frac(pair: object) -> str:
    if not isinstance(pair, tuple):
        return "-"
    a, b = pair
    return f"{a}/{b}" + (f" ({a / b:.0%})" if b else "")


def _refused(counts: object) -> str:
    if not isinstance(counts, dict):
        return "-"
    noop, unseen = counts.get("noop_write", (0, 0)), counts.get("unseen_write", (0, 0))
    return f"{noop[0]} / {unseen[0]} ({noop[1]} / {unseen[1]})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--venvs", type=Path, default=Path("/tmp/outside-venvs"))
    parser.add_argument("--npm", type=Path, default=Path("/tmp/outside-npm"))
    parser.add_argument("--tasks", type=int, default=10)
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--only", default="", help="comma-separated server names")
    parser.add_argument("--rollout", default="tree", choices=["tree", "linear"])
    parser.add_argument(
        "--llm-edges",
        action="store_true",
        help="`clusters add --llm-edges`: the LLM proposes edges, probes confirm them",
    )
    parser.add_argument(
        "--user-stop-when-met",
        choices=["default", "on", "off"],
        default="default",
        help="[run] user_stop_when_met: the user thanks and stops once the goal's checks hold "
        "(default: on for the embedded model; off: the control, a user who never stops)",
    )
    parser.add_argument(
        "--distractors",
        type=int,
        default=None,
        help="[llm] distractors: show the model the tools a task needs plus N nearest "
        "(default: every tool that fits the context)",
    )
    parser.add_argument(
        "--empty-worlds",
        action="store_true",
        help="sqlite and memory start empty, not with a user's shop database and graph",
    )
    args = parser.parse_args()
    chosen = servers(args.venvs, args.npm, args.empty_worlds)
    if args.only:
        chosen = {k: v for k, v in chosen.items() if k in args.only.split(",")}
    rows = [
        one(
            n,
            c,
            e,
            args.tasks,
            args.samples,
            args.rollout,
            args.llm_edges,
            args.user_stop_when_met,
            args.distractors,
        )
        for n, (c, e) in chosen.items()
    ]
    print(
        f"\noutside servers, --tasks {args.tasks} --samples {args.samples} --rollout "
        f"{args.rollout} --user-stop-when-met {args.user_stop_when_met} "
        f"--distractors {'default' if args.distractors is None else args.distractors} "
        "(targets in [])"
    )
    header = (
        "server", "joined[all]", "tools", "tags=annot", "edges+evid (llm)", "planned",
        "accepted[>=80%]", ">=2 calls", "stored[>0]", "passes[>0 on 4/5]",
        "lint clean[100%]", "state check fails wrong[>=80%]", "read-back found/searched",
        "gold err rejected",
        "gold err accepted[0]", "noop / unseen refused (paths)", "pseudo/100", "min",
    )  # fmt: skip
    print(" | ".join(header))
    for r in rows:
        agree = r.get("tags_agree")
        agree_s = f"{agree[0]}/{agree[1]}" if isinstance(agree, tuple) else str(agree)
        planned, accepted = r.get("planned", 0), r.get("accepted", 0)
        rate = f"{accepted}/{planned}" + (f" ({accepted / planned:.0%})" if planned else "")
        print(
            " | ".join(
                str(x)
                for x in (
                    r["server"], r["joined"], r.get("tools", "-"), agree_s,
                    f"{r.get('edges_evidence', '-')} ({r.get('edges_llm', '-')})", planned, rate,
                    r.get("accepted_2calls", "-"),
                    r.get("trajectories", "-"), r.get("passes", "-"), _frac(r.get("lint")),
                    _frac(r.get("state_checks")), _frac(r.get("readbacks")),
                    r.get("gold_error_rejected", "-"),
                    r.get("gold_error_accepted", "-"), _refused(r.get("refused")),
                    f"{r.get('pseudo_per_100', 0):.1f}",
                    f"{r['minutes']:.1f}",
                )
            )
        )  # fmt: skip
        if r.get("error"):
            print(f"    {r['server']}: {r['error']}")
    for r in rows:
        for goal in r.get("goals", []):
            print(f"    {r['server']} goal: {goal}")
    with_passes = sum(1 for r in rows if r.get("passes"))
    print(
        f"servers joined {sum(r['joined'] for r in rows)}/{len(rows)} [all]; "
        f"servers with verified passes {with_passes}/{len(rows)} [>= 4 of 5]"
    )


if __name__ == "__main__":
    main()
