"""Discover what an outside MCP server does not declare (docs/methods.md §2).

Runs in a throw-away environment started exactly as a run starts it (``Environment``):

1. **Tags.** A tool with ``readOnlyHint``/``destructiveHint`` keeps its annotation. Every
   other tool is probed: the "views" (stable results of read calls) and the work dir's file
   hashes are taken before and after one call with generated arguments; a change means write,
   no change on a successful call means read. A call that fails leaves the tag to the name.
   Each tag records its source and its evidence.
2. **Values.** Every successful result is kept; its scalar values (JSON leaves with their key,
   path- and name-like tokens of plain text) feed later calls.
3. **Edges by value flow.** For a tool B whose parameter accepts a value that tool A returned,
   B is called with that value; when the call succeeds, A -> B is an edge with that evidence.
3b. **Edges the LLM proposes** from the descriptions (``propose``; ``planning.edge_proposals``)
   catch what the key names hide (a ``ref`` that is a ticket number). Each is kept only when
   a probe confirms it: B called with the value A returned under the proposed field succeeds,
   and a control call with a value no tool returned fails (a tool that takes any string, a
   free-text subject, proves nothing). Rejected proposals are noted with the reason.
4. **Probes.** Read calls that succeed and answer the same twice in a row become the cluster's
   end-state probes (``ToolCluster.probes``), with the server's static resources that read the
   same twice (``ProbeCall.resource``): the verifier compares their results after the gold
   run and after a rollout.
"""

from __future__ import annotations

import ast
import asyncio
import json
import logging
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from trajsynth.mcp_servers.arguments import (
    fits_schema,
    generate_arguments,
    is_placeholder,
    param_values,
    schema_kinds,
)
from trajsynth.mcp_servers.graph import singular
from trajsynth.mcp_servers.listings import is_path_param, listed_entries
from trajsynth.mcp_servers.readback import listed_resources
from trajsynth.mcp_servers.tags import name_tokens, tag_from_name
from trajsynth.schemas import (
    EdgeOrigin,
    EdgeProposal,
    InfraError,
    JsonValue,
    MCPServerError,
    ProbeCall,
    ToolAccess,
    ToolEdge,
    ToolSpec,
    canonical_json,
    stable_hash,
)

__all__ = ["Discovery", "Proposer", "discover"]

Proposer = Callable[
    [Sequence[ToolSpec], Mapping[str, Sequence[str]]], Awaitable[Sequence[EdgeProposal]]
]
"""Edges read from the tools' descriptions and the fields each tool was seen returning (the
LLM's, in ``planning.edge_proposals``)."""

log = logging.getLogger(__name__)

_FILES = ["sh", "-c", "find . -type f -exec sha256sum {} + 2>/dev/null | sort"]
_TOKEN = re.compile(r"(?:/[\w.\-]+)+|[\w\-]+\.[A-Za-z0-9]{1,5}\b")
_MAX_VALUES = 40
_MAX_EDGE_CALLS = 40
_MAX_VARIETY_CALLS = 30
_MAX_PROBES = 6
_MAX_FOLDERS = 4  # listed folders tried with the tool that listed them
_MAX_PROPOSALS = 16
# A value no tool returned: what the target answers to it is the control a proposal's probe
# is compared with.
_MADE_UP = {"string": "trajsynth-no-such-value", "integer": 987_654_321, "number": 987_654_321}
_TICK_S = 1.1  # seconds between the two reads that decide whether a probe is stable


@dataclass
class Discovery:
    """What probing found: tools with tags, edges, probes, accepted values, the call count."""

    tools: list[ToolSpec]
    edges: list[ToolEdge]
    probes: list[ProbeCall]
    arg_values: dict[str, dict[str, list[JsonValue]]]
    calls: int = 0
    notes: list[str] = field(default_factory=list)
    # tools no probe call succeeded, with the last failure (an error result's text)
    failed: dict[str, str] = field(default_factory=dict)


@dataclass
class _Value:
    value: JsonValue
    key: str  # the JSON key it was found under ("$text" for plain text)
    tool: str
    path: str = ""  # where a reference finds it in the result ("$..." where none can)


