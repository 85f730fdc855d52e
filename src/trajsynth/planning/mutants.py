"""The mutation lint: constraints that a wrong trajectory cannot pass.

A blueprint's constraints come from its gold run; nothing yet shows they would fail a wrong
run. So, for an accepted blueprint, wrong variants of the gold run are built and replayed in
the task's initial state (the environment restored from its snapshot, the same as a fresh
one), and each is scored with the product's own ``verify`` while its answer states every value
the constraints check (the worst case for the lint):

- ``drop``: one write left out;
- ``change``: one argument of a write set to another value the server accepted for it
  (``ToolCluster.arg_values``, from discovery) or that its reads returned; and a free text
  set to a near miss of the same length (its last letter or digit moved on by one: "food
  301" for "food 300"), which a check on sizes or names cannot tell from the gold one;
- ``error``: one write's result replaced with an error result (the call refused, nothing
  changed);
- ``stray``: one more write of another tool of the cluster, with values from its world.

A variant that passes is a hole. The lint then strengthens the checks: an argument matcher on
the changed field, or a ``tool_not_called`` for the stray tool, and scores every variant again.
A blueprint that a variant still passes, or whose own gold run fails the stronger checks, is
rejected (reason ``mutation_lint``). The figures go on the blueprint (``MutationLint``).

Before the variants are scored, a gold run that writes but carries no final-state check (the
cluster's probes did not see its writes) gets a **probe search** (``find_readback``): the
cluster's reads are tried, with the values of the gold run's calls and results (the path a
``write_file`` wrote, the names ``create_entities`` made), in the initial state and after the
gold run; the first whose answer the gold run changed, and that answers the same twice, is
put on a ``FinalState`` as its read-back (``FinalState.probes``), so a variant that leaves
another end state fails. A bounded number of reads is tried; when none changes, the writes
are held by their call checks alone and the figures say so.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple, Protocol

from trajsynth.curation.canon import parse_json_maybe
from trajsynth.curation.verify import observed_reading, verify
from trajsynth.mcp_servers.arguments import generate_arguments, param_values, schema_kinds
from trajsynth.mcp_servers.graph import singular
from trajsynth.mcp_servers.readback import listed_resources, read_backs, with_readbacks
from trajsynth.mcp_servers.tags import name_tokens
from trajsynth.planning.constraints import deciding_fields
from trajsynth.planning.gold import observation_value
from trajsynth.planning.paths import declared_properties
from trajsynth.schemas import (
    AnswerContains,
    CallPattern,
    Constraint,
    EnvState,
    FinalState,
    GoldCall,
    JsonValue,
    Message,
    MessageRole,
    MutationLint,
    ProbeCall,
    SnapshotHandle,
    ToolAccess,
    ToolCalled,
    ToolCallRecord,
    ToolCluster,
    ToolNotCalled,
    Trajectory,
    canonical_json,
)
from trajsynth.schemas.constraints import readback_hash, readback_key
from trajsynth.schemas.results import result_error
from trajsynth.schemas.rollout import ObsClass, Termination

__all__ = [
    "ReadbackSearch",
    "Variant",
    "find_readback",
    "lint_by_mutation",
    "name_words",
    "near_miss",
    "observation_text",
    "variants",
]

log = logging.getLogger(__name__)

_MAX_PER_KIND = 3
_MAX_READS = 8  # reads the probe search tries per blueprint
_SEARCH_S = 30.0  # and the seconds it may take (reads are chosen before any is made)
_ERROR_TEXT = '{"error": "the request was refused"}'


class LintEnvironment(Protocol):
    async def call_tool(self, name: str, arguments: dict) -> Any: ...

    async def state(self) -> EnvState: ...

    async def restore(self, handle: SnapshotHandle) -> None: ...

    async def read_probes(self, probes: list[ProbeCall]) -> EnvState: ...


class Variant:
    """A wrong run: its calls (``refused`` ones answer with an error and are not sent)."""

    def __init__(
        self, kind: str, calls: list[GoldCall], detail: str, field: tuple[int, str] | None = None
    ) -> None:
        self.kind = kind
        self.calls = calls
        self.detail = detail
        self.field = field  # (index of the changed call, parameter) for ``change``
        self.refused: set[int] = set()


_UNPARSED = object()


def _parsed(observation: Any) -> Any:
    """An observation parsed from JSON text, or ``_UNPARSED`` for text that is not JSON."""
    value = parse_json_maybe(observation)
    return _UNPARSED if isinstance(observation, str) and value is observation else value


def _writes(cluster: ToolCluster, calls: Sequence[GoldCall]) -> list[int]:
    specs = {t.name: t for t in cluster.tools}
    return [
        i
        for i, c in enumerate(calls)
        if c.tool in specs and specs[c.tool].access is ToolAccess.WRITE and not c.is_error
    ]


def _world_values(cluster: ToolCluster, calls: Sequence[GoldCall], tool: str, param: str) -> list:
    """Other values the server's world holds for ``param``: those discovery saw accepted,
    then those its reads returned under the same key in the gold run."""
    out: list[JsonValue] = list(cluster.arg_values.get(tool, {}).get(param, []))
    for values in cluster.arg_values.values():
        out += values.get(param, [])

    def walk(value: Any) -> None:
        if isinstance(value, Mapping):
            for k, v in value.items():
                if k == param and isinstance(v, str | int | float) and not isinstance(v, bool):
                    out.append(v)
                walk(v)
        elif isinstance(value, list):
            for v in value[:20]:
                walk(v)

    for c in calls:
        obs = _parsed(c.observation)
        if obs is not _UNPARSED:
            walk(obs)
    return out


def _other_value(
    cluster: ToolCluster, calls: Sequence[GoldCall], tool: str, param: str, gold: JsonValue
) -> JsonValue:
    """Another value for a write's ``param``: one of the server's world; when it holds none
    (a name the task makes up), a guess for the parameter, else the gold one altered. A wrong
    variant may be made up; only a task's values may not."""
    schema = declared_properties(cluster.tool(tool)).get(param)
    guesses = param_values(param, schema, tool) if isinstance(schema, Mapping) else []
    for v in [*_world_values(cluster, calls, tool, param), *guesses]:
        if v != gold and type(v) is type(gold):
            return v
    if isinstance(gold, str) and not (isinstance(schema, Mapping) and schema.get("enum")):
        return f"{gold}-2" if gold else "other"
    return None


