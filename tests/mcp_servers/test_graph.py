"""Dependency-graph inference (docs/methods.md §2): worked example, name-only scoring, splitting."""

from __future__ import annotations

import doctest
import math

import networkx as nx
import numpy as np
import pytest

from trajsynth.mcp_servers import graph
from trajsynth.mcp_servers.graph import (
    communities,
    dependency_graph,
    draw_graph,
    entry_tools,
    infer_edges,
    input_params,
    name_sim,
    output_fields,
    singular,
    split_cluster,
)
from trajsynth.schemas import (
    Domain,
    EdgeOrigin,
    InputError,
    ServerKind,
    ServerSpec,
    ToolAccess,
    ToolCluster,
    ToolEdge,
    ToolSpec,
)

FLIGHT_DESC = "Identifier of a flight found by the search"
PARAM_DESC = "The flight to read fare rules for"


def _obj(props: dict, required: list[str] | None = None) -> dict:
    return {"type": "object", "properties": props, "required": required or []}


SEARCH_FLIGHTS = ToolSpec(
    name="search_flights",
    description="Search flights between two airports",
    input_schema=_obj(
        {"origin": {"type": "string"}, "destination": {"type": "string"}},
        ["origin", "destination"],
    ),
    output_schema=_obj(
        {
            "flights": {
                "type": "array",
                "items": _obj(
                    {
                        "id": {"type": "string", "description": FLIGHT_DESC},
                        "price": {"type": "number"},
                    }
                ),
            }
        }
    ),
)
GET_FARE_RULES = ToolSpec(
    name="get_fare_rules",
    description="Fare rules of one flight",
    input_schema=_obj({"flight_id": {"type": "string", "description": PARAM_DESC}}, ["flight_id"]),
    output_schema=_obj({"refundable": {"type": "boolean"}}),
)


def fixed_cosine_embedder(cosine: float):
    """Embeds FLIGHT_DESC and PARAM_DESC at exactly ``cosine``; any other text orthogonally."""

    def embed(texts: list[str]) -> np.ndarray:
        rows = []
        for i, text in enumerate(texts):
            if text == FLIGHT_DESC:
                rows.append([1.0, 0.0] + [0.0] * len(texts))
            elif text == PARAM_DESC:
                rows.append([cosine, math.sqrt(1 - cosine**2)] + [0.0] * len(texts))
            else:
                row = [0.0, 0.0] + [0.0] * len(texts)
                row[2 + i] = 1.0
                rows.append(row)
        return np.array(rows)

    return embed


def test_worked_example_scores_0_848_with_desc_sim_0_62() -> None:
    edges = infer_edges([SEARCH_FLIGHTS, GET_FARE_RULES], embed=fixed_cosine_embedder(0.62))
    assert len(edges) == 1
    edge = edges[0]
    assert (edge.source, edge.target) == ("search_flights", "get_fare_rules")
    assert edge.out_field == "flights[].id"
    assert edge.in_param == "flight_id"
    assert edge.score == pytest.approx(0.6 * 1.0 + 0.4 * 0.62, abs=1e-4)
    assert edge.score == pytest.approx(0.848, abs=1e-4)
    assert edge.origin == EdgeOrigin.INFERRED


def test_low_description_similarity_drops_the_edge() -> None:
    # 0.6 * 1.0 + 0.4 * 0.3 = 0.72 < 0.75
    assert infer_edges([SEARCH_FLIGHTS, GET_FARE_RULES], embed=fixed_cosine_embedder(0.3)) == []


def test_name_only_scoring_without_embeddings() -> None:
    edges = infer_edges([SEARCH_FLIGHTS, GET_FARE_RULES], embed=None)
    assert [(e.source, e.target, e.out_field, e.in_param, e.score) for e in edges] == [
        ("search_flights", "get_fare_rules", "flights[].id", "flight_id", 1.0)
    ]