def _observation(result: Any) -> JsonValue:
    """A result as data: structured content, JSON text, a Python literal printed as text
    (``[{'name': 'notes'}]``, as some servers answer), else the text."""
    if result.structured is not None:
        return result.structured
    try:
        return json.loads(result.text)
    except ValueError:
        pass
    if result.text[:1] in "[{(":
        try:
            value = ast.literal_eval(result.text)
            # no planned reference can follow a field of printed text: mark the root
            return {"$literal": json.loads(json.dumps(value, default=str))}
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            pass
    return result.text


def _leaves(
    value: Any, key: str = "", depth: int = 0, path: str = ""
) -> list[tuple[str, str, JsonValue]]:
    """(key, JSON path, value) of every scalar in a result. The path is what a planned
    reference follows (``entities[].name``); it starts with ``$`` where there is none to
    follow (tokens of plain text, JSON inside a string)."""
    if depth > 6:
        return []
    if isinstance(value, Mapping):
        out: list[tuple[str, str, JsonValue]] = []
        for k, v in value.items():
            sub = f"{path}.{k}" if path and not path.startswith("$") else (path or str(k))
            if path.startswith("$"):
                sub = path
            out += _leaves(v, str(k), depth + 1, sub)
        return out
    if isinstance(value, list):
        out = []
        for item in value[:10]:
            out += _leaves(item, key, depth + 1, path if path.startswith("$") else f"{path}[]")
        return out
    if isinstance(value, str) and value[:1] in "[{":  # JSON inside a string ({"result": "..."})
        try:
            inner = json.loads(value)
        except ValueError:
            inner = None
        if isinstance(inner, dict | list):
            return _leaves(inner, key, depth + 1, path if depth == 0 else "$json")
    if isinstance(value, str) and (depth == 0 or len(value) > 80 or "\n" in value):
        # plain text (or a long text field): its path- and file-like tokens
        return [("$text", "$text", t) for t in _TOKEN.findall(value)[:20]]
    if isinstance(value, str | int | float) and not isinstance(value, bool):
        return [(key, path or key, value)] if key else []
    return []


