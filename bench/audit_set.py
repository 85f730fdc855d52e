"""Build the items of the verifier's audit set (``tests/fixtures/audit/items.jsonl``).

Three origins, each recorded per item:

- ``rollout``: trajectories a ``synth run`` stored (any store; the embedded model by default);
- ``gold``: each stored blueprint's gold run replayed as a demonstration
  (``planning.gold.gold_demonstration``), as ``synth sft`` and the improve flow make them;
- ``variant:<kind>``: the gold demonstration acted out again by a scripted policy with one
  deliberate fault (or, for ``recovered``, a failed call it then corrects), in a fresh
  environment, so the variant's end state is the one its calls really produced.

Items carry what the verifier needs to judge them again offline (the trajectory, the tools it
was offered, the blueprint with its constraints, the end state's hash and checks, the cluster's
write tools for the signals) and, for the reviewer, the end state compared with the gold run's.
Labels are NOT made here: they are written by hand, by the rubric (docs/audit-rubric.md), into
``labels.jsonl`` beside the items.

    PYTHONPATH=src python bench/audit_set.py --store /tmp/run/synth.duckdb \
        --clusters-dir /tmp/run/clusters --out /tmp/audit-items.jsonl [--variants 3]
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from trajsynth.curation.verify import extract_numbers, state_diff
from trajsynth.llm.client import ChatResult
from trajsynth.planning.admission import ACTOR_PARAM
from trajsynth.planning.gold import GoldPolicy, _chat, gold_demonstration, template_answer
from trajsynth.schemas import (
    AgentRole,
    Blueprint,
    Budgets,
    EnvState,
    FunctionCall,
    Message,
    MessageRole,
    ToolCall,
    Trajectory,
)
from trajsynth.store import Store
from trajsynth.store.rows import model_from_row

log = logging.getLogger("audit_set")

VARIANTS = (
    "wrong_arg",
    "drop_write",
    "contradict",
    "made_up_tool",
    "no_answer",
    "repeat_fail",
    "recovered",
)
MADE_UP_TOOL = "lookup_record_details"


# --- the scripted faults -------------------------------------------------------------------


def _mutate_value(name: str, value: Any, schema: dict[str, Any]) -> Any:
    """Another plausible value for one argument (a number moved, an enum swapped, a date
    shifted, else a string changed)."""
    prop = (schema.get("properties") or {}).get(name) or {}
    enum = prop.get("enum")
    if isinstance(enum, list) and len(enum) > 1 and value in enum:
        return next(v for v in enum if v != value)
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, float):
        return round(value * 1.5 + 1, 2)
    if isinstance(value, str):
        if len(value) >= 10 and value[4:5] == "-" and value[7:8] == "-" and value[8:10].isdigit():
            day = int(value[8:10])
            return f"{value[:8]}{(day % 27) + 1:02d}{value[10:]}"
        return value + "2" if value[-1:].isdigit() else value + " extra"
    return value


def _pick_field(arguments: dict[str, Any]) -> str | None:
    """The argument a wrong-value variant changes: a non-identifier number or enum first."""
    names = sorted(arguments)
    plain = [n for n in names if not n.endswith("id") and not n.endswith("ids")]
    for pool in (plain, names):
        for n in pool:
            if isinstance(arguments[n], int | float | str) and arguments[n] != "":
                return n
    return None


class FaultyPolicy(GoldPolicy):
    """A gold run replayed with one deliberate fault (``kind``, one of ``VARIANTS``)."""

    def __init__(self, blueprint: Blueprint, kind: str, write_tools: set[str], schemas: dict):
        super().__init__(blueprint)
        self.kind = kind
        self.schemas = schemas
        calls = [c.model_copy(deep=True) for c in blueprint.gold_run.calls]
        writes = [i for i, c in enumerate(calls) if c.tool in write_tools]
        target = writes[-1] if writes else len(calls) - 1
        self.note = ""
        if kind == "wrong_arg":
            field = _pick_field(calls[target].arguments)
            if field is not None:
                old = calls[target].arguments[field]
                new = _mutate_value(field, old, schemas.get(calls[target].tool, {}))
                calls[target].arguments[field] = new
                self.note = f"{calls[target].tool}.{field}: {old!r} -> {new!r}"
        elif kind == "drop_write":
            self.note = f"dropped call #{target} {calls[target].tool}"
            del calls[target]
        self.script: list[tuple[str, dict[str, Any]]] = [(c.tool, c.arguments) for c in calls]
        if kind == "made_up_tool":
            self.script.insert(0, (MADE_UP_TOOL, {"query": blueprint.goal[:40]}))
        elif kind in ("repeat_fail", "recovered"):
            # a failing call: the first gold call with a required argument, sent without it,
            # just before that call; then (recovered) the call as the gold run makes it
            at = next(
                (i for i, c in enumerate(calls) if schemas.get(c.tool, {}).get("required")), 0
            )
            tool = calls[at].tool if calls else MADE_UP_TOOL
            broken = (tool, {})
            self.script[at:at] = [broken, broken] if kind == "repeat_fail" else [broken]
            self.note = f"{tool}({{}}) before call #{at}"
        self.step = 0

    async def _assistant_turn(self, messages: Sequence[Message]) -> ChatResult:
        bp = self.blueprint
        if not self.asked:
            return await super()._assistant_turn(messages)
        if self.step < len(self.script):
            tool, args = self.script[self.step]
            self.step += 1
            call = ToolCall(
                id=f"call_v_{self.step}",
                function=FunctionCall(name=tool, arguments=json.dumps(args)),
            )
            msg = Message(role=MessageRole.ASSISTANT, content=None, tool_calls=[call])
            return _chat(msg, AgentRole.ASSISTANT, "variant")
        self.answered = True
        if self.kind == "no_answer":
            text = ""
        elif self.kind == "contradict":
            text = _contradiction(template_answer(bp, messages))
        else:
            text = template_answer(bp, messages)
        return _chat(Message(role=MessageRole.ASSISTANT, content=text), AgentRole.ASSISTANT, "v")


def _contradiction(answer: str) -> str:
    """The answer with every value it states changed (numbers moved, other words negated)."""
    numbers = extract_numbers(answer)
    if numbers:
        out = answer
        for n in numbers:
            text = f"{n:g}"
            if text in out:
                out = out.replace(text, f"{n + 7:g}", 1)
        return out
    return "I'm sorry, that did not go through: nothing was changed and I found no matching record."


# --- items ---------------------------------------------------------------------------------


def _compact_state(state: EnvState | None) -> dict[str, Any]:
    if state is None:
        return {"state_hash": "unavailable", "readable": False, "checks": {}}
    return {"state_hash": state.state_hash, "readable": state.readable, "checks": state.checks}


def _blueprint_json(bp: Blueprint) -> dict[str, Any]:
    """The blueprint without the bulky gold tables (they only word a failing diff)."""
    data = bp.model_dump(mode="json", exclude={"usage"})
    data["gold_run"]["final_state"]["tables"] = {}
    for c in data["constraints"]:
        if c.get("kind") == "final_state":
            c["gold_tables"] = {}
    return data


def _vs_gold(bp: Blueprint, state: EnvState | None) -> dict[str, Any]:
    gold = bp.gold_run.final_state
    if state is None or not state.readable:
        return {"same": None, "diff": "state not readable"}
    if state.state_hash == gold.state_hash:
        return {"same": True}
    diff = state_diff(gold.tables, state)
    text = json.dumps(diff, sort_keys=True, default=str)
    return {"same": False, "diff": text[:600]}


def initial_rows(bp: Blueprint, state: EnvState, write_tools: set[str]) -> list[dict[str, Any]]:
    """The initial state's rows that a gold write names: a row holding, under the same field,
    a value the write passes (``event_id=EV1002``, ``path=data/sales.csv``; the acting user
    is left out, it names every row of theirs). What the admission review needs to see a
    write that sets what the record already was, or overwrites a file that existed, without
    storing whole initial states."""
    named = {
        (k, str(v))
        for c in bp.gold_run.calls
        if c.tool in write_tools
        for k, v in c.arguments.items()
        if k != ACTOR_PARAM and isinstance(v, str | int) and not isinstance(v, bool)
        and len(str(v)) <= 64
    }  # fmt: skip
    rows = [row for table in sorted(state.tables) for row in state.tables[table]]
    hits = {
        pair: [r for r in rows if pair[0] in r and str(r[pair[0]]) == pair[1]] for pair in named
    }
    # a value that many rows hold (``fare_basis=basic``) names a kind of row, not a record
    return [r for r in rows if any(r in hit for hit in hits.values() if len(hit) <= _NAMED_ROWS)]


_NAMED_ROWS = 8


def make_item(
    traj: Trajectory,
    bp: Blueprint,
    state: EnvState | None,
    origin: str,
    write_tools: set[str] | None,
    note: str = "",
) -> dict[str, Any]:
    return {
        "id": traj.trajectory_id,
        "cluster": traj.cluster_id,
        "origin": origin,
        "note": note,
        "trajectory": traj.model_dump(mode="json", exclude={"usage", "node_ids"}),
        "blueprint": _blueprint_json(bp),
        "final_state": _compact_state(state),
        "vs_gold": _vs_gold(bp, state),
        "write_tools": sorted(write_tools) if write_tools is not None else None,
    }


def _write_tools(store: Store, cluster_id: str) -> set[str] | None:
    rows = store.query("SELECT name, access FROM tools WHERE cluster_id = ?", [cluster_id])
    return {r["name"] for r in rows if r["access"] == "write"} if rows else None


def rollout_items(store: Store, blueprints: dict[str, Blueprint]) -> list[dict[str, Any]]:
    rows = store.query(
        "SELECT t.*, s.state AS final_state_json FROM trajectories t "
        "LEFT JOIN final_states s ON s.state_hash = t.final_state_hash ORDER BY t.trajectory_id"
    )
    out = []
    for row in rows:
        traj = model_from_row(Trajectory, row)
        if traj.blueprint_id not in blueprints:
            continue
        raw = row["final_state_json"]
        state = None
        if raw is not None:
            state = EnvState.model_validate(json.loads(raw) if isinstance(raw, str) else raw)
        bp = blueprints[traj.blueprint_id]
        out.append(make_item(traj, bp, state, traj.source, _write_tools(store, traj.cluster_id)))
    return out


async def gold_and_variants(
    blueprints: dict[str, Blueprint], clusters_dir: Path | None, per_task: int
) -> list[dict[str, Any]]:
    """Each blueprint's gold demonstration and ``per_task`` variants (kinds in turn)."""
    from trajsynth.agents.assistant import Assistant
    from trajsynth.agents.rollout import run_episode
    from trajsynth.agents.user_sim import UserSimulator
    from trajsynth.mcp_servers.environment import open_environment
    from trajsynth.mcp_servers.registry import get_cluster
    from trajsynth.schemas import SandboxKind

    out: list[dict[str, Any]] = []
    turn = 0
    for bp in sorted(blueprints.values(), key=lambda b: (b.cluster_id, b.blueprint_id)):
        cluster = get_cluster(bp.cluster_id, clusters_dir=clusters_dir)
        writes = {t.name for t in cluster.tools if t.access.value == "write"}
        schemas = {t.name: t.input_schema for t in cluster.tools}
        kinds = [VARIANTS[(turn + k) % len(VARIANTS)] for k in range(per_task)]
        turn += per_task
        rows: list[dict[str, Any]] = []
        for kind in ["gold", *kinds]:
            try:
                async with open_environment(
                    cluster, sandbox_kind=SandboxKind.LOCAL, seed=bp.seed
                ) as env:
                    if kind == "gold":
                        initial = await env.state()
                        if initial.state_hash == bp.gold_run.initial_state_hash:
                            rows = initial_rows(bp, initial, writes)
                        traj, state = await gold_demonstration(bp, env, run_id="audit")
                        note = ""
                    else:
                        policy = FaultyPolicy(bp, kind, writes, schemas)
                        n = len(policy.script) + 2 + (1 if bp.hidden_info else 0)
                        result = await run_episode(
                            blueprint=bp,
                            env=env,
                            llm=policy,
                            assistant=Assistant(),
                            user_sim=UserSimulator(),
                            budgets=Budgets(max_turns=n, max_tool_calls=n, max_tokens=100_000),
                            run_id=f"audit:{kind}",
                        )
                        traj = result.trajectory.model_copy(update={"run_id": f"audit:{kind}"})
                        state, note = result.final_state, policy.note
            except Exception as exc:  # noqa: BLE001 - one failed replay is logged, the set goes on
                log.warning("%s %s: %s: %s", bp.blueprint_id, kind, type(exc).__name__, exc)
                continue
            origin = "gold" if kind == "gold" else f"variant:{kind}"
            out.append({**make_item(traj, bp, state, origin, writes, note), "initial_rows": rows})
            print(f"{bp.cluster_id} {bp.blueprint_id[:14]} {origin} {note}", file=sys.stderr)
    return out