def near_miss(text: str) -> str | None:
    """``text`` with its last letter or digit moved on by one (same length, same shape), or
    None when it has none.

    >>> near_miss("Rent 1200, food 300\\n"), near_miss("CREATE TABLE b (x REAL)"), near_miss(".")
    ('Rent 1200, food 301\\n', 'CREATE TABLE b (x REAM)', None)
    """
    for i in range(len(text) - 1, -1, -1):
        ch = text[i]
        if ch.isdigit():
            return text[:i] + str((int(ch) + 1) % 10) + text[i + 1 :]
        if ch.isascii() and ch.isalpha():
            base = ord("a") if ch.islower() else ord("A")
            return text[:i] + chr(base + (ord(ch) - base + 1) % 26) + text[i + 1 :]
    return None


def _near_misses(
    cluster: ToolCluster, calls: Sequence[GoldCall], writes: list[int]
) -> list[Variant]:
    """A ``change`` per free-text argument of a write (not one its call check matches already:
    an id, a number, an enum value, a date) to its near miss."""
    out: list[Variant] = []
    for i in writes:
        call = calls[i]
        decided = deciding_fields(call.arguments, cluster.tool(call.tool).input_schema)
        for param, gold in call.arguments.items():
            if not isinstance(gold, str) or param in decided or param in cluster.server.args:
                continue
            other = near_miss(gold)
            if other is None or len(out) >= _MAX_PER_KIND:
                continue
            changed = [*calls]
            changed[i] = call.model_copy(update={"arguments": {**call.arguments, param: other}})
            detail = f"{call.tool}({param}={canonical_json(other)[:40]}, a near miss)"
            out.append(Variant("change", changed, detail, field=(i, param)))
    return out