class _Prober:
    def __init__(self, env: Any, tools: list[ToolSpec], fixed: Mapping[str, JsonValue]):
        self.env = env
        self.tools = {t.name: t for t in tools}
        self.fixed = dict(fixed)
        self.values: list[_Value] = []
        self.accepted: dict[str, dict[str, list[JsonValue]]] = {}
        self.ok_args: dict[str, dict[str, JsonValue]] = {}
        self.errors: dict[str, str] = {}  # tool -> its last failure
        self.calls = 0
        # canonical JSON of the scalars probes sent, and of those the server returned before
        # any probe sent them (its own world: a file its listing named, an id a list answered)
        self.sent: set[str] = set()
        self.world: set[str] = {canonical_json(v) for v in self.fixed.values()}
        # once a probe may have written, what reads return may be what the probes made (the
        # columns of a table a guess created): the world is what was read before
        self.frozen = False
        self.added: set[str] = set()  # world values the last call added
        # folders a listing tool named, by that tool: each is listed with it once
        self.folders: dict[str, list[JsonValue]] = {}
        # this throw-away sandbox's work dir: a value under it is kept relative, so it means
        # the same file in every later environment
        self.workdir = str(getattr(getattr(env, "sandbox", None), "workdir", "") or "")
        # the server's static resources, read with the views (set by ``discover``)
        self.resources: list[str] = []

    def _portable(self, value: JsonValue) -> JsonValue:
        if self.workdir and isinstance(value, str) and self.workdir in value:
            if value == self.workdir:
                return "."
            return value.replace(self.workdir + "/", "").replace(self.workdir, ".")
        return value

    def known(self) -> dict[str, list[JsonValue]]:
        """Values seen so far by key (and every text token under every string param)."""
        out: dict[str, list[JsonValue]] = {}
        for v in self.values:
            out.setdefault(v.key, []).append(v.value)
        return out

    async def call(self, tool: str, args: dict[str, JsonValue]) -> Any | None:
        self.calls += 1
        self.added = set()
        for leaf in _scalars(args):
            self.sent.add(canonical_json(leaf))
        try:
            result = await self.env.call_tool(tool, args)
        except MCPServerError as exc:
            log.info("probe %s(%s) failed: %s", tool, canonical_json(args)[:120], exc)
            self.errors[tool] = str(exc)[:200]
            return None
        if result.is_error:
            self.errors[tool] = (result.text or "error")[:200]
        else:
            self.ok_args.setdefault(tool, dict(args))
            for param, value in args.items():
                bucket = self.accepted.setdefault(tool, {}).setdefault(param, [])
                if value not in bucket and len(bucket) < 5:
                    bucket.append(value)
            observed = _observation(result)
            if isinstance(observed, dict) and "$literal" in observed:
                leaves = _leaves(observed["$literal"], path="$literal")
            else:
                leaves = _leaves(observed)
            if listed_entries(args, observed):
                leaves = []  # a listing's names mean their paths (``_listed``), not themselves
            for key, path, raw in leaves:
                value = self._portable(raw)
                text = canonical_json(value)
                if not self.frozen and text not in self.sent and text not in self.world:
                    self.world.add(text)
                    self.added.add(text)
                if len(self.values) < _MAX_VALUES * 5 and not any(
                    v.value == value and v.key == key and v.tool == tool for v in self.values
                ):
                    self.values.append(_Value(value, key, tool, path))
            self._listed(tool, args, observed)
        return result

    def _listed(self, tool: str, args: dict[str, JsonValue], observed: JsonValue) -> None:
        """A listing's entries joined with the folder it listed (``docs/a.txt``): paths of
        the server's world, kept under ``path`` (``mcp_servers.listings``); its folders
        are tried with the same tool later (``self.folders``)."""
        for raw, is_dir in listed_entries(args, observed):
            value = self._portable(raw)
            text = canonical_json(value)
            if not self.frozen and text not in self.sent and text not in self.world:
                self.world.add(text)
                self.added.add(text)
            if not any(v.value == value and v.key == "path" for v in self.values):
                self.values.append(_Value(value, "path", tool, "$listing"))
            if is_dir and text in self.world:
                self.folders.setdefault(tool, [])
                if value not in self.folders[tool]:
                    self.folders[tool].append(value)

    def args_for(self, spec: ToolSpec) -> dict[str, JsonValue]:
        return generate_arguments(spec.input_schema, spec.name, known={}, fixed=self.fixed)

    def own_values(self, param: str, schema: Mapping[str, Any]) -> list[JsonValue]:
        """The server's own values for ``param``: returned under a like name (``user_ids``
        for ``user_id``), then, for a string, the paths and file names its text named."""
        own = [
            v.value
            for v in self.values
            if canonical_json(v.value) in self.world and _key_sim(v.key, param) >= 0.7
        ]
        if "string" in schema_kinds(schema):
            own += [
                v.value
                for v in self.values
                if v.key == "$text" and canonical_json(v.value) in self.world
            ]
        return own

    def own_args(self, spec: ToolSpec) -> dict[str, JsonValue]:
        """Arguments for ``spec`` with the server's own values first."""
        known = {
            k: self.own_values(k, sub)
            for k, sub in spec.parameter_schemas().items()
            if self.own_values(k, sub)
        }
        return generate_arguments(spec.input_schema, spec.name, known=known, fixed=self.fixed)

    async def files(self) -> str:
        try:
            res = await asyncio.to_thread(self.env.sandbox.exec, _FILES, timeout=30.0)
            return stable_hash(res.stdout)
        except Exception as exc:  # noqa: BLE001 - a sandbox without find: no file view
            log.debug("no file view: %s", exc)
            return ""

    async def view(self, readers: Sequence[tuple[str, dict[str, JsonValue]]]) -> dict[str, str]:
        out = {"$files": await self.files()}
        for tool, args in readers:
            try:
                result = await self.env.call_tool(tool, args)
            except MCPServerError:
                continue
            self.calls += 1
            out[tool] = stable_hash([result.is_error, result.text, result.structured])
        if self.resources:  # a write that changes only a resource (a memo) shows there
            reading = await self.env.read_probes([ProbeCall(resource=u) for u in self.resources])
            for uri, rows in zip(self.resources, reading.tables.values(), strict=True):
                out[uri] = stable_hash(rows)
        return out