async def backfill_initial_rows(folder: Path, clusters_dir: Path | None) -> int:
    """Write ``folder/initial_rows.jsonl`` for a packed set: each writing blueprint's
    environment opened at its seed, kept only when its state is the one the gold run started
    from (the same hash), so the rows are the planner's."""
    from trajsynth.mcp_servers.environment import open_environment
    from trajsynth.mcp_servers.registry import get_cluster
    from trajsynth.schemas import SandboxKind

    out = []
    for line in (folder / "blueprints.jsonl").read_text().splitlines():
        bp = Blueprint.model_validate(json.loads(line))
        if not bp.n_writes:
            continue
        try:
            cluster = get_cluster(bp.cluster_id, clusters_dir=clusters_dir)
            writes = {t.name for t in cluster.tools if t.access.value == "write"}
            async with open_environment(
                cluster, sandbox_kind=SandboxKind.LOCAL, seed=bp.seed
            ) as env:
                state = await env.state()
        except Exception as exc:  # noqa: BLE001 - one blueprint without rows; the rest go on
            log.warning("%s: %s: %s", bp.blueprint_id, type(exc).__name__, exc)
            continue
        if state.state_hash != bp.gold_run.initial_state_hash:
            log.warning("%s: seed %d gives another initial state", bp.blueprint_id, bp.seed)
            continue
        rows = initial_rows(bp, state, writes)
        out.append({"blueprint_id": bp.blueprint_id, "rows": rows})
        print(f"{bp.cluster_id} {bp.blueprint_id[:14]} {len(rows)} rows", file=sys.stderr)
    (folder / "initial_rows.jsonl").write_text("".join(_line(r) for r in out))
    return len(out)


