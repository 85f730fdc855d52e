"""Selected items from the store as ``SFTRow`` / ``RLRow`` records (docs/design.md §11).

SFT: one row per selected trajectory (``selections.kind = 'sft'``, ``item_id`` = trajectory
id), its stored messages in the OpenAI layout with every tool call's arguments canonicalised
to ``json.dumps`` text, its tools as OpenAI JSON schemas (the cluster's tools when the
trajectory has none). Nothing is dropped but the user's closing words after the assistant's
final answer (no loss is computed on them, and trainers refuse a conversation that ends on
the user). A row is refused, never repaired, when it is not a clean example: the hygiene
checks (``curation.hygiene``) run again on exactly what would be written, and a stored
verdict that failed them, or signals of failure without a recorded recovery, refuse it too;
``sft_rows`` counts the refusals by reason.
RL: one row per selected task (``kind = 'rl'``, ``item_id`` = blueprint id): the prompt is
the messages before the first assistant turn of the task's first rollout (by id), else the
blueprint's goal as the user's turn; the environment spec and constraints come from the
blueprint. Anything that does not fit raises ``ExportError`` naming the item.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import TypeAdapter, ValidationError

from trajsynth.curation.hygiene import HygieneContext, check_hygiene
from trajsynth.curation.verify import answer_text, offered_tools
from trajsynth.export.report import EmptySelectionError, ExportError
from trajsynth.export.seen import newest_run, selection_seen
from trajsynth.schemas import (
    Constraint,
    EnvSpec,
    Message,
    MessageRole,
    RLRow,
    ServerSpec,
    SFTRow,
    Termination,
    ToolCallRecord,
    Trajectory,
)
from trajsynth.store import Store
from trajsynth.store.rows import ClusterRow, ToolRow

__all__ = [
    "canonical_arguments",
    "openai_messages",
    "refusal_reasons",
    "resolve_run",
    "rl_rows",
    "sft_rows",
]

log = logging.getLogger(__name__)

_CONSTRAINTS = TypeAdapter(list[Constraint])


def resolve_run(store: Store, run_id: str | None) -> str:
    """``run_id`` if it has selections, else the newest run whose curation selected something.

    A scheduled export after a round that selected nothing still writes the last dataset
    rather than nothing.
    """
    if run_id is not None:
        rows = store.query("SELECT count(*) AS n FROM selections WHERE run_id = ?", [run_id])
        if not rows or not rows[0]["n"]:
            seen = selection_seen(store, run_id)
            raise EmptySelectionError(
                f"empty selection: run {run_id!r} has no selections in {store.path}; "
                + seen.line(),
                seen,
            )
        return run_id
    rows = store.query(
        "SELECT s.run_id FROM selections s LEFT JOIN runs r ON r.run_id = s.run_id "
        "WHERE s.selected GROUP BY s.run_id "
        "ORDER BY max(r.created_at) DESC NULLS LAST, s.run_id DESC LIMIT 1"
    )
    if not rows:
        newest = newest_run(store)
        if newest is None:
            raise EmptySelectionError(
                f"empty selection: {store.path} has no runs (start one: synth run)"
            )
        seen = selection_seen(store, newest)
        raise EmptySelectionError(
            f"empty selection: no run in {store.path} has a selected item; newest {seen.line()}",
            seen,
        )
    return str(rows[0]["run_id"])


def canonical_arguments(raw: Any, where: str) -> str:
    """Tool-call arguments as ``json.dumps`` text of a JSON object (what ``tojson`` writes).

    >>> canonical_arguments('{"a":1}', "row x")
    '{"a": 1}'
    """
    if isinstance(raw, Mapping):
        value: Any = dict(raw)
    else:
        try:
            value = json.loads(raw if isinstance(raw, str) else "")
        except json.JSONDecodeError as exc:
            raise ExportError(
                f"{where}: arguments are not valid JSON ({exc.msg}): {str(raw)[:80]!r}"
            ) from exc
    if not isinstance(value, dict):
        raise ExportError(f"{where}: arguments are not a JSON object: {str(raw)[:80]!r}")
    return json.dumps(value, ensure_ascii=False)


def openai_messages(raw: Sequence[Mapping[str, Any]], item: str) -> list[Message]:
    """Stored messages as ``Message`` records with canonical arguments, without the user's
    closing words after the last assistant turn (anything else after it, a tool result
    above all, is kept: such a row then fails hygiene and is refused, never cut to look
    clean). Raises ``ExportError`` naming ``item`` and the message."""
    out: list[Message] = []
    for i, m in enumerate(raw):
        data = dict(m)
        calls = []
        for call in data.get("tool_calls") or []:
            fn = call.get("function") or {}
            name = fn.get("name")
            where = f"{item}: message {i}, call {name!r}"
            if not isinstance(name, str) or not name:
                raise ExportError(f"{item}: message {i} has a tool call without a name")
            calls.append(
                {
                    "id": call.get("id") or f"call_{i}_{len(calls)}",
                    "type": "function",
                    "function": {
                        "name": name,
                        "arguments": canonical_arguments(fn.get("arguments", "{}"), where),
                    },
                }
            )
        data["tool_calls"] = calls or None
        try:
            out.append(Message.model_validate(data))
        except ValidationError as exc:
            raise ExportError(f"{item}: message {i} is not a chat message: {exc}") from exc
    last = max((i for i, m in enumerate(out) if m.role is MessageRole.ASSISTANT), default=-1)
    if last < 0:
        raise ExportError(f"{item}: no assistant turn to train on")
    if all(m.role is MessageRole.USER for m in out[last + 1 :]):
        return out[: last + 1]
    return out


def _check_tools(tools: Any, item: str) -> list[dict[str, Any]]:
    if not isinstance(tools, list):
        raise ExportError(f"{item}: tools are not a list of JSON schemas")
    for k, tool in enumerate(tools):
        fn = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
            raise ExportError(f"{item}: tool {k} is not an OpenAI function schema (no name)")
        params = fn.get("parameters", {})
        if not isinstance(params, dict):
            raise ExportError(f"{item}: tool {fn['name']!r} has parameters that are not an object")
    return tools


def _outside_servers(store: Store, cluster_ids: set[str]) -> dict[str, ServerSpec]:
    """What rebuilds an outside cluster's server: its command or URL, reset mode,
    copied files by content hash and the names (never the values) of its env variables."""
    if not cluster_ids:
        return {}
    marks = ", ".join("?" for _ in cluster_ids)
    rows = store.read(ClusterRow, f"cluster_id IN ({marks})", sorted(cluster_ids), source="outside")
    return {r.cluster_id: ServerSpec.model_validate(_json(r.server)) for r in rows}


def _cluster_tools(store: Store, cluster_ids: set[str]) -> dict[str, list[dict[str, Any]]]:
    if not cluster_ids:
        return {}
    marks = ", ".join("?" for _ in cluster_ids)
    rows = store.read(ToolRow, f"cluster_id IN ({marks})", sorted(cluster_ids))
    out: dict[str, list[dict[str, Any]]] = {}
    for r in sorted(rows, key=lambda r: (r.cluster_id or "", r.name or "")):
        out.setdefault(r.cluster_id or "", []).append(
            {
                "type": "function",
                "function": {
                    "name": r.name,
                    "description": r.description or "",
                    "parameters": r.input_schema or {"type": "object"},
                },
            }
        )
    return out


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


def _round_filter(round: int | None) -> tuple[str, list[Any]]:
    return ("", []) if round is None else (" AND s.round = ?", [round])


def _empty_selection(
    store: Store, run_id: str, round: int | None, what: str
) -> EmptySelectionError:
    """The error for a run (or round) with nothing of ``what`` selected, with what was seen."""
    at = "" if round is None else f" round {round}"
    seen = selection_seen(store, run_id, round)
    return EmptySelectionError(
        f"empty selection: no selected {what} in run {run_id!r}{at}; {seen.line()}", seen
    )


def _termination(value: Any) -> Termination:
    """A stored termination; one this release does not know reads as ``max_turns`` (the
    user did not end it, so a user turn after the answer is not a closing one)."""
    try:
        return Termination(value)
    except ValueError:
        return Termination.MAX_TURNS


def refusal_reasons(
    row: Mapping[str, Any], messages: Sequence[Message], tools: Sequence[Mapping[str, Any]]
) -> list[str]:
    """Why a selected trajectory may not be an SFT row (empty: it may), from what would be
    written: ``hygiene:<check>`` for each hygiene check that fails on the exported
    conversation or failed in the stored verdict, ``not passed``, and
    ``failure signal without a recovery``."""
    calls = [ToolCallRecord.model_validate(c) for c in _json(row.get("calls")) or []]
    trajectory = Trajectory(
        trajectory_id=str(row["item_id"]),
        run_id=str(row.get("run_id") or ""),
        blueprint_id=str(row.get("task_id") or ""),
        tree_id="",
        leaf_node_id="",
        cluster_id=str(row.get("cluster_id") or ""),
        messages=list(messages),
        tools=[dict(t) for t in tools],
        calls=calls,
        final_answer=row.get("final_answer"),
        termination=_termination(row.get("termination")),
    )
    ctx = HygieneContext(
        trajectory=trajectory, schemas=offered_tools(tools), answer=answer_text(trajectory)
    )
    results, _ = check_hygiene(ctx)
    failed = {h.check for h in results if not h.passed}
    stored = _json(row.get("hygiene")) or []
    failed |= {h.get("check") for h in stored if isinstance(h, dict) and not h.get("passed")}
    reasons = [f"hygiene:{name}" for name in sorted(n for n in failed if n)]
    if not row.get("passed"):
        reasons.append("not passed")
    if row.get("sig_failure") and not row.get("v_recovered"):
        reasons.append("failure signal without a recovery")
    return reasons


def sft_rows(
    store: Store, run_id: str, round: int | None = None, refused: dict[str, int] | None = None
) -> list[SFTRow]:
    """The run's selected trajectories (``round`` None: every round) as SFT rows. A row that
    is not a clean example is left out and counted in ``refused`` by reason (each reason of
    a row once; ``refusal_reasons``)."""
    where, params = _round_filter(round)
    rows = store.query(
        "SELECT s.item_id, s.task_id, s.run_id, s.round AS sel_round, s.score AS sel_score, "
        "s.reason, t.trajectory_id, t.messages, t.tools, t.cluster_id, t.round, t.n_turns, "
        "t.n_calls, t.termination, t.calls, t.final_answer, v.passed, "
        "v.score AS verdict_score, v.hygiene, v.recovered AS v_recovered, "
        "sg.failure AS sig_failure, sc.action_complexity AS cac, "
        "coalesce(sc.mode_label, sc.rule_label, sc.mode, b.target_mode) AS mode, "
        "sc.recovered, sc.efficiency, coalesce(sc.domain, b.domain, c.domain) AS domain "
        "FROM selections s "
        "LEFT JOIN trajectories t ON t.trajectory_id = s.item_id "
        "LEFT JOIN verdicts v ON v.trajectory_id = s.item_id "
        "LEFT JOIN signals sg ON sg.trajectory_id = s.item_id "
        "LEFT JOIN scores sc ON sc.trajectory_id = s.item_id "
        "LEFT JOIN blueprints b ON b.blueprint_id = t.blueprint_id "
        "LEFT JOIN clusters c ON c.cluster_id = t.cluster_id "
        f"WHERE s.kind = 'sft' AND s.selected AND s.run_id = ?{where} "
        "QUALIFY row_number() OVER (PARTITION BY s.item_id ORDER BY s.round DESC, "
        "v.verdict_id) = 1 ORDER BY s.item_id",
        [run_id, *params],
    )
    if not rows:
        raise _empty_selection(store, run_id, round, "SFT trajectories")
    missing = [r["item_id"] for r in rows if r["trajectory_id"] is None]
    if missing:
        raise ExportError(f"selected trajectory {missing[0]} is not in the store")
    fallback = _cluster_tools(store, {r["cluster_id"] for r in rows if not _json(r["tools"])})
    out = []
    for r in rows:
        item = f"trajectory {r['item_id']}"
        tools = _check_tools(_json(r["tools"]) or fallback.get(r["cluster_id"], []), item)
        messages = openai_messages(_json(r["messages"]) or [], item)
        reasons = refusal_reasons(r, messages, tools)
        if reasons:
            log.warning("%s refused: %s", item, ", ".join(reasons))
            if refused is not None:
                for reason in reasons:
                    refused[reason] = refused.get(reason, 0) + 1
            continue
        # the recovery is the verifier's (a failed call a later call corrected); the
        # efficiency is the topology's, which leaves corrected calls uncharged (METHODS §8)
        recovered = bool(r["v_recovered"]) if r["v_recovered"] is not None else r["recovered"]
        metadata = {
            "run_id": r["run_id"],
            "round": r["round"],
            "domain": r["domain"],
            "mode": r["mode"],
            "cac": r["cac"],
            "recovered": recovered,
            "efficiency": r["efficiency"],
            "selection_score": r["sel_score"],
            "selection_reason": r["reason"],
            "termination": r["termination"],
            "n_turns": r["n_turns"],
            "n_calls": r["n_calls"],
        }
        out.append(
            SFTRow(
                id=r["item_id"],
                messages=messages,
                tools=tools,
                task_id=r["task_id"],
                cluster_id=r["cluster_id"],
                score=float(r["verdict_score"] or 0.0),
                verdict=bool(r["passed"]),
                metadata=metadata,
            )
        )
    if not out:
        counts = ", ".join(f"{k} {n}" for k, n in sorted((refused or {}).items()))
        raise EmptySelectionError(
            f"empty selection: every selected SFT trajectory of run {run_id!r} was refused as "
            f"not a clean example ({counts or 'see the log'})"
        )
    return out


def _prompt(messages: Sequence[Mapping[str, Any]], goal: str | None, item: str) -> list[Message]:
    if messages:
        head = []
        for m in _prefix_messages(messages, item):
            if m.role is MessageRole.ASSISTANT:
                break
            head.append(m)
        if any(m.role is MessageRole.USER for m in head):
            return head
    if not goal:
        raise ExportError(f"{item}: no rollout and no goal to build the prompt from")
    return [Message(role=MessageRole.USER, content=goal)]


def _prefix_messages(raw: Sequence[Mapping[str, Any]], item: str) -> list[Message]:
    """The messages before the first assistant turn as records (no assistant turn needed)."""
    out = []
    for i, m in enumerate(raw):
        if m.get("role") == MessageRole.ASSISTANT.value:
            break
        try:
            out.append(Message.model_validate(dict(m)))
        except ValidationError as exc:
            raise ExportError(f"{item}: message {i} is not a chat message: {exc}") from exc
    return out


def rl_rows(store: Store, run_id: str, round: int | None = None) -> list[RLRow]:
    """The run's selected tasks (``round`` None: every round) as RL rows."""
    where, params = _round_filter(round)
    rows = store.query(
        "SELECT s.item_id, s.run_id, s.round AS sel_round, s.score AS sel_score, s.reason, "
        "b.blueprint_id, b.cluster_id, b.domain, b.seed, b.initial_state_id, b.constraints, "
        "b.goal, b.difficulty, b.path_shape, b.target_mode, b.round, "
        "tt.pass_rate, tt.n_rollouts, tt.error_branch_ratio, tt.n_success_strategies, tt.rl_score "
        "FROM selections s "
        "LEFT JOIN blueprints b ON b.blueprint_id = s.item_id "
        "LEFT JOIN task_topology tt ON tt.task_id = s.item_id "
        f"WHERE s.kind = 'rl' AND s.selected AND s.run_id = ?{where} "
        "QUALIFY row_number() OVER (PARTITION BY s.item_id ORDER BY s.round DESC) = 1 "
        "ORDER BY s.item_id",
        [run_id, *params],
    )
    if not rows:
        raise _empty_selection(store, run_id, round, "RL tasks")
    missing = [r["item_id"] for r in rows if r["blueprint_id"] is None]
    if missing:
        raise ExportError(f"selected task {missing[0]} has no blueprint in the store")
    ids = [r["item_id"] for r in rows]
    marks = ", ".join("?" for _ in ids)
    first = {
        r["blueprint_id"]: r
        for r in store.query(
            "SELECT blueprint_id, arg_min(messages, trajectory_id) AS messages, "
            "arg_min(tools, trajectory_id) AS tools FROM trajectories "
            f"WHERE blueprint_id IN ({marks}) GROUP BY blueprint_id",
            ids,
        )
    }
    fallback = _cluster_tools(store, {r["cluster_id"] for r in rows})
    servers = _outside_servers(store, {r["cluster_id"] for r in rows})
    out = []
    for r in rows:
        item = f"task {r['item_id']}"
        if not r["initial_state_id"]:
            raise ExportError(f"{item}: its blueprint has no initial_state_id")
        try:
            constraints = _CONSTRAINTS.validate_python(_json(r["constraints"]) or [])
        except ValidationError as exc:
            raise ExportError(f"{item}: constraints do not validate: {exc}") from exc
        rollout = first.get(r["item_id"]) or {}
        tools = _json(rollout.get("tools")) or fallback.get(r["cluster_id"], [])
        out.append(
            RLRow(
                id=r["item_id"],
                prompt=_prompt(_json(rollout.get("messages")) or [], r["goal"], item),
                tools=_check_tools(tools, item),
                env=EnvSpec(
                    cluster_id=r["cluster_id"],
                    seed=int(r["seed"] or 0),
                    initial_state_id=r["initial_state_id"],
                    server=servers.get(r["cluster_id"]),
                ),
                constraints=constraints,
                metadata={
                    "run_id": r["run_id"],
                    "round": r["round"],
                    "domain": r["domain"],
                    "difficulty": r["difficulty"],
                    "path_shape": r["path_shape"],
                    "target_mode": r["target_mode"],
                    "pass_rate": r["pass_rate"],
                    "n_rollouts": r["n_rollouts"],
                    "error_branch_ratio": r["error_branch_ratio"],
                    "n_succ_strat": r["n_success_strategies"],
                    "selection_score": r["sel_score"],
                    "selection_reason": r["reason"],
                },
            )
        )
    return out