_DESTROY = frozenset({"delete", "remove", "drop", "clear", "purge", "truncate", "reset"})


def _key_sim(key: str, param: str) -> float:
    """How well a returned key names a parameter: 1 for the same words (singular), 0.7 when
    one's words hold the other's (``name`` / ``entityName``), else their Jaccard index.

    >>> _key_sim("name", "names"), _key_sim("name", "entityName"), _key_sim("id", "path")
    (1.0, 0.7, 0.0)
    """
    a = {singular(t) for t in name_tokens(key)}
    b = {singular(t) for t in name_tokens(param)}
    if not a or not b:
        return 0.0
    if a == b:
        return 1.0
    if a <= b or b <= a:
        return 0.7
    return len(a & b) / len(a | b)


def _annotated(spec: ToolSpec) -> bool:
    return spec.access_source == "annotation"


async def discover(
    env: Any,
    tools: list[ToolSpec],
    *,
    fixed: Mapping[str, JsonValue] | None = None,
    ignore_annotations: bool = False,
    propose: Proposer | None = None,
) -> Discovery:
    """Probe ``tools`` in the started throw-away environment ``env`` (see the module doc).

    ``fixed`` are the cluster spec's argument values (``--arg``). With ``ignore_annotations``
    every tool is probed (the benchmark compares the result with the server's annotations).
    ``propose``: edges read from the descriptions, each kept only when a probe confirms it.
    """
    p = _Prober(env, tools, fixed or {})
    p.resources = await listed_resources(env)
    tags: dict[str, tuple[ToolAccess, str, str]] = {}
    for t in tools:
        if _annotated(t) and not ignore_annotations:
            tags[t.name] = (t.access, "annotation", t.access_evidence or "MCP annotations")

    # readers for the state view: annotated read-only tools, else tools whose name reads
    def looks_read(t: ToolSpec) -> bool:
        if t.name in tags:
            return tags[t.name][0] is ToolAccess.READ
        return tag_from_name(t.name) is ToolAccess.READ

    readers: list[tuple[str, dict[str, JsonValue]]] = []
    # reads that take nothing first: a listing names the server's own world (a file, an id)
    # before any guess is sent, so those values count as the server's
    for t in sorted(tools, key=lambda t: (bool(t.input_schema.get("required")), t.name)):
        if looks_read(t):
            args = p.args_for(t)
            first = await p.call(t.name, args)
            required = t.required_parameters()
            if (
                first is not None
                and first.is_error
                and required
                and all(map(is_path_param, required))
            ):
                # a guessed path failed: the folder an earlier read named (a listing of the
                # allowed directories), before any write, so what it lists is the server's own
                own = p.own_args(t)
                if own != args:
                    args = own
                    first = await p.call(t.name, args)
            again = await p.call(t.name, args) if first is not None else None
            if (
                first is not None
                and again is not None
                and not first.is_error
                and (first.text, first.structured) == (again.text, again.structured)
            ):
                readers.append((t.name, args))

    # a folder a listing named is listed with the same tool, before any probe may write: its
    # entries are the server's own, and the folders its reads list are among the values
    # they accepted (where a task may create a file, ``listings.listed_dirs``)
    for tool in list(p.folders):
        spec = p.tools[tool]
        params = [k for k in spec.parameter_schemas() if is_path_param(k) and k not in p.fixed]
        base = p.ok_args.get(tool)
        if base is None or len(params) != 1:
            continue
        i = 0
        while i < min(len(p.folders[tool]), _MAX_FOLDERS):  # grows as listings name sub-folders
            folder = p.folders[tool][i]
            i += 1
            if folder not in p.accepted.get(tool, {}).get(params[0], []):
                await p.call(tool, {**base, params[0]: folder})

    # 1. tags by probing: reads first (they change nothing if they are reads), then the rest
    order = sorted(
        (t for t in tools if t.name not in tags),
        key=lambda t: (not looks_read(t), bool(t.input_schema.get("required")), t.name),
    )
    failed: list[ToolSpec] = []

    async def probe_one(t: ToolSpec, args: dict[str, JsonValue], last: bool) -> None:
        before = await p.view([r for r in readers if r[0] != t.name])
        result = await p.call(t.name, args)
        added = set(p.added)
        after = await p.view([r for r in readers if r[0] != t.name])
        shown = canonical_json(args)[:160]
        by_name = tag_from_name(t.name)
        if result is None or result.is_error:
            why = "no answer" if result is None else (result.text or "error")[:120]
            tags[t.name] = (
                by_name or ToolAccess.WRITE,
                "name" if by_name else "default",
                f"probe {t.name}({shown}) failed ({why}); tag from the name",
            )
            if not last:
                failed.append(t)
            return
        changed = sorted(k for k in before if before.get(k) != after.get(k))
        if changed:
            # a view that moves with no call in between is volatile (a counter, a clock):
            # it proves nothing and stops being a view
            again = await p.view([r for r in readers if r[0] != t.name])
            volatile = {k for k in changed if again.get(k) != after.get(k)}
            readers[:] = [r for r in readers if r[0] not in volatile]
            p.resources = [u for u in p.resources if u not in volatile]
            changed = [k for k in changed if k not in volatile]
        if changed and "$files" not in changed and by_name is not ToolAccess.WRITE:
            # only a read result moved: call again; a change that does not happen again is
            # taken for noise in that result, not for a write
            second = await p.call(t.name, args)
            final = await p.view([r for r in readers if r[0] != t.name])
            if second is not None and not any(final.get(k) != again.get(k) for k in changed):
                changed = []
        if changed or by_name is ToolAccess.WRITE:
            # a write succeeded: what it answered and what reads answer from now on is made
            p.world -= added
            p.frozen = True
        if changed:
            what = ", ".join("work dir files" if k == "$files" else f"{k} result" for k in changed)
            tags[t.name] = (ToolAccess.WRITE, "probe", f"{t.name}({shown}) changed {what}")
        elif by_name is ToolAccess.WRITE:
            tags[t.name] = (
                ToolAccess.WRITE,
                "name",
                f"{t.name}({shown}) changed nothing probed ({len(before)} views); "
                "the name says write",
            )
        else:
            tags[t.name] = (
                ToolAccess.READ,
                "probe",
                f"{t.name}({shown}) succeeded and changed none of {len(before)} views "
                "(work dir files and read results)",
            )

    for t in order:
        await probe_one(t, p.args_for(t), last=False)
    # a call that failed for want of data (a note that did not exist yet) is tried again with
    # the values the other probes returned
    for t in list(failed):
        args = generate_arguments(t.input_schema, t.name, known=p.known(), fixed=p.fixed)
        await probe_one(t, args, last=True)
    tagged = [
        t.model_copy(
            update={
                "access": tags[t.name][0],
                "access_source": tags[t.name][1],
                "access_evidence": tags[t.name][2],
            }
        )
        for t in tools
    ]

    # 2. writes produce values reads can return: call each write once more if it failed
    p.frozen = True
    for t in tagged:
        destroys = bool(set(name_tokens(t.name)) & _DESTROY)
        if t.access is ToolAccess.WRITE and t.name not in p.ok_args and not destroys:
            await p.call(
                t.name, generate_arguments(t.input_schema, t.name, known=p.known(), fixed=p.fixed)
            )
    for t in tagged:  # reads again, with values writes made
        if t.access is ToolAccess.READ:
            await p.call(
                t.name, generate_arguments(t.input_schema, t.name, known=p.known(), fixed=p.fixed)
            )

    # 2b. more accepted values per parameter (variety for the planner's slots)
    budget = _MAX_VARIETY_CALLS
    for t in tagged:
        destroys = bool(set(name_tokens(t.name)) & _DESTROY)
        if budget <= 0 or (t.name not in p.ok_args and destroys):
            continue
        # a tool no guess satisfied yet is tried with the server's own values too
        base = p.ok_args.get(t.name) or generate_arguments(
            t.input_schema, t.name, known=p.known(), fixed=p.fixed
        )
        props = t.parameter_schemas()
        for param in t.required_parameters():
            sub = props.get(param, {})
            if sub.get("enum") or param in p.fixed:
                continue
            seen = p.accepted.get(t.name, {}).get(param, [])
            # the server's own values under a like name first (``user_ids`` for ``user_id``)
            own = p.own_values(param, sub)
            known = {**p.known(), param: [*own, *p.known().get(param, [])]}
            for value in param_values(param, sub, t.name, known=known)[:4]:
                if value in seen or budget <= 0:
                    continue
                budget -= 1
                await p.call(t.name, {**base, param: value})

    # 3. edges by value flow, then the proposed ones a probe confirms
    edges = await _value_flow(p, tagged)
    notes: list[str] = []
    if propose is not None:
        try:
            proposals = list(await propose(tagged, _returned_fields(p)))
        except InfraError as exc:  # the LLM is down: discovery stands on the probes alone
            proposals = []
            notes.append(f"no edge proposals: {exc}")
        confirmed, rejected = await _confirm_proposals(p, tagged, edges, proposals)
        edges = sorted([*edges, *confirmed], key=lambda e: (e.source, e.target))
        notes += rejected
        log.info(
            "edge proposals: %d, confirmed %d, rejected %d",
            len(proposals), len(confirmed), len(rejected),
        )  # fmt: skip

    # 4. probes: successful read calls that answer the same across a clock tick (a result
    # with the time in it is no end state)
    candidates = [
        t
        for t in sorted(tagged, key=lambda t: (bool(t.input_schema.get("required")), t.name))
        if t.access is ToolAccess.READ and t.name in p.ok_args
    ]
    first_round = {t.name: await p.call(t.name, p.ok_args[t.name]) for t in candidates}
    # and the server's static resources (a memo no tool reads), read across the same tick
    resources = [ProbeCall(resource=u) for u in p.resources]
    first_read = await env.read_probes(resources) if resources else None
    await asyncio.sleep(_TICK_S)
    probes: list[ProbeCall] = []
    for t in candidates:
        first = first_round[t.name]
        again = await p.call(t.name, p.ok_args[t.name])
        if (
            first is not None
            and again is not None
            and not first.is_error
            and (first.text, first.structured) == (again.text, again.structured)
        ):
            probes.append(ProbeCall(tool=t.name, arguments=p.ok_args[t.name]))
        if len(probes) >= _MAX_PROBES:
            break
    if first_read is not None:
        again_read = await env.read_probes(resources)
        for (key, rows), probe in zip(first_read.tables.items(), resources, strict=True):
            if rows and not rows[0]["is_error"] and again_read.tables.get(key) == rows:
                probes.append(probe)
            else:
                notes.append(f"resource {probe.resource} is no end-state probe: its read "
                             "failed or changed between two reads")  # fmt: skip
    return Discovery(
        tools=tagged,
        edges=edges,
        probes=probes,
        arg_values=_world_first(p),
        calls=p.calls,
        notes=notes,
        failed={t.name: p.errors.get(t.name, "") for t in tools if t.name not in p.ok_args},
    )


