"""Tool-path sampling on a cluster's dependency graph (docs/methods.md §3, path sampling steps 1-6).

Pure code, no LLM and no I/O: given a cell, the cluster's dependency graph and the canonical
state of a fresh environment, draw a walk of a given shape and bind every argument it needs, so
the path can be run once for its ground truth. The same inputs and the same seeded ``rng`` always
give the same path.

Binding order for a parameter (§3 step 4): an upstream output on the path (``RefArg``), else a
slot whose value is drawn from a real row of the environment state (``SlotArg``: an email of a
real user, a real sku, a real flight date; CoVe's deterministic sampling), else a schema
default/const (``LiteralArg``). Enum choices and small counts are things a user states (§3 step
2), so they become slots too: a value the user must say belongs in the goal or hidden_info.
"""

from __future__ import annotations

import functools
import logging
import random
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

import networkx as nx
from pydantic import Field

from trajsynth.curation.evolution import weighted_draw
from trajsynth.mcp_servers.arguments import is_placeholder, param_values, schema_kinds
from trajsynth.mcp_servers.graph import entry_tools as graph_entry_tools
from trajsynth.mcp_servers.graph import normalize_name, output_fields, singular
from trajsynth.mcp_servers.tags import name_tokens
from trajsynth.schemas import (
    Cell,
    Difficulty,
    EnvState,
    JsonValue,
    LiteralArg,
    PathShape,
    PlannedCall,
    Precondition,
    Record,
    RefArg,
    SlotArg,
    ToolAccess,
    ToolCluster,
    ToolSpec,
)

__all__ = [
    "LENGTHS",
    "PlannedPath",
    "Rejection",
    "declared_properties",
    "entry_tools",
    "sample_path",
    "slot_candidates",
]

log = logging.getLogger(__name__)

# §3 step 1: calls per difficulty bin.
LENGTHS: dict[Difficulty, tuple[int, int]] = {
    Difficulty.EASY: (1, 2),
    Difficulty.MEDIUM: (3, 4),
    Difficulty.HARD: (5, 7),
}

# a value a precondition can demand of a column (bool is an int)
_Scalar = str | int | float
_ID_SUFFIXES = ("_id", "_ids")
_FREE_TEXT_PARAMS = frozenset(
    {"query", "q", "search", "keyword", "keywords", "text", "term", "name", "title"}
)
_LABEL_COLUMNS = ("name", "title", "subject", "summary", "label")
_COUNT_WORDS = frozenset(
    {
        "qty",
        "quantity",
        "count",
        "number",
        "nights",
        "seats",
        "passengers",
        "guests",
        "people",
        "units",
        "copies",
    }
)
_CONFIRM_WORDS = frozenset({"confirm", "confirmed", "agree", "accept", "acknowledge"})


class PlannedPath(Record):
    """A sampled, fully bound tool path: what the gold run executes (docs/methods.md §3)."""

    cluster_id: str
    shape: PathShape
    difficulty: Difficulty
    steps: list[PlannedCall]
    # shape edges on the path, (producer step, consumer step): the data flow the shape promises
    links: list[tuple[int, int]] = Field(default_factory=list)
    slots: dict[str, JsonValue] = Field(default_factory=dict)
    # where each slot's value came from: "table.column", "enum", "range" or "choice"
    slot_sources: dict[str, str] = Field(default_factory=dict)
    n_writes: int = 0
    reads_before_write: list[int] = Field(default_factory=list)  # WRIT's read evidence (§14)
    # per step, other values for the slots it binds first from a row it chose first (other
    # rows of that table, best first): what the gold run tries when the tool refuses a value
    alternatives: dict[int, list[dict[str, JsonValue]]] = Field(default_factory=dict)
    uses_code_tool: bool = False

    @property
    def tools(self) -> list[str]:
        return [step.tool for step in self.steps]


class Rejection(Record):
    """Why no path could be drawn for a cell; counted in the cell's validity rate (§6)."""

    reason: str
    detail: str = ""


# ---------------------------------------------------------------------------------------------
# names and schemas


def _is_id_like(param: str) -> bool:
    return param in ("id", "ids", "sku") or param.endswith(_ID_SUFFIXES)


def _options(schema: Mapping[str, JsonValue]) -> list[JsonValue]:
    """The branches of the schema's ``anyOf`` and ``oneOf``."""
    out: list[JsonValue] = []
    for key in ("anyOf", "oneOf"):
        branches = schema.get(key)
        if isinstance(branches, list):
            out += branches
    return out


def _schema_enum(schema: Mapping[str, JsonValue]) -> list[JsonValue] | None:
    enum = schema.get("enum")
    if isinstance(enum, list):
        return [v for v in enum if v is not None]
    for option in _options(schema):
        if isinstance(option, dict) and (found := _schema_enum(option)):
            return found
    return None


def _items_schema(schema: Mapping[str, JsonValue]) -> Mapping[str, JsonValue]:
    items = schema.get("items")
    if isinstance(items, dict):
        return items
    for option in _options(schema):
        if isinstance(option, dict) and isinstance(inner := option.get("items"), dict):
            return inner
    return {}


def _compatible(value: JsonValue, kinds: set[str]) -> bool:
    if value is None:
        return False
    if not kinds:
        return not isinstance(value, dict | list)
    if isinstance(value, bool):
        return "boolean" in kinds
    if isinstance(value, int):
        return bool(kinds & {"integer", "number"})
    if isinstance(value, float):
        return "number" in kinds
    if isinstance(value, str):
        return "string" in kinds
    return False


def declared_properties(spec: ToolSpec) -> dict[str, JsonValue]:
    """The ``properties`` of the tool's input schema as declared ({} when it has none)."""
    props = spec.input_schema.get("properties")
    return props if isinstance(props, dict) else {}


def _properties(spec: ToolSpec) -> dict[str, Mapping[str, JsonValue]]:
    return {k: v if isinstance(v, dict) else {} for k, v in declared_properties(spec).items()}


# ---------------------------------------------------------------------------------------------
# the environment state as a source of slot values


@dataclass
class _Tables:
    """The state tables with the first-seen JSON type of every column."""

    rows: dict[str, list[dict[str, JsonValue]]]
    columns: dict[str, dict[str, JsonValue]] = field(default_factory=dict)

    @classmethod
    def of(cls, state: EnvState) -> _Tables:
        rows = {name: [r for r in t if isinstance(r, dict)] for name, t in state.tables.items()}
        columns: dict[str, dict[str, JsonValue]] = {}
        for name in sorted(rows):
            sample: dict[str, JsonValue] = {}
            for row in rows[name]:
                for col, value in row.items():
                    if col not in sample and value is not None:
                        sample[col] = value
            columns[name] = sample
        return cls(rows=rows, columns=columns)


def slot_candidates(
    param: str, schema: Mapping[str, JsonValue], tool: str, state: EnvState
) -> list[tuple[str, str]]:
    """The (table, column) pairs of ``state`` that can supply ``param`` of ``tool``, best first.

    >>> s = EnvState(state_hash="h", tables={"users": [{"id": "u1", "email": "a@x.io"}]})
    >>> slot_candidates("email", {"type": "string"}, "find_user", s)
    [('users', 'email')]
    >>> slot_candidates("user_id", {"type": "string"}, "get_user", s)
    [('users', 'id')]
    """
    return [(t, c) for _, t, c in _rank_columns(param, schema, tool, _Tables.of(state))]