def variants(cluster: ToolCluster, calls: Sequence[GoldCall]) -> list[Variant]:
    """The wrong variants of a gold run (module doc)."""
    writes = _writes(cluster, calls)
    out: list[Variant] = []
    for i in writes[:_MAX_PER_KIND]:
        out.append(
            Variant("drop", [c for j, c in enumerate(calls) if j != i], f"drop {calls[i].tool}")
        )
    changes = 0
    for i in writes:
        call = calls[i]
        for param, gold in call.arguments.items():
            if changes >= _MAX_PER_KIND or not isinstance(gold, str | int | float):
                continue
            other = _other_value(cluster, calls, call.tool, param, gold)
            if other is None:
                continue
            changed = [*calls]
            changed[i] = call.model_copy(update={"arguments": {**call.arguments, param: other}})
            was, now = canonical_json(gold)[:40], canonical_json(other)[:40]
            detail = f"{call.tool}({param}={now}, not {was})"
            out.append(Variant("change", changed, detail, field=(i, param)))
            changes += 1
    out += _near_misses(cluster, calls, writes)
    for i in writes[:_MAX_PER_KIND]:
        v = Variant("error", list(calls), f"{calls[i].tool} refused")
        v.refused.add(i)
        out.append(v)
    used = {c.tool for c in calls}
    strays = [t for t in cluster.tools if t.access is ToolAccess.WRITE and t.name not in used]
    if writes:
        for spec in strays[:_MAX_PER_KIND]:
            known = {p: list(vs) for p, vs in cluster.arg_values.get(spec.name, {}).items() if vs}
            args = generate_arguments(
                spec.input_schema, spec.name, known=known, fixed=cluster.server.args
            )
            stray = GoldCall(tool=spec.name, arguments=args)
            out.append(Variant("stray", [*calls, stray], f"also {spec.name}"))
    return out


def _answer(constraints: Sequence[Constraint], records: Sequence[ToolCallRecord]) -> str:
    """An answer stating every value the constraints check; a value that changes between
    reads (``observed``) is this run's own reading, as an episode's would be."""
    values: list[str] = []
    for c in constraints:
        if not isinstance(c, AnswerContains):
            continue
        if c.observed is not None:
            try:
                values.append(str(observed_reading(records, c.observed)))
                continue
            except LookupError:
                pass
        values += [str(v) for v in c.values]
    return "Done. " + ", ".join(values) if values else "Done."


def _trajectory(
    cluster: ToolCluster, records: list[ToolCallRecord], answer: str, blueprint_id: str
) -> Trajectory:
    return Trajectory(
        trajectory_id=f"mutant-{blueprint_id}",
        run_id="mutation-lint",
        blueprint_id=blueprint_id,
        tree_id="mutant",
        leaf_node_id="mutant",
        cluster_id=cluster.cluster_id,
        messages=[Message(role=MessageRole.ASSISTANT, content=answer)],
        tools=[t.to_openai() for t in cluster.tools],
        calls=records,
        final_answer=answer,
        termination=Termination.ASSISTANT_DONE,
    )


def observation_text(observation: Any) -> str:
    """An observation as the text a model reads: text as it is, anything else as JSON."""
    return observation if isinstance(observation, str) else canonical_json(observation)


async def _replay(
    env: LintEnvironment,
    handle: SnapshotHandle,
    variant: Variant,
    constraints: Sequence[Constraint] = (),
) -> tuple[list[ToolCallRecord], EnvState]:
    """The variant acted out from the initial state: its call records and its end state.
    A refused call is recorded with an error result the server never flagged."""
    await env.restore(handle)
    records: list[ToolCallRecord] = []
    for i, call in enumerate(variant.calls):
        if i in variant.refused:
            text, obs_class = _ERROR_TEXT, ObsClass.OK
        else:
            result = await env.call_tool(call.tool, dict(call.arguments))
            text = observation_text(observation_value(result))
            obs_class = ObsClass.ERROR if getattr(result, "is_error", False) else ObsClass.OK
        records.append(
            ToolCallRecord(
                call_id=f"m{i}",
                tool=call.tool,
                raw_arguments=canonical_json(call.arguments),
                arguments=dict(call.arguments),
                observation=text,
                obs_class=obs_class,
            )
        )
    return records, await with_readbacks(env, await env.state(), constraints)