def _world_first(p: _Prober) -> dict[str, dict[str, list[JsonValue]]]:
    """Accepted values per parameter for the planner: those the server itself returned
    before any probe sent them or wrote (an id a list answered, a file its listing named)
    first, then values the schema gives (an enum, a format: a timezone, a date); never a
    made-up record a guess sent (``notes.txt``, ``groceries``, ``example``:
    ``arguments.is_placeholder``) nor what a probe's write made (the columns of a table a
    guess created), even when the server echoed it back."""

    # made-up values the probes sent: a text that quotes one back ("example: Error - ENOENT:
    # no such file ... 'example'", a per-item failure inside a successful result) is the
    # answer to a guess, not the server's own
    guesses = [
        g
        for g in (json.loads(x) for x in p.sent)
        if isinstance(g, str) and len(g) >= 4 and is_placeholder(g, p.world)
    ]

    def own(v: JsonValue) -> bool:
        return all(
            canonical_json(x) in p.world
            and not (isinstance(x, str) and any(g in x and g != x for g in guesses))
            for x in _scalars(v)
        )

    def of_schema(tool: str, param: str) -> set[str]:
        spec = p.tools.get(tool)
        sub = spec.parameter_schemas().get(param, {}) if spec is not None else {}
        return {canonical_json(v) for v in param_values(param, sub, tool) if not is_placeholder(v)}

    out: dict[str, dict[str, list[JsonValue]]] = {}
    for tool, params in p.accepted.items():
        kept = {
            param: sorted(
                (
                    v
                    for v in values
                    if not is_placeholder(v, p.world)
                    and (own(v) or canonical_json(v) in of_schema(tool, param))
                ),
                key=lambda v: not own(v),
            )
            for param, values in params.items()
        }
        # a text with no word in it (".") is a value only for a path (the work dir)
        kept = {
            param: [v for v in values if is_path_param(param) or not _wordless(v)]
            for param, values in kept.items()
        }
        out[tool] = {param: values for param, values in kept.items() if values}
    return {tool: params for tool, params in out.items() if params}