def _rank_columns(
    param: str, schema: Mapping[str, JsonValue], tool: str, tables: _Tables
) -> list[tuple[float, str, str]]:
    hint = schema.get("x-slot") or schema.get("x-trajsynth-slot")
    if isinstance(hint, str) and "." in hint:
        table, column = hint.split(".", 1)
        if column in tables.columns.get(table, {}):
            return [(10.0, table, column)]
    kinds = schema_kinds(schema)
    array = "array" in kinds
    if array:
        kinds = schema_kinds(_items_schema(schema))
    p = param.lower()
    p_single = p[:-1] if p.endswith("_ids") else p  # item_ids -> item_id
    tool_nouns = {singular(t) for t in name_tokens(tool)}
    ranked: list[tuple[float, str, str]] = []
    for table in sorted(tables.columns):
        noun = singular(table.lower())
        table_bonus = 1.0 if noun in tool_nouns else 0.0
        for column, sample in sorted(tables.columns[table].items()):
            if not _compatible(sample, kinds):
                continue
            c = column.lower()
            score = 0.0
            if c in (p_single, p):
                score = 3.0
            elif f"{noun}_{c}" in (p, p_single):
                score = 3.5
            elif p in _FREE_TEXT_PARAMS and c in _LABEL_COLUMNS:
                score = 2.0 if table_bonus else 0.5
            elif c not in ("id", *_LABEL_COLUMNS) and (p.endswith("_" + c) or c.endswith("_" + p)):
                score = 1.5  # departure_date <-> date
            if score > 0:
                ranked.append((score + table_bonus, table, column))
    ranked.sort(key=lambda x: (-x[0], x[1], x[2]))
    return ranked


# ---------------------------------------------------------------------------------------------
# graph access


def _edge_bindings(
    cluster: ToolCluster, graph: nx.DiGraph, u: str, v: str
) -> list[tuple[str, str, float]]:
    """(in_param, out_field, score) for every known way an output of u feeds v, best first.

    Read from the graph's edge attributes (and the cluster's ``ToolEdge`` list for that pair);
    parameters with an enum are left out.
    """
    found: dict[str, tuple[str, float]] = {}
    if graph.has_edge(u, v):
        attrs = graph.edges[u, v]
        entries: list[Mapping[str, JsonValue]] = [attrs]
        for key in ("edges", "bindings"):
            extra = attrs.get(key)
            if isinstance(extra, list):
                entries += [e if isinstance(e, dict) else e.model_dump() for e in extra]
        for entry in entries:
            param, out = entry.get("in_param"), entry.get("out_field")
            # a value-flow edge seen in plain text ("$text") has no field a reference can
            # follow: the consumer's value comes from the probe's accepted values instead
            if isinstance(param, str) and isinstance(out, str) and param and out[:1] not in "$":
                raw = entry.get("score", attrs.get("score", 1.0))
                score = float(raw) if isinstance(raw, int | float | str) and raw else 0.0
                if param not in found or found[param][1] < score:
                    found[param] = (out, score)
        for edge in cluster.edges:
            if not (edge.source == u and edge.target == v and edge.in_param):
                continue
            if edge.out_field.startswith("$"):
                continue
            if edge.in_param not in found or found[edge.in_param][1] < edge.score:
                found[edge.in_param] = (edge.out_field, edge.score)
    # an output rarely holds one of an enum's exact values: such params are user choices
    props = _properties(cluster.tool(v)) if v in cluster.tool_names else {}
    ranked = [(p, out, s) for p, (out, s) in found.items() if not _schema_enum(props.get(p, {}))]
    ranked.sort(key=lambda x: (-x[2], x[0]))
    return ranked


def _edge_score(graph: nx.DiGraph, u: str, v: str) -> float:
    score = graph.edges[u, v].get("score", 1.0)
    return float(score) if isinstance(score, int | float) else 1.0


def _successors(graph: nx.DiGraph, u: str, tools: set[str]) -> list[str]:
    return sorted(v for v in graph.successors(u) if v != u and v in tools)


def _predecessors(graph: nx.DiGraph, v: str, tools: set[str]) -> list[str]:
    return sorted(u for u in graph.predecessors(v) if u != v and u in tools)


def _rarity(uses: Mapping[str, int], tool: str) -> float:
    return 1.0 / (uses.get(tool, 0) + 1)


# ---------------------------------------------------------------------------------------------
# entry tools (§3 step 2)


def _known_values(cluster: ToolCluster, tool: str, param: str) -> list[tuple[JsonValue, str]]:
    """Values an outside cluster can give ``tool.param`` without an upstream call: the one
    the user fixed (``--arg``), then the ones probing saw accepted."""
    out: list[tuple[JsonValue, str]] = []
    if param in cluster.server.args:
        out.append((cluster.server.args[param], "spec"))
    for value in cluster.arg_values.get(tool, {}).get(param, []):
        if all(value != v for v, _ in out):
            out.append((value, "probe"))
    return out


def _slot_bindable(spec: ToolSpec, tables: _Tables, cluster: ToolCluster | None = None) -> bool:
    props = _properties(spec)
    return all(
        _literal_or_choice_possible(param, props.get(param, {}))
        or _rank_columns(param, props.get(param, {}), spec.name, tables)
        or (cluster is not None and bool(_known_values(cluster, spec.name, param)))
        or (cluster is not None and cluster.source == "outside")  # its schema is all we know
        for param in spec.required_parameters()
    )


def entry_tools(cluster: ToolCluster, graph: nx.DiGraph, state: EnvState) -> list[str]:
    """Tools whose required params the user can state (§3 step 2), sorted by name.

    A tool is an entry when every required param can be bound without an upstream call (a
    value from ``state``, an enum choice, a count) and none is an id another tool of the
    cluster produces (``mcp_servers.graph.entry_tools``). When that leaves no entry at all,
    the second rule is dropped.
    """
    tables = _Tables.of(state)
    names = [t for t in sorted(cluster.tool_names) if t in graph or not graph.number_of_nodes()]
    bindable = [t for t in names if _slot_bindable(cluster.tool(t), tables, cluster)]
    user_known = set(graph_entry_tools(cluster))
    return [t for t in bindable if t in user_known] or bindable


def _literal_or_choice_possible(param: str, schema: Mapping[str, JsonValue]) -> bool:
    if "default" in schema or "const" in schema or _schema_enum(schema):
        return True
    kinds = schema_kinds(schema)
    words = set(name_tokens(param))
    if kinds & {"integer", "number"} and (words & _COUNT_WORDS or "minimum" in schema):
        return True
    return "boolean" in kinds


# ---------------------------------------------------------------------------------------------
# binding (§3 step 4)


class _Unbindable(Exception):
    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