def _scalars(value: Any, key: str = "", depth: int = 0) -> list[tuple[str, JsonValue]]:
    """(key, value) of the scalars in a call's arguments or result, nested ones included."""
    if depth > 5:
        return []
    if isinstance(value, Mapping):
        return [kv for k, v in value.items() for kv in _scalars(v, str(k), depth + 1)]
    if isinstance(value, list):
        return [kv for v in value[:10] for kv in _scalars(v, key, depth + 1)]
    if isinstance(value, str | int | float) and not isinstance(value, bool) and key:
        return [(key, value)]
    return []


def name_words(name: str) -> set[str]:
    """The words of a name, each singular: ``paths`` and ``path`` are one word."""
    return {singular(t) for t in name_tokens(name)}


def _gold_values(cluster: ToolCluster, gold: Sequence[GoldCall]) -> list[tuple[str, JsonValue]]:
    """What the gold run named: its writes' arguments first, then its results' fields."""
    writes = set(_writes(cluster, gold))
    out = [kv for i in sorted(writes) for kv in _scalars(gold[i].arguments)]
    out += [kv for c in gold if not c.is_error for kv in _scalars(c.arguments)]
    for c in gold:
        obs = _parsed(c.observation)
        if obs is not _UNPARSED:
            out += _scalars(obs)
    seen: set[str] = set()
    unique = []
    for k, v in out:
        key = canonical_json([k, v])
        if key not in seen:
            seen.add(key)
            unique.append((k, v))
    return unique


def _read_candidates(cluster: ToolCluster, gold: Sequence[GoldCall]) -> list[ProbeCall]:
    """Reads to try as a read-back, best first: reads whose required parameters all take a
    value the gold run named under the same name (``path`` of ``write_file`` for
    ``read_text_file``; a ``name`` of ``create_entities`` for ``open_nodes(names)``), then
    reads that take nothing (``read_graph``), then a read's one text parameter given a text the
    gold writes sent (a name for ``search_nodes(query)``)."""
    named = _gold_values(cluster, gold)
    texts = [v for _, v in named if isinstance(v, str) and 0 < len(v) <= 200]
    probes = {canonical_json([p.tool, p.arguments, p.resource]) for p in cluster.probes}
    matched: list[ProbeCall] = []
    bare: list[ProbeCall] = []
    loose: list[ProbeCall] = []
    for spec in sorted(cluster.tools, key=lambda t: t.name):
        if spec.access is not ToolAccess.READ:
            continue
        props = declared_properties(spec)
        required = spec.required_parameters()
        fixed = {p: cluster.server.args[p] for p in required if p in cluster.server.args}
        wanted = [p for p in required if p not in fixed]
        args: dict[str, JsonValue] = dict(fixed)
        for param in wanted:
            sub = props.get(param)
            kinds = schema_kinds(sub if isinstance(sub, Mapping) else {})
            value = next(
                (v for k, v in named if name_words(k) and name_words(k) == name_words(param)
                 and (type(v) is not str or "string" in kinds or "array" in kinds or not kinds)),
                None,
            )  # fmt: skip
            if value is None:
                break
            args[param] = [value] if "array" in kinds else value
        else:
            (bare if not wanted else matched).append(ProbeCall(tool=spec.name, arguments=args))
            continue
        if len(wanted) == 1 and texts:
            sub = props.get(wanted[0])
            if schema_kinds(sub if isinstance(sub, Mapping) else {}) <= {"string"}:
                loose.append(ProbeCall(tool=spec.name, arguments={**fixed, wanted[0]: texts[0]}))
    out = [
        p
        for p in [*matched, *bare, *loose]
        if canonical_json([p.tool, p.arguments, p.resource]) not in probes
    ]
    return out[:_MAX_READS]


