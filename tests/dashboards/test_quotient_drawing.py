"""The quotient graph's picture: the layout the dashboard and ``synth topo`` share, and the
drawing ``synth topo`` writes."""

from __future__ import annotations

import networkx as nx
from fakes.trajectories import methods_example

from trajsynth.curation.topology import FAIL, SUCCESS, build_quotient_graph
from trajsynth.dashboards.quotient_drawing import draw_quotient_graph, layered_positions


def test_draw_png_and_html(tmp_path) -> None:
    graph = build_quotient_graph(*methods_example())
    png = draw_quotient_graph(graph, tmp_path / "g.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000
    page = draw_quotient_graph(graph, tmp_path / "g.html").read_text()
    assert "<svg" in page and "rl_score" in page and "0.46875" in page
    empty = draw_quotient_graph(build_quotient_graph([], {}, task_id="t0"), tmp_path / "e.png")
    assert empty.exists()


def test_layered_positions_order_each_layer_by_its_predecessors() -> None:
    """The one layout of `synth topo` and the dashboard: layers by distance from the start,
    terminals last, and each layer ordered under its predecessors (barycentre), so the two
    chains below run straight; by name alone ``b_child`` (under ``z_state``) would sit on
    the top row, under ``a_state``, and the edges would cross."""
    g = nx.MultiDiGraph()
    kinds = {"start": "start", "a_state": "state", "z_state": "state", "z_child": "state",
             "b_child": "state", SUCCESS: SUCCESS, FAIL: FAIL}  # fmt: skip
    for node, kind in kinds.items():
        g.add_node(node, kind=kind)
    g.add_edges_from([("start", "a_state"), ("start", "z_state"), ("a_state", "z_child"),
                      ("z_state", "b_child"), ("z_child", SUCCESS), ("b_child", FAIL)])  # fmt: skip
    pos = layered_positions(g)
    assert set(pos) == set(kinds) and len(set(pos.values())) == len(kinds)  # none overlap
    assert pos["start"][0] < pos["a_state"][0] < pos["z_child"][0] < pos[SUCCESS][0]
    assert pos[SUCCESS][0] == pos[FAIL][0]  # terminals share the last layer
    assert pos["z_child"][1] == pos["a_state"][1] == pos[SUCCESS][1]  # each chain on its row
    assert pos["b_child"][1] == pos["z_state"][1] == pos[FAIL][1]