async def _plan(
    names: Sequence[str], n: int, clusters_dir: Path | None, seed_base: int
) -> dict[str, Blueprint]:
    from trajsynth.mcp_servers.registry import get_cluster
    from trajsynth.planning.heldout import plan_eval_tasks
    from trajsynth.schemas import SandboxKind

    clusters = [get_cluster(name, clusters_dir=clusters_dir) for name in names]
    tasks = await plan_eval_tasks(clusters, n, sandbox_kind=SandboxKind.LOCAL, seed_base=seed_base)
    return {t.blueprint_id: t for t in tasks}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--store", type=Path, default=None)
    parser.add_argument("--clusters-dir", type=Path, default=None)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--variants", type=int, default=3, help="variants per blueprint")
    parser.add_argument("--no-rollouts", action="store_true")
    parser.add_argument("--rollouts-only", action="store_true")
    parser.add_argument(
        "--pack",
        nargs="+",
        type=Path,
        default=None,
        help="merge these item files into the fixture folder --out and stop",
    )
    parser.add_argument("--only-clusters", default="", help="comma-separated cluster ids")
    parser.add_argument(
        "--plan",
        default="",
        help="name,...: plan --plan-tasks blueprints per cluster here (no LLM, as `synth eval` "
        "plans held-out tasks) instead of reading the store's",
    )
    parser.add_argument("--plan-tasks", type=int, default=3)
    parser.add_argument(
        "--round",
        type=int,
        default=1,
        help="the round stamped on every item (a round is drawn and labelled after the "
        "verifier and planner it measures were written)",
    )
    parser.add_argument(
        "--seed-base",
        type=int,
        default=5_000,
        help="first planning seed; a new round of the set takes seeds no earlier round used",
    )
    parser.add_argument(
        "--initial-rows",
        action="store_true",
        help="write initial_rows.jsonl into the packed set --out from each writing "
        "blueprint's environment at its seed, and stop",
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    if args.initial_rows:
        n = asyncio.run(backfill_initial_rows(args.out, args.clusters_dir))
        print(f"initial rows of {n} blueprints -> {args.out / 'initial_rows.jsonl'}")
        return
    if args.pack:
        merged: dict[str, Any] = {}
        for path in args.pack:
            for line in path.read_text().splitlines():
                item = json.loads(line)
                merged.setdefault(item["id"], item)
        pack(list(merged.values()), args.out)
        print(f"{len(merged)} items packed into {args.out}")
        return
    os.environ.setdefault("MEMORY_FILE_PATH", "/tmp/audit-memory.jsonl")
    if args.plan:
        blueprints = asyncio.run(
            _plan(args.plan.split(","), args.plan_tasks, args.clusters_dir, args.seed_base)
        )
        items = asyncio.run(gold_and_variants(blueprints, args.clusters_dir, args.variants))
        with args.out.open("w") as fh:
            for item in items:
                fh.write(_line({**item, "round": args.round}))
        print(f"{len(items)} items -> {args.out}")
        return
    if args.store is None:
        parser.error("--store is needed unless --plan, --pack or --initial-rows is given")
    store = Store(args.store)
    blueprints = {
        r["blueprint_id"]: model_from_row(Blueprint, r)
        for r in store.query("SELECT * FROM blueprints")
    }
    if args.only_clusters:
        keep = set(args.only_clusters.split(","))
        blueprints = {k: b for k, b in blueprints.items() if b.cluster_id in keep}
    items = [] if args.no_rollouts else rollout_items(store, blueprints)
    if not args.rollouts_only:
        items += asyncio.run(gold_and_variants(blueprints, args.clusters_dir, args.variants))
    with args.out.open("w") as fh:
        for item in items:
            fh.write(_line({**item, "round": args.round}))
    print(f"{len(items)} items -> {args.out}")


def _line(record: dict[str, Any]) -> str:
    return json.dumps(record, separators=(",", ":"), sort_keys=True) + "\n"


def pack(items: Sequence[dict[str, Any]], folder: Path) -> None:
    """Write ``items`` to ``folder`` with each blueprint and each tool list stored once
    (``blueprints.jsonl``, ``tools.jsonl``); items name them by id. ``precision.load_items``
    puts them back."""
    folder.mkdir(parents=True, exist_ok=True)
    blueprints: dict[str, Any] = {}
    tools: dict[str, Any] = {}
    rows: dict[str, Any] = {}
    with (folder / "items.jsonl").open("w") as fh:
        for item in items:
            item = dict(item)
            traj = dict(item["trajectory"])
            bp = item.pop("blueprint")
            blueprints[bp["blueprint_id"]] = bp
            if item.get("initial_rows"):
                rows[bp["blueprint_id"]] = item["initial_rows"]
            item.pop("initial_rows", None)
            key = "tools_" + hashlib.sha1(_line({"t": traj["tools"]}).encode()).hexdigest()[:16]
            tools[key] = traj["tools"]
            traj["tools"] = key
            item["trajectory"] = traj
            fh.write(_line(item))
    (folder / "blueprints.jsonl").write_text(
        "".join(_line(b) for _, b in sorted(blueprints.items()))
    )
    (folder / "tools.jsonl").write_text(
        "".join(_line({"id": k, "tools": v}) for k, v in sorted(tools.items()))
    )
    (folder / "initial_rows.jsonl").write_text(
        "".join(_line({"blueprint_id": k, "rows": v}) for k, v in sorted(rows.items()))
    )


if __name__ == "__main__":
    main()