class ReadbackSearch(NamedTuple):
    """What the probe search found: the check (None: no read sees the writes), the reads
    tried, and the reads that name what a write named (its path, its entity) and answered
    the same, successfully, before and after the gold run: the thing is there to be seen and
    the write left it as it was (a folder created that existed)."""

    check: FinalState | None
    tried: int
    unchanged: list[str] = []


def _names_a_write_value(probe: ProbeCall, writes: Sequence[GoldCall]) -> bool:
    given = {canonical_json(v) for _, v in _scalars(probe.arguments)}
    return any(canonical_json(v) in given for w in writes for _, v in _scalars(w.arguments))


async def find_readback(
    env: LintEnvironment,
    handle: SnapshotHandle,
    cluster: ToolCluster,
    gold: Sequence[GoldCall],
) -> ReadbackSearch:
    """A final-state check whose read-back sees what the gold run wrote (module doc), or None;
    the reads tried; and those naming a write's value that it left unchanged. Leaves ``env``
    after the gold run."""
    candidates = _read_candidates(cluster, gold)
    # the server's static resources (a memo no tool reads), after the tool reads
    probes = {p.resource for p in cluster.probes if p.resource}
    candidates += [ProbeCall(resource=u) for u in await listed_resources(env) if u not in probes]
    candidates = candidates[:_MAX_READS]
    if not candidates:
        return ReadbackSearch(None, 0)
    started = time.monotonic()
    await env.restore(handle)
    before = await read_backs(env, candidates)
    await _replay(env, handle, Variant("gold", list(gold), "the gold run"))
    after = await read_backs(env, candidates)
    again = await read_backs(env, candidates)
    # a second gold run from the snapshot must answer the same: a read that moves with time
    # or with each restart (a counter, a random sample) would fail the gold run's own replay
    await _replay(env, handle, Variant("gold", list(gold), "the gold run"))
    replayed = await read_backs(env, candidates)
    writes = [gold[i] for i in _writes(cluster, gold)]
    unchanged: list[str] = []
    for i, probe in enumerate(candidates):
        key = readback_key(i, probe)
        rows = after.get(key) or []
        if not rows or any(r.get("is_error") for r in rows):
            continue  # the read fails after the gold run: it reads something else
        if rows == before.get(key) and _names_a_write_value(probe, writes):
            unchanged.append(f"{probe.label}({canonical_json(probe.arguments)[:80]})")
        if rows == before.get(key) or rows != again.get(key) or rows != replayed.get(key):
            continue  # the writes did not change it, or it changes by itself
        tables = {readback_key(0, probe): rows}
        gold_hash = readback_hash([probe], tables)
        assert gold_hash is not None
        log.debug("read-back %s(%s) sees the gold run's writes", probe.label, probe.arguments)
        check = FinalState(
            gold_hash=gold_hash,
            gold_tables=tables,
            probes=[probe],
            derived_from="mutation_lint.readback",
        )
        return ReadbackSearch(check, len(candidates))
    log.debug(
        "no read-back among %d reads sees the gold run's writes (%.1f s)",
        len(candidates), time.monotonic() - started,
    )  # fmt: skip
    return ReadbackSearch(None, len(candidates), unchanged)


def _state_holds(check: FinalState, state: EnvState) -> bool:
    if check.probes:
        return readback_hash(check.probes, state.tables) == check.gold_hash
    return state.state_hash == check.gold_hash


def _refused(record: ToolCallRecord) -> bool:
    return record.obs_class is ObsClass.ERROR or result_error(record.observation) is not None