@dataclass
class _Binder:
    cluster: ToolCluster
    graph: nx.DiGraph
    tables: _Tables
    rng: random.Random
    slots: dict[str, JsonValue] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)
    rows: dict[str, dict[str, JsonValue]] = field(default_factory=dict)  # chosen row per table
    # values the current step's references will carry, predicted from the rows chosen so far
    expected: dict[str, JsonValue] = field(default_factory=dict)
    done_states: frozenset[str] = frozenset()  # what the current tool's verb leaves a row as
    step: int = 0
    # rows drawn from per table, best first, and the step that chose the table's row
    pools: dict[str, list[dict[str, JsonValue]]] = field(default_factory=dict)
    chosen_at: dict[str, int] = field(default_factory=dict)
    # step -> table -> (slot, column, as a list) first bound there from that table's row
    fresh: dict[int, dict[str, list[tuple[str, str, bool]]]] = field(default_factory=dict)
    # rows a check of an earlier binding found wrong (by id): drawn only when nothing else fits
    banned: frozenset[int] = frozenset()
    # values the later tools of the path accept, by parameter name (their preconditions)
    demands: dict[str, set[_Scalar]] = field(default_factory=dict)
    # per step, each argument's value where the binding predicts it, and the row it came from
    predicted: list[dict[str, JsonValue]] = field(default_factory=list)
    origin: list[dict[str, int]] = field(default_factory=list)
    known: dict[str, JsonValue] = field(default_factory=dict)  # the current step's, so far
    slot_rows: dict[str, int] = field(default_factory=dict)  # slot name -> id of its row
    expected_rows: dict[str, int] = field(default_factory=dict)

    def bind(self, tools: list[str], links: list[tuple[int, int]]) -> list[PlannedCall]:
        self.demands = _demands(self.cluster, self.tables, tools)
        steps: list[PlannedCall] = []
        for i, tool in enumerate(tools):
            self.step = i
            spec = self.cluster.tool(tool)
            props = _properties(spec)
            required = spec.required_parameters()
            args: dict[str, LiteralArg | RefArg | SlotArg] = {}
            self.known = {}
            # data flow promised by the shape: the consumer takes at least one param per link
            producers = [j for j, k in links if k == i]
            for j in producers:
                bindings = _edge_bindings(self.cluster, self.graph, tools[j], tool)
                for param, out_field, _ in bindings:
                    if param not in args and (param in props or param in required):
                        args[param] = RefArg(step=j, field=_ref_path(out_field))
                        break
            self.expected = self._expected(args)
            self._predict(args, props)
            self.done_states = (
                _done_states(tool) if spec.access is ToolAccess.WRITE else frozenset()
            )
            for param in required:
                if param in args:
                    continue
                ref = self._ref_from_path(tools, i, param)
                args[param] = ref or self._slot_or_literal(tool, param, props.get(param, {}))
                self.expected = self._expected(args)
                self._predict(args, props)
            if not args and props:
                self._bind_one_optional(tools, i, props, args)
                self.expected = self._expected(args)
                self._predict(args, props)
            self.predicted.append(dict(self.known))
            self.origin.append(self._origins(args))
            steps.append(PlannedCall(tool=tool, args=args))
        return steps

    def _predict(
        self,
        args: Mapping[str, LiteralArg | RefArg | SlotArg],
        props: Mapping[str, Mapping[str, JsonValue]],
    ) -> None:
        """The current step's argument values as far as the binding knows them (a param
        left out takes its schema default: book_flight's cabin)."""
        known: dict[str, JsonValue] = {
            p: schema["default"]
            for p, schema in props.items()
            if p not in args and "default" in schema
        }
        for param, arg in args.items():
            if isinstance(arg, LiteralArg):
                known[param] = arg.value
            elif isinstance(arg, SlotArg):
                known[param] = self.slots.get(arg.name)
            elif param in self.expected:
                known[param] = self.expected[param]
        self.known = {k: v for k, v in known.items() if v is not None}

    def _origins(self, args: Mapping[str, LiteralArg | RefArg | SlotArg]) -> dict[str, int]:
        out: dict[str, int] = {}
        for param, arg in args.items():
            if isinstance(arg, SlotArg) and arg.name in self.slot_rows:
                out[param] = self.slot_rows[arg.name]
            elif isinstance(arg, RefArg) and param in self.expected_rows:
                out[param] = self.expected_rows[param]
        return out

    def violations(self, steps: list[PlannedCall]) -> set[int] | None:
        """None when every predicted value is one its tool accepts in the initial state (the
        cluster's preconditions), every list a reference reads its first item from holds
        rows for the call's inputs, and no write only writes back what a read returned;
        else the ids of the rows that gave the wrong values
        (empty: none to blame). A reference through a list whose first item the tool would
        refuse is pointed at the first item it accepts (``steps`` is updated in place)."""
        blamed: set[int] | None = None
        for i, step in enumerate(steps):
            for pre in self.cluster.preconditions:
                if pre.tool != step.tool:
                    continue
                arg = step.args.get(pre.param)
                if isinstance(arg, LiteralArg):
                    continue  # the tool's own default
                # a value read from a list is judged by the list's rows (the user's orders)
                # before any guess from a row the path chose
                verdict: bool | None = None
                at_fault: set[int] = set()
                if isinstance(arg, RefArg):
                    verdict, at_fault = self._point_at_accepted(steps, i, pre)
                if verdict is None:
                    verdict = _holds(pre, self.predicted[i], self.tables)
                    at_fault = {
                        self.origin[i][param]
                        for param in (pre.param, *pre.same.values())
                        if param in self.origin[i]
                    }
                if verdict is False:
                    blamed = (blamed or set()) | at_fault
            if self._writes_back(steps, i):
                blamed = blamed or set()  # the path's shape, not a row, is at fault
            for arg in step.args.values():
                if not isinstance(arg, RefArg) or "[0]" not in arg.field or arg.step >= i:
                    continue
                related = self._list_of(steps, arg)
                if related is not None and not related[0]:
                    blamed = blamed or set()
                    blamed.update(self.origin[arg.step].values())
        return blamed

    def _writes_back(self, steps: list[PlannedCall], i: int) -> bool:
        """Whether step ``i`` is a write fed only by one read's output and inputs (write_file
        of the content read_file returned, to the path it read): it sets what that read
        found, a no-op the gold run refuses."""
        if self.cluster.tool(steps[i].tool).access is not ToolAccess.WRITE:
            return False
        args = list(steps[i].args.values())
        producers = {a.step for a in args if isinstance(a, RefArg)}
        if len(args) < 2 or len(producers) != 1:
            return False
        j = producers.pop()
        if self.cluster.tool(steps[j].tool).access is not ToolAccess.READ:
            return False
        # the read's own inputs count as its output (the same path slot for both calls)
        read_slots = {a.name for a in steps[j].args.values() if isinstance(a, SlotArg)}
        return all(
            isinstance(a, RefArg) or (isinstance(a, SlotArg) and a.name in read_slots) for a in args
        )

    def _list_of(
        self, steps: list[PlannedCall], ref: RefArg
    ) -> tuple[list[dict[str, JsonValue]], bool] | None:
        """The state's rows of the list ``ref`` reads an item of, and whether every input of
        the call that lists it is accounted for (an input at its schema default filters
        nothing: list_files' ``directory='.'``; search_products' query is not a column)."""
        head = re.findall(r"[A-Za-z_][A-Za-z0-9_]*", re.split(r"\[\d+\]", ref.field)[0])
        if not head:
            return None
        tool = steps[ref.step].tool
        args = self.predicted[ref.step]
        props = _properties(self.cluster.tool(tool))
        loose = {p for p, v in args.items() if props.get(p, {}).get("default", ...) == v}
        leaf = re.findall(
            r"[A-Za-z_][A-Za-z0-9_]*", re.split(r"\[\d+\]", ref.field, maxsplit=1)[-1]
        )
        return _list_rows(self.tables, tool, head[-1], args, loose, leaf[-1] if leaf else "")

    def _point_at_accepted(
        self, steps: list[PlannedCall], i: int, pre: Precondition
    ) -> tuple[bool | None, set[int]]:
        """For a reference whose value comes from a list's first item (directly, or echoed
        by a call in between: write_file's path), the list's rows in the state: True when
        the first is one ``pre`` accepts, else the reference is pointed at the first that
        is (True; not across a write), or False when none is, with the rows that gave the
        list call's inputs (the user whose orders these are); None when the state does not
        say."""
        holder, param = i, pre.param
        ref = steps[i].args[param]
        assert isinstance(ref, RefArg)
        through_write = False
        while "[" not in ref.field and "." not in ref.field:
            echoed = steps[ref.step].args.get(ref.field)
            if not isinstance(echoed, RefArg):
                return None, set()
            through_write |= self.cluster.tool(steps[ref.step].tool).access is ToolAccess.WRITE
            holder, param, ref = ref.step, ref.field, echoed
        if "[0]" not in ref.field:
            return None, set()
        listed = self._list_of(steps, ref)
        leaf = re.findall(r"[A-Za-z_][A-Za-z0-9_]*", ref.field.partition("[0]")[2])
        if not listed or not listed[0] or not leaf:
            return None, set()
        related, exact = listed
        if not exact:
            # more rows than the call lists: their order says nothing of the list's, and
            # only "none of them is accepted" says something of the list
            accepted = any(
                _holds(pre, {**self.predicted[i], pre.param: r.get(leaf[-1])}, self.tables)
                is not False
                for r in related
                if r.get(leaf[-1]) is not None
            )
            return (None, set()) if accepted else (False, set(self.origin[ref.step].values()))
        # a write in between (write_file, then run_tests on what it wrote) is not pointed
        # at another file for the later tool's sake: what it writes there is not what that
        # tool needs (a README copied over the tests); only its own item is judged
        for k, row in enumerate(related[: 1 if through_write else LIST_ITEMS]):
            value = row.get(leaf[-1])
            args = {**self.predicted[i], pre.param: value}
            if value is None or _holds(pre, args, self.tables) is False:
                continue
            if k:
                moved = RefArg(step=ref.step, field=ref.field.replace("[0]", f"[{k}]", 1))
                steps[holder] = steps[holder].model_copy(
                    update={"args": {**steps[holder].args, param: moved}}
                )
            self.predicted[holder][param] = value
            self.predicted[i][pre.param] = value
            return True, set()
        return False, set(self.origin[ref.step].values())

    def _expected(self, args: Mapping[str, LiteralArg | RefArg | SlotArg]) -> dict[str, JsonValue]:
        """What each reference of a step will carry, where a chosen row predicts it: a
        reference to ``airports[0].code`` carries the ``code`` of the airport row the path
        already chose (its upstream call was bound from that row). A row drawn for the
        step's other slots must agree with these (a flight whose destination is that airport),
        or the call would ask for something the state does not hold."""
        out: dict[str, JsonValue] = {}
        for param, arg in args.items():
            if not isinstance(arg, RefArg):
                continue
            names = [n for n in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", arg.field)]
            if not names:
                continue
            leaf = names[-1]
            if len(names) == 1 and arg.step < len(self.predicted):
                # an output named like one of the call's inputs echoes it (write_file's path)
                echoed = self.predicted[arg.step].get(leaf)
                if echoed is not None:
                    out[param] = echoed
                    if leaf in self.origin[arg.step]:
                        self.expected_rows[param] = self.origin[arg.step][leaf]
                    continue
            for table, row in self.rows.items():
                holders = {table.lower(), singular(table.lower())}
                if (len(names) == 1 or names[-2].lower() in holders) and row.get(leaf) is not None:
                    out[param] = row[leaf]
                    self.expected_rows[param] = id(row)
                    break
        return out

    def _bind_one_optional(
        self,
        tools: list[str],
        i: int,
        props: Mapping[str, Mapping[str, JsonValue]],
        args: dict[str, LiteralArg | RefArg | SlotArg],
    ) -> None:
        """A tool with no required params but some optional ones ("give a user or an order")
        gets one of them: from the path if it can, else from the state."""
        for param in props:
            ref = self._ref_from_path(tools, i, param)
            if ref is not None:
                args[param] = ref
                return
        for param, schema in props.items():
            if _rank_columns(param, schema, tools[i], self.tables):
                try:
                    args[param] = self._slot_or_literal(tools[i], param, schema, defaults=False)
                except _Unbindable:
                    continue
                return

    def _ref_from_path(self, tools: list[str], i: int, param: str) -> RefArg | None:
        best: tuple[float, int, str] | None = None
        for j in range(i):
            for in_param, out_field, score in _edge_bindings(
                self.cluster, self.graph, tools[j], tools[i]
            ):
                if in_param == param and (best is None or score > best[0]):
                    best = (score, j, out_field)
        if best is None:
            return self._ref_by_name(tools, i, param)
        return RefArg(step=best[1], field=_ref_path(best[2]))

    def _ref_by_name(self, tools: list[str], i: int, param: str) -> RefArg | None:
        """An earlier call's output field with the id parameter's canonical name (§2 step 1),
        the nearest call first and single fields before list items: the edge inference keeps
        one edge per tool pair, but a call can feed several ids of a later one."""
        schema = _properties(self.cluster.tool(tools[i])).get(param, {})
        if _schema_enum(schema) or not (_is_id_like(param) or param.endswith("email")):
            return None  # free text (a title, a subject) is the user's to say, not copied
        want = normalize_name(param[:-1] if param.endswith("_ids") else param)
        for j in reversed(range(i)):
            spec = self.cluster.tool(tools[j])
            fields = [
                f
                for f in output_fields(spec.name, spec.output_schema)
                if normalize_name(f.name) == want and f.json_type not in ("object", "array")
            ]
            fields.sort(key=lambda f: (f.many, f.path.count("."), f.path))
            if fields:
                return RefArg(step=j, field=_ref_path(fields[0].path))
        return None

    def _slot_or_literal(
        self, tool: str, param: str, schema: Mapping[str, JsonValue], *, defaults: bool = True
    ) -> LiteralArg | SlotArg:
        if "const" in schema:
            return LiteralArg(value=schema["const"])
        if defaults and "default" in schema:
            return LiteralArg(value=schema["default"])
        enum = _schema_enum(schema)
        ranked = _rank_columns(param, schema, tool, self.tables)
        # the table and column a precondition names hold the values the tool accepts
        stated = [
            (p.table, p.column)
            for p in self.cluster.preconditions
            if p.tool == tool
            and p.param == param
            and not p.absent
            and p.column in self.tables.columns.get(p.table, {})
        ]
        ranked = [(99.0, t, c) for t, c in dict.fromkeys(stated)] + [
            r for r in ranked if (r[1], r[2]) not in stated
        ]

        def accepted(value: JsonValue) -> bool:
            return self._accepts(tool, param, value)

        for _, table, column in ranked:
            row = self._row(table, column, enum, accepted)
            if row is None:
                continue
            value = row[column]
            array = "array" in schema_kinds(schema)
            if array:
                value = [value]
            before = set(self.slots)
            arg = self._slot(param, value, f"{table}.{column}")
            self.slot_rows.setdefault(arg.name, id(row))
            if arg.name not in before and self.chosen_at.get(table) == self.step:
                self.fresh.setdefault(self.step, {}).setdefault(table, [])
                self.fresh[self.step][table].append((arg.name, column, array))
            return arg
        known = _known_values(self.cluster, tool, param)
        if known and (known[0][1] == "spec" or not enum):
            value, source = (
                known[self.rng.randrange(len(known))] if known[0][1] != "spec" else known[0]
            )
            return self._slot(param, value, source)
        if enum:
            if len(enum) == 1:
                return LiteralArg(value=enum[0])
            return self._slot(param, enum[self.rng.randrange(len(enum))], "enum")
        kinds = schema_kinds(schema)
        words = set(name_tokens(param))
        if "boolean" in kinds:
            if words & _CONFIRM_WORDS:
                return LiteralArg(value=True)
            return self._slot(param, self.rng.random() < 0.5, "choice")
        if kinds & {"integer", "number"} and (words & _COUNT_WORDS or "minimum" in schema):
            minimum, maximum = schema.get("minimum"), schema.get("maximum")
            low = max(1, int(minimum) if isinstance(minimum, int | float) and minimum else 1)
            high = low + 2
            if isinstance(maximum, int | float):
                high = max(low, min(high, int(maximum)))
            return self._slot(param, self.rng.randint(low, high), "range")
        if self.cluster.source == "outside":  # no seed data: the schema's own values
            own = [v for v in param_values(param, schema, tool) if not is_placeholder(v)]
            # none (a made-up name is no value): the planner LLM writes it (planning.argfill)
            return self._slot(param, own[0] if own else None, "schema")
        raise _Unbindable(f"{tool}.{param}")

    def _slot(self, param: str, value: JsonValue, source: str) -> SlotArg:
        name = param
        k = 2
        while name in self.slots and self.slots[name] != value:
            name = f"{param}_{k}"
            k += 1
        self.slots[name] = value
        self.sources.setdefault(name, source)
        return SlotArg(name=name)

    def _accepts(self, tool: str, param: str, value: JsonValue) -> bool:
        """Whether ``value`` for ``param`` keeps every precondition of ``tool`` that names the
        param (its own, or another param's ``same``) true, with the step's known values."""
        args = {**self.known, param: value}
        for pre in self.cluster.preconditions:
            names = pre.tool == tool and (pre.param == param or param in pre.same.values())
            if names and _holds(pre, args, self.tables) is False:
                return False
        return True

    def _row(
        self,
        table: str,
        column: str,
        enum: list[JsonValue] | None = None,
        accepted: Callable[[JsonValue], bool] | None = None,
    ) -> dict[str, JsonValue] | None:
        def fits(row: Mapping[str, JsonValue]) -> bool:
            value = row.get(column)
            if value is None or (enum and value not in enum):
                return False
            return accepted is None or accepted(value)

        chosen = self.rows.get(table)
        if chosen is not None and fits(chosen):
            return chosen
        rows = [r for r in self.tables.rows.get(table, []) if fits(r)]
        if not rows:
            return None
        rows = [r for r in rows if id(r) not in self.banned] or rows
        # the step's references agree with the row (a flight to the airport just looked up)
        agreeing = [r for r in rows if all(r[p] == v for p, v in self.expected.items() if p in r)]
        rows = agreeing or rows
        # a value the path's later tools will get from this row is one they accept (the user
        # whose cart is not empty, for a path that ends in place_order)
        for name in sorted(self.demands):
            wanted = self.demands[name]
            narrowed = [r for r in rows if r.get(name) is None or _member(r[name], wanted)]
            rows = narrowed or rows
        # a write does not act on a row it already acted on (cancel_event on a cancelled one)
        undone = [r for r in rows if not any(_said(v) in self.done_states for v in r.values())]
        rows = undone or rows
        linked = [r for r in rows if self._linked(table, r)]
        pool = linked or rows
        row = pool[self.rng.randrange(len(pool))]
        if table not in self.rows:
            self.rows[table] = row
            self.chosen_at[table] = self.step
            # the alternatives the gold run may try: a few, best first (the pool, then the rest)
            in_pool = {id(r) for r in pool}
            rest = [r for r in rows if id(r) not in in_pool]
            self.pools[table] = [r for r in pool if r is not row][:8] + rest[:8]
        return row

    def alternatives(self, per_step: int = 4) -> dict[int, list[dict[str, JsonValue]]]:
        """Per step, other values for the slots it bound first from a row it chose: the same
        columns of the table's other rows, best first (``PlannedPath.alternatives``)."""
        out: dict[int, list[dict[str, JsonValue]]] = {}
        for step, tables in self.fresh.items():
            options: list[dict[str, JsonValue]] = []
            for table, bound in tables.items():
                for row in self.pools.get(table, []):
                    if len(options) >= per_step * len(tables):
                        break
                    if any(row.get(column) is None for _, column, _ in bound):
                        continue
                    options.append(
                        {name: [row[c]] if array else row[c] for name, c, array in bound}
                    )
            if options:
                out[step] = options[: per_step * len(tables)]
        return out

    def _linked(self, table: str, row: Mapping[str, JsonValue]) -> bool:
        """Whether ``row`` belongs with the rows already chosen (an order of the chosen user;
        an event the chosen user organizes: a key of one row holds a key of the other)."""
        checks = 0
        for other, chosen in self.rows.items():
            if other == table:
                continue
            noun = singular(other.lower())
            keys = {v for c, v in chosen.items() if _is_key_column(c) and isinstance(v, str)}
            for column, value in row.items():
                if value is None:
                    continue
                if column == f"{noun}_id" and "id" in chosen:
                    checks += 1
                    if value != chosen["id"]:
                        return False
                elif column != "id" and column in chosen and _is_key_column(column):
                    checks += 1
                    if value != chosen[column]:
                        return False
                elif _is_key_column(column) and value in keys:
                    checks += 1  # organizer_id of an event = user_id of the chosen user
        return checks > 0


def _member(value: JsonValue, values: set[_Scalar]) -> bool:
    return not isinstance(value, dict | list) and value in values


def _matches(pre: Precondition, row: Mapping[str, JsonValue], value: JsonValue) -> bool:
    """Whether ``row`` of ``pre.table`` has ``value`` in ``pre.column`` and keeps ``where``
    and ``pattern`` (``same`` is the caller's)."""
    if row.get(pre.column) != value:
        return False
    if any(row.get(c) not in allowed for c, allowed in pre.where.items()):
        return False
    return pre.pattern is None or re.search(pre.pattern, str(value)) is not None


def _holds(pre: Precondition, args: Mapping[str, JsonValue], tables: _Tables) -> bool | None:
    """Whether the call's ``args`` keep ``pre`` in the state ``tables`` hold; None when the
    param's value is not known or the state has no such table (nothing to judge by)."""
    value = args.get(pre.param)
    rows = tables.rows.get(pre.table)
    if value is None or rows is None:
        return None
    if pre.absent and any(args.get(q) is None for q in pre.same.values()):
        return None  # "no such row of this user": the user is not known yet
    values = value if isinstance(value, list) else [value]
    for v in values:
        found = any(
            _matches(pre, r, v)
            and all(r.get(c) == args[q] for c, q in pre.same.items() if args.get(q) is not None)
            for r in rows
        )
        if found == pre.absent:
            return False
    return True


def _demands(
    cluster: ToolCluster, tables: _Tables, tools: Iterable[str]
) -> dict[str, set[_Scalar]]:
    """Per parameter name, the values every tool of the path that states a precondition on
    it accepts (``same`` aside); a name whose tools accept no common value is left out."""
    out: dict[str, set[_Scalar]] = {}
    dropped: set[str] = set()
    names = set(tools)
    for pre in cluster.preconditions:
        if pre.tool not in names or pre.table not in tables.rows or pre.absent:
            continue
        accepted = {
            v
            for r in tables.rows[pre.table]
            if isinstance(v := r.get(pre.column), str | int | float) and _matches(pre, r, v)
        }
        both = out[pre.param] & accepted if pre.param in out else accepted
        if both:
            out[pre.param] = both
        else:
            dropped.add(pre.param)
    return {k: v for k, v in out.items() if k not in dropped}


def _list_rows(
    tables: _Tables,
    tool: str,
    name: str,
    args: Mapping[str, JsonValue],
    loose: Iterable[str] = (),
    leaf: str = "",
) -> tuple[list[dict[str, JsonValue]], bool] | None:
    """The rows of the table a tool's output list ``name`` reads (``refunds`` of
    ``get_refunds``, ``items`` of ``view_cart``: ``cart_items``) that belong to the call's
    known inputs, directly (a column of the same name) or through one other table's row
    (a refund's order of the user); all its rows when no input names one; and whether every
    input but the ``loose`` ones was used (else the rows are more than the call lists);
    None when no one table holds the list."""
    noun = singular(name.lower())
    found = [t for t in tables.rows if singular(t.lower()) == noun]  # orders, not order_items
    if not found:
        found = [t for t in tables.rows if noun in {singular(w) for w in name_tokens(t)}]
    if len(found) > 1:
        tool_nouns = {singular(w) for w in name_tokens(tool)}
        found = [t for t in found if tool_nouns & {singular(w) for w in name_tokens(t)}]
    if not found and leaf.endswith("_id"):
        # a list named for what it means (``conflicts``) holds rows of the table its items'
        # id names (``event_id``: events)
        found = [t for t in tables.rows if singular(t.lower()) == leaf[: -len("_id")]]
    if len(found) != 1:
        return None
    table = found[0]
    rows = tables.rows[table]
    columns = tables.columns.get(table, {})
    exact = True
    for param, value in sorted(args.items()):
        if isinstance(value, dict | list):
            exact = exact and param in loose
            continue
        if param in columns:
            rows = [r for r in rows if r.get(param) == value]
            continue
        if not _is_key_column(param):
            exact = exact and param in loose
            continue
        hops = [
            (other, key)
            for other, cols in tables.columns.items()
            if other != table and param in cols
            for key in cols
            if key != param and key in columns and _is_key_column(key)
        ]
        if not hops:
            exact = exact and param in loose
            continue
        keep = []
        for r in rows:
            if any(
                r.get(key) is not None and s.get(key) == r[key] and s.get(param) == value
                for other, key in hops
                for s in tables.rows[other]
            ):
                keep.append(r)
        rows = keep
    return rows, exact


def _said(value: JsonValue) -> str:
    return value.strip().lower() if isinstance(value, str) else ""


def _done_states(tool: str) -> frozenset[str]:
    """What a row reads after the tool's verb acted on it: cancel_event -> cancelled, close_x
    -> closed, archive_x -> archived."""
    words = name_tokens(tool)
    if not words:
        return frozenset()
    verb = words[0].lower()
    stem = verb[:-1] if verb.endswith("e") else verb
    return frozenset({f"{stem}ed", f"{verb}led", f"{verb}d", f"{verb}ed"})


def _is_key_column(column: str) -> bool:
    return _is_id_like(column) or column in ("email", "username", "user", "owner")


def _ref_path(out_field: str) -> str:
    """``flights[].id`` -> ``flights[0].id``: the planned reference takes the first item."""
    return out_field.replace("[]", "[0]").lstrip(".")


# ---------------------------------------------------------------------------------------------
# shapes (§3 steps 1 and 3)


@dataclass
class _Draft:
    tools: list[str]
    links: list[tuple[int, int]]


def _walk(
    graph: nx.DiGraph,
    weight: Callable[[str, str], float],
    start: list[str],
    links: list[tuple[int, int]],
    length: int,
    names: set[str],
    uses: Mapping[str, int],
    rng: random.Random,
) -> _Draft:
    """Extend a path from its last tool by a rarity-weighted walk; no tool repeats."""
    tools = list(start)
    links = list(links)
    while len(tools) < length:
        u = tools[-1]
        options = [v for v in _successors(graph, u, names) if v not in tools]
        if not options:
            break
        weights = [weight(u, v) * _rarity(uses, v) for v in options]
        v = weighted_draw(rng, options, weights)
        links.append((len(tools) - 1, len(tools)))
        tools.append(v)
    return _Draft(tools, links)


def _pick_entry(entries: list[str], uses: Mapping[str, int], rng: random.Random) -> str:
    return weighted_draw(rng, entries, [_rarity(uses, t) for t in entries])


def _draft_shape(
    shape: PathShape,
    length: int,
    graph: nx.DiGraph,
    weight: Callable[[str, str], float],
    entries: list[str],
    names: set[str],
    uses: Mapping[str, int],
    rng: random.Random,
) -> _Draft | str:
    """One draft of ``shape`` with about ``length`` calls, or the reason none exists."""
    if shape is PathShape.SINGLE:
        return _Draft([_pick_entry(entries, uses, rng)], [])
    if shape is PathShape.CHAIN:
        return _walk(graph, weight, [_pick_entry(entries, uses, rng)], [], length, names, uses, rng)
    if shape is PathShape.FAN_OUT:
        producers = [t for t in entries if len(_successors(graph, t, names)) >= 2]
        if not producers:
            return "no tool with two successors"
        root = _pick_entry(producers, uses, rng)
        options = _successors(graph, root, names)
        k = max(2, min(3, length - 1, len(options)))
        chosen: list[str] = []
        while len(chosen) < k:
            rest = [v for v in options if v not in chosen]
            weights = [weight(root, v) * _rarity(uses, v) for v in rest]
            chosen.append(weighted_draw(rng, rest, weights))
        tools = [root, *chosen]
        links = [(0, i) for i in range(1, len(tools))]
        return _walk(graph, weight, tools, links, length, names, uses, rng)
    if shape is PathShape.FAN_IN:
        consumers = []
        for c in sorted(names):
            preds = [u for u in _predecessors(graph, c, names) if u in entries]
            if len(preds) >= 2:
                consumers.append(c)
        if not consumers:
            return "no tool with two entry predecessors"
        c = _pick_entry(consumers, uses, rng)
        preds = [u for u in _predecessors(graph, c, names) if u in entries]
        k = max(2, min(3, length - 1, len(preds)))
        chosen = []
        while len(chosen) < k:
            rest = [u for u in preds if u not in chosen]
            weights = [weight(u, c) * _rarity(uses, u) for u in rest]
            chosen.append(weighted_draw(rng, rest, weights))
        tools = [*sorted(chosen), c]
        links = [(i, len(chosen)) for i in range(len(chosen))]
        return _walk(graph, weight, tools, links, length, names, uses, rng)
    # diamond: a -> {b, c} -> d
    diamonds: list[tuple[str, str, str, str]] = []
    for a in entries:
        succ = _successors(graph, a, names)
        for i, b in enumerate(succ):
            for c in succ[i + 1 :]:
                joins = set(_successors(graph, b, names)) & set(_successors(graph, c, names))
                diamonds += [(a, b, c, d) for d in sorted(joins - {a, b, c})]
    if not diamonds:
        return "no diamond in the graph"
    weights = [sum(_rarity(uses, t) for t in dia) for dia in diamonds]
    index = weighted_draw(rng, [str(i) for i in range(len(diamonds))], weights)
    a, b, c, d = diamonds[int(index)]
    return _walk(
        graph, weight, [a, b, c, d], [(0, 1), (0, 2), (1, 3), (2, 3)], length, names, uses, rng
    )


def _fan_in_joined(steps: list[PlannedCall]) -> bool:
    """Whether some call takes bound values from two different earlier calls (a real join)."""
    for step in steps:
        producers = {a.step for a in step.args.values() if isinstance(a, RefArg)}
        if len(producers) >= 2:
            return True
    return False


def _writes(cluster: ToolCluster, tools: Iterable[str]) -> list[bool]:
    return [cluster.tool(t).access is ToolAccess.WRITE for t in tools]


def _reads_before_writes(flags: list[bool]) -> list[int]:
    out, reads = [], 0
    for is_write in flags:
        if is_write:
            out.append(reads)
        else:
            reads += 1
    return out


def sample_path(
    cluster: ToolCluster,
    graph: nx.DiGraph,
    cell: Cell,
    state: EnvState,
    rng: random.Random,
    uses: Mapping[str, int] | None = None,
    *,
    tries: int = 8,
    one_read: bool = False,
) -> PlannedPath | Rejection:
    """Draw and bind one tool path for ``cell`` (docs/methods.md §3, path sampling steps 1-6).

    Shape from the cell; length L drawn from the difficulty bin (easy 1-2, medium 3-4, hard 5-7
    calls), capped by what the graph supports. The walk starts at an entry tool and picks the
    successor v of u with probability ∝ score(u,v)·(uses(v)+1)^-1. Every required parameter is
    bound (ref, then slot from ``state``, then literal); medium and hard need >= 1 write.
    Up to ``tries`` drafts are drawn from ``rng``; the best valid one wins (closest to L, with
    the target mode realised where the path decides it). Pure: same inputs, same result.
    ``one_read``: a single cell of an outside server is one read, as on a read-only server
    (the planner asks for it once the unit's two-call paths were refused).

    >>> from trajsynth.schemas import ServerSpec, ServerKind, ToolSpec, Domain
    >>> spec = ToolSpec(name="find_user", access="read", input_schema={"type": "object",
    ...     "properties": {"email": {"type": "string"}}, "required": ["email"]})
    >>> c = ToolCluster(cluster_id="c", domain=Domain.OTHER, tools=[spec],
    ...     server=ServerSpec(kind=ServerKind.BUNDLED))
    >>> g = nx.DiGraph(); g.add_node("find_user")
    >>> s = EnvState(state_hash="h", tables={"users": [{"email": "a@x.io"}]})
    >>> cell = Cell(cluster_id="c", path_shape="single", target_mode="direct_execute",
    ...     difficulty="easy")
    >>> p = sample_path(c, g, cell, s, random.Random(0))
    >>> p.tools, p.slots
    (['find_user'], {'email': 'a@x.io'})
    """
    uses = _unseen_writes_counted(cluster, uses or {})
    names = {t for t in cluster.tool_names if t in graph} or set(cluster.tool_names)
    entries = entry_tools(cluster, graph, state)
    if not entries:
        return Rejection(reason="no_entry_tool", detail="no tool's required params are providable")
    low, high = LENGTHS[cell.difficulty]
    shape = cell.path_shape
    if shape is PathShape.SINGLE:
        low = high = 1
    elif shape in (PathShape.FAN_OUT, PathShape.FAN_IN):
        low, high = max(low, 3), max(high, 3)
    elif shape is PathShape.DIAMOND:
        low, high = max(low, 4), max(high, 4)
    elif shape is PathShape.CHAIN:
        low = max(low, 2)
        high = max(high, 2)
    writable = sorted(t for t in names if cluster.tool(t).access is ToolAccess.WRITE)
    # §3: medium and hard need a write; a cluster with none (a read-only server: a clock, a
    # search API) could never plan them, so its medium and hard tasks are longer read paths
    need_write = cell.difficulty in (Difficulty.MEDIUM, Difficulty.HARD) and bool(writable)
    outside = cluster.source == "outside" and len(names) > 1
    one_read = one_read and shape is PathShape.SINGLE
    if one_read:
        entries = [t for t in entries if cluster.tool(t).access is ToolAccess.READ] or entries
    two_calls = outside and bool(writable) and not one_read
    if two_calls:
        # a blueprint over a multi-tool outside cluster has >= 2 calls, since one call of a
        # server exercises none of its dependencies; a "single" cell becomes a two-call chain
        # (the second call unlinked when the graph has no edge). Not on a read-only server:
        # there a second, unlinked read asks a second question (planning.admission's
        # unrelated_reads), and one read answers one
        low, high = max(low, 2), max(high, 2)
        shape = PathShape.CHAIN if shape is PathShape.SINGLE else shape
    tables = _Tables.of(state)

    @functools.cache
    def weight(u: str, v: str) -> float:
        # an edge that feeds a required parameter carries the data the call needs; one that
        # only feeds an optional filter is a weaker reason to call v next
        required = set(cluster.tool(v).required_parameters())
        feeds = any(p in required for p, _, _ in _edge_bindings(cluster, graph, u, v))
        return _edge_score(graph, u, v) * (1.0 if feeds else 0.25)

    best: tuple[tuple[int, ...], PlannedPath] | None = None
    reasons: list[Rejection] = []
    for n in range(max(1, tries) * INVALID_TRIES):
        if n >= max(1, tries) and (best is None or best[0][0]):
            break  # more drafts only while every draft so far fails the binder's check
        length = rng.randint(low, high)
        drawn = shape
        draft = _draft_shape(shape, length, graph, weight, entries, names, uses, rng)
        if isinstance(draft, str) and outside:
            drawn = PathShape.CHAIN
            # an outside server's graph is what probing found: a shape it lacks becomes a
            # chain rather than no task
            draft = _draft_shape(PathShape.CHAIN, length, graph, weight, entries, names, uses, rng)
        if isinstance(draft, str):
            return Rejection(reason="shape_unsupported", detail=f"{shape}: {draft}")
        if outside and len(draft.tools) < 2 <= low:
            draft = _second_call(cluster, draft, entries, names, uses, rng)
        if outside and need_write and not any(_writes(cluster, draft.tools)):
            # probing links few of an outside server's tools, so a walk rarely reaches a
            # write: one is called last, unlinked (as for a lone first call)
            pool = [t for t in writable if t in entries] or writable
            draft = _Draft([*draft.tools, _pick_entry(pool, uses, rng)], list(draft.links))
        flags = _writes(cluster, draft.tools)
        if len(draft.tools) < 2 <= low:
            reasons.append(Rejection(reason="path_too_short", detail="->".join(draft.tools)))
            continue
        if need_write and not any(flags):
            reasons.append(Rejection(reason="no_write", detail="->".join(draft.tools)))
            continue
        try:
            binder, steps, valid = _bind_checked(cluster, graph, tables, rng, draft)
        except _Unbindable as exc:
            reasons.append(Rejection(reason="unbindable_param", detail=exc.detail))
            continue
        if outside and not any(step.args for step in steps) and _any_params(cluster, names):
            reasons.append(Rejection(reason="no_arguments", detail="->".join(draft.tools)))
            continue
        if drawn is PathShape.FAN_IN and not _fan_in_joined(steps):
            if not outside:
                reasons.append(Rejection(reason="shape_unsupported", detail="fan_in without join"))
                continue
            drawn = PathShape.CHAIN  # a shape the probed graph lacks becomes a chain, not no task
        path = PlannedPath(
            cluster_id=cluster.cluster_id,
            shape=drawn,
            difficulty=cell.difficulty,
            steps=steps,
            links=draft.links,
            slots=binder.slots,
            slot_sources=binder.sources,
            alternatives=binder.alternatives(),
            n_writes=sum(flags),
            reads_before_write=_reads_before_writes(flags),
        )
        rank = (int(valid), _mode_realised(cell, path), -abs(len(steps) - length))
        if best is None or rank > best[0]:
            best = (rank, path)
        if rank == (1, 1, 0):
            break
    if best is not None:
        if len(best[1].steps) < low:
            log.debug("cell %s capped at %d calls by the graph", cell, len(best[1].steps))
        return best[1]
    top = Counter(r.reason for r in reasons).most_common(1)[0][0]  # ties: the first seen
    return next(r for r in reasons if r.reason == top)


# uses counted for an outside write no probed read was seen to change (server-sqlite's
# append_insight writes a memo no tool reads): drawn a quarter as often as a write a read sees
# (create_table, whose table list_tables shows), since only the latter's end state can be
# checked
UNSEEN_WRITE_USES = 3


def _unseen_writes_counted(cluster: ToolCluster, uses: Mapping[str, int]) -> dict[str, int]:
    """``uses`` with each outside write tagged by its name or by default (its probe changed
    nothing a read or the work dir showed, or failed) counted ``UNSEEN_WRITE_USES`` more."""
    out = dict(uses)
    if cluster.source != "outside":
        return out
    for spec in cluster.tools:
        if spec.access is ToolAccess.WRITE and spec.access_source in ("name", "default"):
            out[spec.name] = out.get(spec.name, 0) + UNSEEN_WRITE_USES
    return out


# drafts per sampling, in multiples of ``tries``, while every draft fails the binder's check
# (a thin graph: the code cluster's hard chains mostly run into run_tests)
INVALID_TRIES = 4

# items of a list a reference may point at, the state's order taken as the tool's
LIST_ITEMS = 8

# bindings of one draft after the first, each leaving out the rows the last one's check blamed
REBINDS = 4


def _bind_checked(
    cluster: ToolCluster, graph: nx.DiGraph, tables: _Tables, rng: random.Random, draft: _Draft
) -> tuple[_Binder, list[PlannedCall], bool]:
    """Bind ``draft``, and bind it again without the rows that gave a value its tool would
    refuse in this state (``_Binder.violations``), up to ``REBINDS`` times: the binder,
    the steps, and whether every check passed (a path that fails one is still returned, for
    the gold run to decide, but ranks below one that passes)."""
    banned: set[int] = set()
    best: tuple[_Binder, list[PlannedCall]] | None = None
    for _ in range(REBINDS + 1):
        binder = _Binder(cluster, graph, tables, rng, banned=frozenset(banned))
        try:
            steps = binder.bind(draft.tools, draft.links)
        except _Unbindable:
            if best is None:
                raise
            break
        blamed = binder.violations(steps)
        if blamed is None:
            return binder, steps, True
        best = best or (binder, steps)
        if not blamed - banned:
            break
        banned |= blamed
    assert best is not None
    return best[0], best[1], False


def _any_params(cluster: ToolCluster, names: set[str]) -> bool:
    return any(_properties(cluster.tool(t)) for t in names)


def _second_call(
    cluster: ToolCluster,
    draft: _Draft,
    entries: list[str],
    names: set[str],
    uses: Mapping[str, int],
    rng: random.Random,
) -> _Draft:
    """Another callable tool after a lone first call: after a write a read that shows its
    effect, else a tool with parameters, rarest first (so a blueprint has >= 2 calls)."""
    first = draft.tools[0]
    others = [t for t in entries if t != first] or [t for t in sorted(names) if t != first]
    if not others:
        return draft
    wrote = cluster.tool(first).access is ToolAccess.WRITE
    preferred = [
        t
        for t in others
        if (cluster.tool(t).access is ToolAccess.READ) == wrote and _properties(cluster.tool(t))
    ]
    pool = preferred or others
    return _Draft([first, _pick_entry(pool, uses, rng)], list(draft.links))


def _mode_realised(cell: Cell, path: PlannedPath) -> int:
    """1 when the path already has what the target mode needs from it (§3, target modes)."""
    mode = cell.target_mode.value
    if mode == "explore_then_commit":
        return int(bool(path.reads_before_write) and path.reads_before_write[0] >= 3)
    if mode == "verify_after_write":
        return int(path.n_writes >= 1)
    return 1
