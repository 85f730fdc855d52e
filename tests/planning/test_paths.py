"""Path sampling on a hand-built cluster (docs/methods.md §3 steps 1-6)."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import pytest

from trajsynth.mcp_servers.graph import dependency_graph
from trajsynth.planning.cells import sample_cells, supported_shapes
from trajsynth.planning.paths import PlannedPath, Rejection, entry_tools, sample_path
from trajsynth.schemas import (
    Cell,
    Difficulty,
    Domain,
    EnvState,
    LiteralArg,
    PathShape,
    ReasoningMode,
    RefArg,
    ServerKind,
    ServerSpec,
    SlotArg,
    ToolAccess,
    ToolCluster,
    ToolEdge,
    ToolSpec,
)


def _tool(
    name: str,
    params: dict[str, dict[str, Any]],
    *,
    required: list[str] | None = None,
    write: bool = False,
) -> ToolSpec:
    return ToolSpec(
        name=name,
        description=f"{name.replace('_', ' ')}.",
        input_schema={
            "type": "object",
            "properties": params,
            "required": list(params) if required is None else required,
        },
        access=ToolAccess.WRITE if write else ToolAccess.READ,
    )


def _edge(u: str, v: str, out: str, param: str, score: float = 1.0) -> ToolEdge:
    return ToolEdge(source=u, target=v, out_field=out, in_param=param, score=score)


S = {"type": "string"}
TOOLS = [
    _tool("find_user", {"email": S}),
    _tool("list_orders", {"user_id": S}),
    _tool("get_profile", {"user_id": S}),
    _tool("get_order", {"order_id": S}),
    _tool(
        "cancel_order",
        {"order_id": S, "reason": {"type": "string", "enum": ["mistake", "too slow"]}},
        write=True,
    ),
    _tool(
        "add_note",
        {"order_id": S, "user_id": S, "pinned": {"type": "boolean", "default": False}},
        required=["order_id", "user_id"],
        write=True,
    ),
]
EDGES = [
    _edge("find_user", "list_orders", "user_id", "user_id"),
    _edge("find_user", "get_profile", "user_id", "user_id"),
    _edge("list_orders", "get_order", "orders[].order_id", "order_id"),
    _edge("get_order", "cancel_order", "order_id", "order_id"),
    _edge("list_orders", "add_note", "orders[].order_id", "order_id"),
    _edge("get_profile", "add_note", "user_id", "user_id"),
]
STATE = EnvState(
    state_hash="s0",
    tables={
        "users": [
            {"user_id": "u1", "email": "ann@example.com", "name": "Ann"},
            {"user_id": "u2", "email": "bob@example.com", "name": "Bob"},
            {"user_id": "u3", "email": "cy@example.com", "name": "Cy"},
        ],
        "orders": [
            {"order_id": "#A1", "user_id": "u1", "total": 10.0},
            {"order_id": "#B1", "user_id": "u2", "total": 20.0},
            {"order_id": "#B2", "user_id": "u2", "total": 25.0},
            {"order_id": "#C1", "user_id": "u3", "total": 30.0},
        ],
    },
)


def _cluster(tools: list[ToolSpec] = TOOLS, edges: list[ToolEdge] = EDGES) -> ToolCluster:
    return ToolCluster(
        cluster_id="toy",
        domain=Domain.RETAIL,
        server=ServerSpec(kind=ServerKind.BUNDLED, module="toy"),
        tools=tools,
        edges=edges,
    )


def _cell(shape: str, difficulty: str, mode: str = "direct_execute") -> Cell:
    return Cell(
        cluster_id="toy",
        path_shape=PathShape(shape),
        target_mode=ReasoningMode(mode),
        difficulty=Difficulty(difficulty),
    )


def _sample(cell: Cell, seed: int, cluster: ToolCluster | None = None, **kw: Any) -> Any:
    c = cluster or _cluster()
    return sample_path(c, dependency_graph(c), cell, STATE, random.Random(seed), **kw)


def test_same_seed_same_path_and_seeds_vary() -> None:
    cell = _cell("chain", "medium")
    assert _sample(cell, 7) == _sample(cell, 7)
    paths = {tuple(_sample(cell, s).tools) for s in range(20)}
    assert len(paths) >= 2


def test_entry_tools_exclude_ids_another_tool_produces() -> None:
    c = _cluster()
    # list_orders.user_id is produced by find_user: a user does not state it
    assert entry_tools(c, dependency_graph(c), STATE) == ["find_user"]


def test_single_easy_binds_a_real_email_from_state() -> None:
    path = _sample(_cell("single", "easy"), 3)
    assert isinstance(path, PlannedPath)
    assert path.tools == ["find_user"]
    assert path.steps[0].args == {"email": SlotArg(name="email")}
    assert path.slots["email"] in {u["email"] for u in STATE.tables["users"]}
    assert path.slot_sources == {"email": "users.email"}
    assert path.n_writes == 0


def test_chain_binds_each_step_from_the_previous_output() -> None:
    for seed in range(10):
        path = _sample(_cell("chain", "medium"), seed)
        assert isinstance(path, PlannedPath), path
        assert 3 <= len(path.steps) <= 4
        assert path.links == [(i, i + 1) for i in range(len(path.steps) - 1)]
        for i, step in enumerate(path.steps[1:], start=1):
            refs = [a for a in step.args.values() if isinstance(a, RefArg)]
            assert any(r.step == i - 1 for r in refs), (path.tools, step)
        assert path.n_writes >= 1  # medium needs a write
        assert len(path.reads_before_write) == path.n_writes


def test_enum_choice_is_a_slot_and_default_is_left_out() -> None:
    seen = []
    for seed in range(30):
        path = _sample(_cell("chain", "medium"), seed)
        if isinstance(path, PlannedPath) and "cancel_order" in path.tools:
            step = path.steps[path.tools.index("cancel_order")]
            assert step.args["reason"] == SlotArg(name="reason")
            assert path.slots["reason"] in ("mistake", "too slow")
            assert path.slot_sources["reason"] == "enum"
            seen.append(path)
        if isinstance(path, PlannedPath) and "add_note" in path.tools:
            assert "pinned" not in path.steps[path.tools.index("add_note")].args
    assert seen


def test_medium_needs_a_write() -> None:
    """The cluster has a write, but no walk reaches it (no edge in, no providable params)."""
    reads = [t for t in TOOLS if t.access is ToolAccess.READ]
    edges = [e for e in EDGES if e.source in {t.name for t in reads}]
    edges = [e for e in edges if e.target in {t.name for t in reads}]
    unreachable = _tool("frobnicate", {"secret": S}, write=True)
    rejection = _sample(_cell("chain", "medium"), 1, _cluster([*reads, unreachable], edges))
    assert rejection == Rejection(reason="no_write", detail=rejection.detail)
    assert "find_user" in rejection.detail


def test_unbindable_param_rejects_with_the_param_named() -> None:
    tools = [_tool("find_user", {"email": S}), _tool("frobnicate", {"user_id": S, "secret": S})]
    cluster = _cluster(tools, [_edge("find_user", "frobnicate", "user_id", "user_id")])
    rejection = _sample(_cell("chain", "easy"), 0, cluster)
    assert isinstance(rejection, Rejection)
    assert rejection.reason == "unbindable_param"
    assert rejection.detail == "frobnicate.secret"


def test_slots_of_one_path_belong_together() -> None:
    """An order slot is an order of the user whose email is the other slot (CoVe sampling)."""
    tools = [_tool("find_user", {"email": S}), _tool("refund", {"order_id": S}, write=True)]
    cluster = _cluster(tools, [_edge("find_user", "refund", "name", "note", 0.9)])
    owners = {o["order_id"]: o["user_id"] for o in STATE.tables["orders"]}
    emails = {u["email"]: u["user_id"] for u in STATE.tables["users"]}
    for seed in range(15):
        path = _sample(_cell("chain", "easy"), seed, cluster)
        assert isinstance(path, PlannedPath)
        assert path.tools == ["find_user", "refund"]
        assert owners[path.slots["order_id"]] == emails[path.slots["email"]]


def test_fan_out_fan_in_and_diamond_shapes() -> None:
    fan_outs = [_sample(_cell("fan_out", "medium"), s) for s in range(6)]
    assert all(isinstance(p, PlannedPath) for p in fan_outs)
    for fan_out in fan_outs:
        assert fan_out.tools[0] == "find_user"
        assert set(fan_out.tools[1:3]) == {"list_orders", "get_profile"}
        assert (0, 1) in fan_out.links and (0, 2) in fan_out.links
        assert fan_out.n_writes >= 1  # the walk went on from a successor to a write

    tools = [
        _tool("find_user", {"email": S}),
        _tool("find_order", {"total": {"type": "number"}}),
        _tool("merge", {"user_id": S, "order_id": S}, write=True),
    ]
    edges = [
        _edge("find_user", "merge", "user_id", "user_id"),
        _edge("find_order", "merge", "order_id", "order_id"),
    ]
    fan_in = _sample(_cell("fan_in", "medium"), 0, _cluster(tools, edges))
    assert isinstance(fan_in, PlannedPath)
    assert fan_in.tools[-1] == "merge"
    assert {a.step for a in fan_in.steps[-1].args.values() if isinstance(a, RefArg)} == {0, 1}

    diamond = _sample(_cell("diamond", "medium"), 0)
    assert isinstance(diamond, PlannedPath)
    assert diamond.tools == ["find_user", "get_profile", "list_orders", "add_note"]
    assert diamond.links == [(0, 1), (0, 2), (1, 3), (2, 3)]
    note = diamond.steps[3].args
    assert note["user_id"] == RefArg(step=1, field="user_id")
    assert note["order_id"] == RefArg(step=2, field="orders[0].order_id")


def test_rare_successors_are_preferred() -> None:
    cell = _cell("chain", "easy")
    counts = Counter(tuple(_sample(cell, s, uses={"list_orders": 99}).tools) for s in range(60))
    assert counts[("find_user", "get_profile")] > 3 * counts[("find_user", "list_orders")]


def test_unsupported_shape_is_a_rejection() -> None:
    tools = [_tool("find_user", {"email": S})]
    rejection = _sample(_cell("diamond", "medium"), 0, _cluster(tools, []))
    assert isinstance(rejection, Rejection)
    assert rejection.reason == "shape_unsupported"


def test_literal_from_schema_const() -> None:
    tools = [_tool("find_user", {"email": S, "version": {"type": "integer", "const": 2}})]
    path = _sample(_cell("single", "easy"), 0, _cluster(tools, []))
    assert isinstance(path, PlannedPath)
    assert path.steps[0].args["version"] == LiteralArg(value=2)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_cells_are_feasible_and_lean_easy(seed: int) -> None:
    cluster = _cluster()
    shapes = supported_shapes(cluster)
    assert shapes == [PathShape.SINGLE, PathShape.CHAIN, PathShape.FAN_OUT, PathShape.FAN_IN,
                      PathShape.DIAMOND]  # fmt: skip
    cells = sample_cells([cluster], 300, random.Random(seed))
    assert cells == sample_cells([cluster], 300, random.Random(seed))
    for cell in cells:
        if cell.path_shape is PathShape.SINGLE:
            assert cell.difficulty is Difficulty.EASY
        if cell.target_mode is ReasoningMode.PARALLEL_FANOUT:
            assert cell.path_shape is PathShape.FAN_OUT
        assert cell.target_mode is not ReasoningMode.CODE_COMPUTE  # no code tool here
    by_difficulty = Counter(c.difficulty for c in cells)
    assert by_difficulty[Difficulty.EASY] > by_difficulty[Difficulty.HARD]
    assert len({c.path_shape for c in cells}) == 5


def test_cells_follow_given_weights() -> None:
    cells = sample_cells(
        [_cluster()],
        50,
        random.Random(0),
        weights={"path_shape": {"chain": 1.0}, "difficulty": {"hard": 1.0}},
    )
    assert {(c.path_shape, c.difficulty) for c in cells} == {(PathShape.CHAIN, Difficulty.HARD)}


def _outside_cluster(**server: Any) -> ToolCluster:
    def spec(name: str, access: ToolAccess, required: list[str]) -> ToolSpec:
        props = {p: {"type": "string"} for p in required}
        schema = {"type": "object", "properties": props, "required": required}
        return ToolSpec(name=name, access=access, input_schema=schema)

    return ToolCluster(
        cluster_id="files",
        domain=Domain.FILESYSTEM,
        server=ServerSpec(kind=ServerKind.STDIO, command=["srv"], **server),
        tools=[
            spec("cat", ToolAccess.READ, ["path"]),
            spec("ls", ToolAccess.READ, []),
            spec("echo", ToolAccess.WRITE, ["path", "text"]),
        ],
        source="outside",
        state_readable=True,
        arg_values={"cat": {"path": ["docs/a.txt", "docs/b.txt"]}},
    )


@pytest.mark.parametrize("seed", range(6))
def test_outside_blueprints_have_two_calls_with_arguments(seed: int) -> None:
    """A single-call cell on a multi-tool outside cluster with a write (no edges at all)
    still plans >= 2 calls, at least one with arguments, bound from probe-accepted values."""
    c = _outside_cluster(args={"text": "remember the milk"})
    g = dependency_graph(c)
    cell = Cell(
        cluster_id="files", path_shape="single", target_mode="direct_execute", difficulty="easy"
    )
    path = sample_path(c, g, cell, EnvState(state_hash="h"), random.Random(seed))
    assert isinstance(path, PlannedPath), path
    assert len(path.steps) >= 2
    assert any(step.args for step in path.steps)
    for name, value in path.slots.items():
        source = path.slot_sources[name]
        if name.startswith("path") and source == "probe":
            assert value in ("docs/a.txt", "docs/b.txt")
        if name == "text":
            assert (value, source) == ("remember the milk", "spec")  # --arg wins


@pytest.mark.parametrize("seed", range(6))
def test_a_read_only_outside_server_s_single_cell_is_one_read(seed: int) -> None:
    """On a server without writes (a clock) a second, unlinked read would ask a second
    question that the planner refuses (``unrelated_reads``): a single cell stays one call."""
    c = _outside_cluster()
    c = c.model_copy(update={"tools": [t for t in c.tools if t.access is ToolAccess.READ]})
    cell = Cell(cluster_id="files", path_shape="single", target_mode="direct_execute",
                difficulty="easy")  # fmt: skip
    path = sample_path(c, dependency_graph(c), cell, EnvState(state_hash="h"), random.Random(seed))
    assert isinstance(path, PlannedPath), path
    assert len(path.steps) == 1 and path.n_writes == 0


@pytest.mark.parametrize("seed", range(6))
def test_an_outside_medium_task_calls_a_write_the_graph_does_not_reach(seed: int) -> None:
    """Probing found no edge into the write: a medium cell's walk over the reads still gets
    the write it needs (§3), called last and unlinked, instead of no task (``no_write``)."""
    c = _outside_cluster(args={"text": "remember the milk"})
    cell = Cell(cluster_id="files", path_shape="chain", target_mode="direct_execute",
                difficulty="medium")  # fmt: skip
    path = sample_path(c, dependency_graph(c), cell, EnvState(state_hash="h"), random.Random(seed))
    assert isinstance(path, PlannedPath), path
    assert path.n_writes >= 1 and "echo" in [step.tool for step in path.steps]


@pytest.mark.parametrize("difficulty", ["medium", "hard"])
def test_a_read_only_server_plans_medium_and_hard_tasks_as_longer_reads(difficulty: str) -> None:
    """A server with no write tool (a clock, a search API) could never meet §3's write for
    medium and hard cells; it gets longer read paths instead of a ``no_write`` rejection."""
    c = _outside_cluster()
    c = c.model_copy(update={"tools": [t for t in c.tools if t.access is ToolAccess.READ]})
    cell = Cell(cluster_id="files", path_shape="chain", target_mode="direct_execute",
                difficulty=difficulty)  # fmt: skip
    path = sample_path(c, dependency_graph(c), cell, EnvState(state_hash="h"), random.Random(0))
    assert isinstance(path, PlannedPath), path
    assert path.n_writes == 0 and len(path.steps) >= 2


def test_a_count_is_drawn_from_the_schema_bounds_and_a_list_item_from_its_any_of() -> None:
    """A number with ``minimum`` is a count from ``minimum`` to two more, capped at
    ``maximum`` (a float bound rounds down; 0 reads as 1); an array's item schema is read
    through ``anyOf`` (how pydantic writes ``list[X] | None``)."""
    import networkx as nx

    from trajsynth.planning.paths import _Binder, _items_schema, _Tables

    cluster = ToolCluster(
        cluster_id="rooms",
        domain=Domain.TRAVEL,
        server=ServerSpec(kind=ServerKind.STDIO, command=["rooms-server"]),
        tools=[_tool("book_room", {"nights": {"type": "integer", "minimum": 2}})],
    )

    def drawn(schema: dict[str, Any], seed: int) -> Any:
        binder = _Binder(cluster, nx.DiGraph(), _Tables(rows={}), random.Random(seed))
        arg = binder._slot_or_literal("book_room", "nights", schema)
        assert isinstance(arg, SlotArg) and binder.sources[arg.name] == "range"
        return binder.slots[arg.name]

    assert {drawn({"type": "integer", "minimum": 2}, s) for s in range(40)} == {2, 3, 4}
    capped = {"type": "integer", "minimum": 2, "maximum": 3}
    assert {drawn(capped, s) for s in range(40)} == {2, 3}
    assert {drawn({"type": "number", "minimum": 2, "maximum": 2.5}, s) for s in range(5)} == {2}
    assert {drawn({"type": "integer", "minimum": 0}, s) for s in range(40)} == {1, 2, 3}
    nullable = {"anyOf": [{"type": "null"}, {"type": "array", "items": {"type": "string"}}]}
    assert _items_schema(nullable) == {"type": "string"}
    assert _items_schema({"type": "array"}) == {}