def test_token_jaccard_below_threshold_gives_no_edge() -> None:
    # flight_id vs return_flight_id: Jaccard {flight,id} / {return,flight,id} = 2/3 < 0.75
    target = ToolSpec(
        name="change_return",
        input_schema=_obj({"return_flight_id": {"type": "string"}}, ["return_flight_id"]),
    )
    assert name_sim("flight_id", "return_flight_id") == pytest.approx(2 / 3)
    assert infer_edges([SEARCH_FLIGHTS, target]) == []


def test_type_mismatch_blocks_an_exact_name_match() -> None:
    target = ToolSpec(
        name="get_fare_rules",
        input_schema=_obj({"flight_id": {"type": "integer"}}, ["flight_id"]),
    )
    assert infer_edges([SEARCH_FLIGHTS, target]) == []


def test_array_of_t_feeds_t_and_integer_feeds_number() -> None:
    lister = ToolSpec(
        name="list_rooms",
        output_schema=_obj({"room_numbers": {"type": "array", "items": {"type": "integer"}}}),
    )
    booker = ToolSpec(
        name="book_room",
        input_schema=_obj({"room_number": {"type": "number"}}, ["room_number"]),
    )
    [edge] = infer_edges([lister, booker])
    assert (edge.out_field, edge.in_param, edge.score) == ("room_numbers[]", "room_number", 1.0)


def test_output_fields_follow_refs_and_name_ids_in_generic_containers() -> None:
    # The shape MCPServer gives a function returning list[Flight]: {"result": [...]} with $defs.
    schema = {
        "type": "object",
        "properties": {"result": {"type": "array", "items": {"$ref": "#/$defs/Flight"}}},
        "required": ["result"],
        "$defs": {
            "Flight": {
                "type": "object",
                "properties": {
                    "id": {"type": "string"},
                    "carrier": {"anyOf": [{"type": "string"}, {"type": "null"}]},
                },
            }
        },
    }
    fields = {f.path: f for f in output_fields("search_flights", schema)}
    assert fields["result[].id"].name == "flight_id"
    assert fields["result[].id"].many is True
    assert fields["result[].carrier"].json_type == "string"
    top = output_fields("get_order", _obj({"id": {"type": "string"}, "order": _obj({})}))
    assert {f.path: f.name for f in top}["id"] == "order_id"


def test_input_params_put_required_first() -> None:
    params = input_params(
        _obj(
            {"note": {"type": "string"}, "ids": {"type": "array", "items": {"type": "string"}}},
            ["ids"],
        )
    )
    assert [(p.name, p.required, p.many, p.json_type) for p in params] == [
        ("ids", True, True, "string"),
        ("note", False, False, "string"),
    ]


@pytest.mark.parametrize(
    ("plural", "one"),
    [("flights", "flight"), ("categories", "category"), ("boxes", "box"), ("files", "file"),
     ("addresses", "address"), ("status", "status"), ("id", "id")],
)  # fmt: skip
def test_singular(plural: str, one: str) -> None:
    assert singular(plural) == one


def test_echoed_inputs_are_not_sources() -> None:
    view = ToolSpec(
        name="view_cart",
        input_schema=_obj({"user_id": {"type": "string"}}, ["user_id"]),
        output_schema=_obj({"user_id": {"type": "string"}}),
    )
    get_user = ToolSpec(
        name="get_user", input_schema=_obj({"user_id": {"type": "string"}}, ["user_id"])
    )
    assert infer_edges([view, get_user]) == []
    [echo] = infer_edges([view, get_user], skip_echoes=False)
    assert (echo.source, echo.target, echo.in_param) == ("view_cart", "get_user", "user_id")