def _wordless(value: JsonValue) -> bool:
    return isinstance(value, str) and re.search(r"[A-Za-z0-9]{2}", value) is None


def _scalars(value: Any) -> list[JsonValue]:
    if isinstance(value, Mapping):
        return [x for v in value.values() for x in _scalars(v)]
    if isinstance(value, list):
        return [x for v in value for x in _scalars(v)]
    return [value] if isinstance(value, str | int | float) and not isinstance(value, bool) else []


def _returned_fields(p: _Prober) -> dict[str, list[str]]:
    """Per tool, the fields (JSON paths) its successful probes returned, first seen first."""
    out: dict[str, list[str]] = {}
    for v in p.values:
        name = v.path if v.path and not v.path.startswith("$") else v.key
        if name and not name.startswith("$") and name not in out.setdefault(v.tool, []):
            out[v.tool].append(name)
    return out


def _param_schema(target: ToolSpec, param: str) -> tuple[Mapping[str, Any], bool] | None:
    """The schema a value of ``param`` must fit (an array's item), and whether it is an
    array's; None when the parameter does not exist or takes objects."""
    sub = target.parameter_schemas().get(param)
    if sub is None:
        return None
    item: Mapping[str, Any] = sub
    items = sub.get("items")
    if "array" in schema_kinds(sub) and isinstance(items, dict):
        item = items
    if schema_kinds(item) & {"object", "array"}:
        return None
    return item, item is not sub