def _strengthen(
    constraints: list[Constraint], variant: Variant, gold: Sequence[GoldCall]
) -> tuple[list[Constraint], str | None]:
    """Stronger checks that fail ``variant``, and what was added (None: nothing to add)."""
    if variant.kind == "change" and variant.field is not None:
        i, param = variant.field
        call = gold[i]
        out: list[Constraint] = []
        added = None
        for c in constraints:
            if (
                isinstance(c, ToolCalled)
                and added is None
                and c.call.tool == call.tool
                and all(call.arguments.get(k) == v for k, v in c.call.matchers.items())
                and param not in c.call.matchers
            ):
                matchers = {**c.call.matchers, param: call.arguments[param]}
                c = c.model_copy(update={"call": CallPattern(tool=c.call.tool, matchers=matchers)})
                added = f"matcher {call.tool}.{param}"
            out.append(c)
        return out, added
    if variant.kind == "stray":
        tool = variant.calls[-1].tool
        if any(isinstance(c, ToolNotCalled) and c.call.tool == tool and not c.call.matchers
               for c in constraints):  # fmt: skip
            return constraints, None
        extra = ToolNotCalled(call=CallPattern(tool=tool), derived_from="mutation_lint.stray")
        return [*constraints, extra], f"tool_not_called {tool}"
    return constraints, None


async def lint_by_mutation(
    env: LintEnvironment,
    handle: SnapshotHandle,
    cluster: ToolCluster,
    gold: Sequence[GoldCall],
    constraints: list[Constraint],
    *,
    blueprint_id: str = "draft",
    searched: ReadbackSearch | None = None,
) -> tuple[list[Constraint], MutationLint]:
    """Score the wrong variants of ``gold`` (module doc); the constraints, strengthened where
    a variant passed them, and the figures. ``MutationLint.rejected`` says whether a variant
    still passes (or the gold run fails the stronger checks). Leaves ``env`` restored.
    ``searched``: the probe search the planner already made for this gold run (not repeated).
    """
    built = variants(cluster, gold)
    if not built:  # a read-only path: its answer is what the checks hold it to
        return constraints, MutationLint()
    readback, tried = None, 0
    if not any(isinstance(c, FinalState) for c in constraints):
        if searched is None:
            searched = await find_readback(env, handle, cluster, gold)
        readback, tried = searched.check, searched.tried
        if readback is not None:
            constraints = [readback, *constraints]
    replayed = [(v, *(await _replay(env, handle, v, constraints))) for v in built]
    # a stray write the server refused changed nothing: no wrong run to catch
    replayed = [r for r in replayed if not (r[0].kind == "stray" and _refused(r[1][-1]))]
    built = [r[0] for r in replayed]

    def passes(records: list[ToolCallRecord], state: EnvState, checks: list[Constraint]) -> bool:
        trajectory = _trajectory(cluster, records, _answer(checks, records), blueprint_id)
        return verify(trajectory, checks, state).passed

    passed_first = [v for v, records, state in replayed if passes(records, state, constraints)]
    strengthened: list[str] = []
    for v in passed_first:
        constraints, added = _strengthen(constraints, v, gold)
        if added:
            strengthened.append(added)
    survivors = [
        f"{v.kind}: {v.detail}"
        for v, records, state in replayed
        if passes(records, state, constraints)
    ]
    gold_variant = Variant("gold", list(gold), "the gold run")
    records, state = await _replay(env, handle, gold_variant, constraints)
    gold_ok = passes(records, state, constraints)
    await env.restore(handle)
    state_catches = sum(
        1
        for v, _, state in replayed
        if v.kind in ("drop", "change", "error")
        and any(not _state_holds(c, state) for c in constraints if isinstance(c, FinalState))
    )
    lint = MutationLint(
        variants=len(built),
        caught_first=len(built) - len(passed_first),
        survived=survivors,
        strengthened=strengthened,
        final_state_catches=state_catches,
        gold_passes=gold_ok,
        kinds=sorted({v.kind for v in built}),
        readback=(
            (
                readback.probes[0].resource
                or f"{readback.probes[0].tool}({canonical_json(readback.probes[0].arguments)[:80]})"
            )
            if readback is not None
            else ""
        ),
        readback_tried=tried,
    )
    log.debug("mutation lint: %s", lint)
    return constraints, lint