def test_declared_edges_score_one_and_override_inferred() -> None:
    declared = [
        {"source": "search_flights", "target": "get_fare_rules", "out_field": "flights[].id",
         "in_param": "flight_id"},
        ("get_fare_rules", "search_flights"),
    ]  # fmt: skip
    edges = {
        (e.source, e.target): e for e in infer_edges([SEARCH_FLIGHTS, GET_FARE_RULES], declared)
    }
    assert edges[("search_flights", "get_fare_rules")].origin == EdgeOrigin.DECLARED
    assert edges[("search_flights", "get_fare_rules")].score == 1.0
    assert edges[("get_fare_rules", "search_flights")].origin == EdgeOrigin.DECLARED
    with pytest.raises(InputError, match="no tool named 'nope'"):
        infer_edges([SEARCH_FLIGHTS], [("search_flights", "nope")])


def _cluster(tools: list[ToolSpec], edges: list[ToolEdge] | None = None) -> ToolCluster:
    return ToolCluster(
        cluster_id="toy",
        domain=Domain.TRAVEL,
        server=ServerSpec(kind=ServerKind.BUNDLED, module="x"),
        tools=tools,
        edges=edges if edges is not None else infer_edges(tools),
    )


BOOK = ToolSpec(
    name="book_flight",
    access=ToolAccess.WRITE,
    input_schema=_obj(
        {"flight_id": {"type": "string"}, "passenger_name": {"type": "string"}},
        ["flight_id", "passenger_name"],
    ),
    output_schema=_obj({"booking_id": {"type": "string"}}),
)


def test_dependency_graph_and_entry_tools() -> None:
    cluster = _cluster([SEARCH_FLIGHTS, GET_FARE_RULES, BOOK])
    g = dependency_graph(cluster)
    assert set(g.nodes) == {"search_flights", "get_fare_rules", "book_flight"}
    assert g.nodes["book_flight"]["access"] == "write"
    assert g.nodes["book_flight"]["required"] == ["flight_id", "passenger_name"]
    assert g.edges["search_flights", "book_flight"]["in_param"] == "flight_id"
    assert g.edges["search_flights", "book_flight"]["origin"] == "inferred"
    # flight_id is produced by search_flights: only the search can start a task.
    assert entry_tools(cluster) == ["search_flights"]


def _chain(prefix: str, n: int) -> list[ToolSpec]:
    tools = []
    for i in range(n):
        tools.append(
            ToolSpec(
                name=f"{prefix}_step{i}",
                input_schema=_obj({f"{prefix}_k{i}_id": {"type": "string"}}),
                output_schema=_obj({f"{prefix}_k{i + 1}_id": {"type": "string"}}),
            )
        )
    return tools


def test_components_over_40_tools_split_by_louvain() -> None:
    tools = _chain("alpha", 25) + _chain("beta", 25) + [ToolSpec(name="lonely")]
    edges = infer_edges(tools)
    # one bridge joins the two chains into one component of 50 tools
    bridge = ToolEdge(
        source="alpha_step24", target="beta_step0", out_field="x", in_param="beta_k0_id", score=0.8
    )
    cluster = _cluster(tools, [*edges, bridge])
    g = dependency_graph(cluster)
    assert nx.number_weakly_connected_components(g) == 2
    parts = communities(g)
    assert all(len(p) <= 40 for p in parts)
    assert {"lonely"} in parts
    assert sum(len(p) for p in parts) == 51
    split = split_cluster(cluster)
    assert len(split) >= 3
    assert [c.cluster_id for c in split][:2] == ["toy.1", "toy.2"]
    assert split[-1].tool_names == ["lonely"]
    for part in split:
        names = set(part.tool_names)
        assert all(e.source in names and e.target in names for e in part.edges)
    small = _cluster([SEARCH_FLIGHTS, GET_FARE_RULES])
    assert split_cluster(small) == [small]


def test_draw_graph_writes_a_png(tmp_path) -> None:
    out = draw_graph(_cluster([SEARCH_FLIGHTS, GET_FARE_RULES, BOOK]), tmp_path / "g" / "toy.png")
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert width > 300 and height > 200


def test_docstring_examples() -> None:
    result = doctest.testmod(graph, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 5
    assert result.failed == 0