def _named(v: _Value, out_field: str) -> bool:
    """Whether a returned value is the field a proposal names (``ref``, ``items[].ref``)."""
    last = re.split(r"[.\[\]]+", out_field.strip("[]."))[-1] if out_field else ""
    return v.path == out_field or v.key == out_field or _key_sim(v.key, last) >= 0.7


async def _confirm_proposals(
    p: _Prober,
    tools: list[ToolSpec],
    edges: list[ToolEdge],
    proposals: Sequence[EdgeProposal],
) -> tuple[list[ToolEdge], list[str]]:
    """The proposals a probe confirms (see the module doc, 3b), and a line per rejection."""
    by_name = {t.name: t for t in tools}
    have = {(e.source, e.target, e.in_param) for e in edges}
    confirmed: list[ToolEdge] = []
    rejected: list[str] = []
    for prop in proposals[:_MAX_PROPOSALS]:
        label = f"{prop.source}.{prop.out_field} -> {prop.target}({prop.in_param})"
        if (prop.source, prop.target, prop.in_param) in have:
            continue  # value flow found it already
        target = by_name.get(prop.target)
        if prop.source not in by_name or target is None or prop.source == prop.target:
            rejected.append(f"proposed edge {label} rejected: it does not name two tools")
            continue
        shape = _param_schema(target, prop.in_param)
        if shape is None:
            rejected.append(
                f"proposed edge {label} rejected: {prop.target} has no scalar {prop.in_param!r}"
            )
            continue
        item, in_array = shape
        values = [
            v
            for v in p.values
            if v.tool == prop.source and _named(v, prop.out_field) and fits_schema(v.value, item)
        ]
        if not values:
            rejected.append(
                f"proposed edge {label} rejected: no probe of {prop.source} returned a "
                f"{prop.out_field!r} that {prop.in_param!r} accepts"
            )
            continue
        v = values[0]
        given = [v.value] if in_array else v.value
        result = await _call_with(p, target, prop.in_param, given)
        if result is None or result.is_error:
            why = "no answer" if result is None else (result.text or "an error")[:80]
            rejected.append(f"proposed edge {label} rejected: the call failed ({why})")
            continue
        kinds = schema_kinds(item)
        made_up = next((_MADE_UP[k] for k in ("string", "integer", "number") if k in kinds), None)
        control = "no control value for its type"
        if made_up is not None:
            other = await _call_with(p, target, prop.in_param, [made_up] if in_array else made_up)
            if other is not None and not other.is_error:
                rejected.append(
                    f"proposed edge {label} rejected: {prop.target} accepts a made-up "
                    f"{prop.in_param} too, so the call proves nothing"
                )
                continue
            control = "a made-up value failed"
        have.add((prop.source, prop.target, prop.in_param))
        confirmed.append(
            ToolEdge(
                source=prop.source,
                target=prop.target,
                out_field=v.path or v.key,
                in_param=prop.in_param,
                score=0.6,
                origin=EdgeOrigin.LLM,
                verified=True,
                evidence=(
                    f"proposed by the LLM ({prop.why.strip()[:80] or 'no reason given'}); "
                    f"{prop.source} returned {v.key}={canonical_json(v.value)[:60]}; "
                    f"{prop.target}({prop.in_param}={canonical_json(given)[:60]}) succeeded; "
                    f"{control}"
                ),
            )
        )
    return confirmed, rejected


async def _call_with(p: _Prober, target: ToolSpec, param: str, value: JsonValue) -> Any | None:
    args = generate_arguments(
        target.input_schema, target.name, fixed=p.fixed, overrides={param: value}
    )
    args[param] = value
    return await p.call(target.name, args)


async def _value_flow(p: _Prober, tools: list[ToolSpec]) -> list[ToolEdge]:
    edges: dict[tuple[str, str], ToolEdge] = {}
    budget = _MAX_EDGE_CALLS
    for target in tools:
        for param, sub in target.parameter_schemas().items():
            shape = _param_schema(target, param)
            if shape is None or sub.get("enum"):
                continue
            item_schema, in_array = shape
            # the best value per producer: same key name first, then any text token
            by_source: dict[str, tuple[float, _Value]] = {}
            for v in p.values:
                if v.tool == target.name or not fits_schema(v.value, item_schema):
                    continue
                score = 1.0 if v.key == "$text" else _key_sim(v.key, param)
                if v.key != "$text" and score < 0.5:
                    continue
                if v.key == "$text" and not ({"string"} & schema_kinds(item_schema)):
                    continue
                if score > by_source.get(v.tool, (-1.0, v))[0]:
                    by_source[v.tool] = (score, v)
            for source, (score, v) in sorted(by_source.items()):
                if (source, target.name) in edges or budget <= 0:
                    continue
                value = [v.value] if in_array else v.value
                budget -= 1
                result = await _call_with(p, target, param, value)
                if result is None or result.is_error:
                    continue
                out_field = v.path or v.key
                edges[(source, target.name)] = ToolEdge(
                    source=source,
                    target=target.name,
                    out_field=out_field,
                    in_param=param,
                    score=round(max(0.5, min(1.0, score)), 3),
                    origin=EdgeOrigin.VALUE_FLOW,
                    verified=True,
                    evidence=(
                        f"{source} returned {v.key}={canonical_json(v.value)[:60]}; "
                        f"{target.name}({param}={canonical_json(value)[:60]}) succeeded"
                    ),
                )
    return sorted(edges.values(), key=lambda e: (e.source, e.target))
