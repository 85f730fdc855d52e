"""Quotient graphs and topology metrics (docs/methods.md §1.2, §8), on hand-built rollout sets."""

from __future__ import annotations

import math

import numpy as np
import pytest
from fakes.trajectories import call, make_trajectory, make_verdict, methods_example, verdicts_for

from trajsynth.curation.topology import (
    FAIL,
    SUCCESS,
    build_quotient_graph,
    entropy,
    env_state_hash,
    err_key,
    error_branch_ratio,
    normalized_entropy,
    signature,
    state_key,
    task_metrics,
    trajectory_metrics,
    trajectory_steps,
)
from trajsynth.schemas import FailureClass, InputError, Termination

TOL = 1e-4
ORDER = {"order_id": "W1", "status": "delivered"}
GOOD = call("get_order", {"order_id": "W1"}, ORDER)
BAD = call("get_order", {"order_id": "X9"}, "no such order", error="not_found")


def by_id(graph):
    return {t.trajectory_id: t for t in trajectory_metrics(graph)}


# --- the worked example ---------------------------------------------------------------------


def test_methods_example_graph_shape() -> None:
    graph = build_quotient_graph(*methods_example())
    kinds = sorted(k for _, k in graph.nodes(data="kind"))
    assert kinds == sorted(["start", "state", "error", SUCCESS, FAIL])
    assert graph.number_of_edges() == 5
    (a,) = [n for n, k in graph.nodes(data="kind") if k == "start"]
    (e,) = [n for n, k in graph.nodes(data="kind") if k == "error"]
    (b,) = [n for n, k in graph.nodes(data="kind") if k == "state"]
    rollouts = {(u, v): d["rollouts"] for u, v, d in graph.edges(data=True)}
    assert rollouts == {
        (a, b): ["r1", "r2"],
        (a, e): ["r3", "r4"],
        (e, b): ["r3"],
        (b, SUCCESS): ["r1", "r2", "r3"],
        (e, FAIL): ["r4"],
    }
    errors = {(u, v) for u, v, d in graph.edges(data=True) if d["error"]}
    assert errors == {(a, e), (e, FAIL)}
    on_success = {(u, v) for u, v, d in graph.edges(data=True) if d["on_success"]}
    assert on_success == {(a, b), (a, e), (e, b), (b, SUCCESS)}
    assert graph.nodes[e]["error_type"] == "not_found"


def test_methods_example_task_metrics() -> None:
    m = task_metrics(build_quotient_graph(*methods_example()))
    assert m.task_id == "task-1"
    assert (m.n_rollouts, m.n_success, m.n_excluded) == (4, 3, 0)
    assert m.pass_rate == pytest.approx(0.75, abs=TOL)
    assert (m.n_branch_points, m.n_branch_edges, m.n_error_branch_edges) == (2, 4, 2)
    assert m.error_branch_ratio == pytest.approx(0.5, abs=TOL)
    assert m.strategy_entropy == pytest.approx(1.03972, abs=TOL)
    assert m.strategy_entropy_norm == pytest.approx(0.75, abs=TOL)
    assert m.rl_score == pytest.approx(0.46875, abs=TOL)
    assert m.n_signatures == 3
    assert m.n_success_strategies == 1  # A-E-B-C without its error node is A-B-C
    assert m.shortest_success_len == 2


def test_methods_example_trajectory_metrics() -> None:
    t = by_id(build_quotient_graph(*methods_example()))
    assert t["r1"].signature == t["r2"].signature != t["r3"].signature
    assert (t["r1"].signature_len, t["r3"].signature_len, t["r4"].signature_len) == (3, 4, 3)
    assert (t["r3"].recovered, t["r3"].path_len, t["r3"].n_recovered) == (True, 3, 1)
    assert t["r3"].efficiency == pytest.approx(1.0, abs=TOL)  # 2 / max(2, 3 - 1)
    assert (t["r1"].recovered, t["r1"].efficiency, t["r1"].redundancy) == (False, 1.0, 0.0)
    assert (t["r4"].success, t["r4"].recovered, t["r4"].efficiency, t["r4"].n_errors) == (
        False,
        False,
        None,
        1,
    )


def test_entropy_helpers_match_section_1_1() -> None:
    assert entropy([2, 1, 1]) == pytest.approx(1.03972, abs=TOL)
    assert normalized_entropy([2, 1, 1], 4) == pytest.approx(0.75, abs=TOL)
    assert normalized_entropy([5], 1) == 0.0
    assert entropy([]) == 0.0
    assert entropy([0, 3]) == 0.0


# --- state keys -----------------------------------------------------------------------------


def test_independent_reads_in_either_order_merge() -> None:
    a = call("get_order", {"order_id": "W1"}, ORDER)
    b = call("get_item", {"order_id": "W1"}, {"sku": "M-1"})
    graph = build_quotient_graph(
        [make_trajectory("x", [[a], [b]]), make_trajectory("y", [[b], [a]])],
        verdicts_for({"x": True, "y": True}),
    )
    # start, {a}, {b}, {a, b}, success: the two orders meet at {a, b}
    assert graph.number_of_nodes() == 5
    t = by_id(graph)
    assert t["x"].signature != t["y"].signature
    walks = graph.graph["walks"]
    assert walks["x"]["nodes"][2] == walks["y"]["nodes"][2]
    assert task_metrics(graph).n_success_strategies == 2


def test_writes_change_state_and_their_order_matters() -> None:
    w1 = call("cancel_order", {"order_id": "W1"}, {"ok": True})
    w2 = call("add_item", {"order_id": "W2"}, {"ok": True})
    graph = build_quotient_graph(
        [make_trajectory("x", [[w1], [w2]]), make_trajectory("y", [[w2], [w1]])],
        verdicts_for({"x": True, "y": True}),
    )
    walks = graph.graph["walks"]
    assert walks["x"]["nodes"][2] != walks["y"]["nodes"][2]
    # write_tools decides read/write: declared reads merge again
    graph = build_quotient_graph(
        [make_trajectory("x", [[w1], [w2]]), make_trajectory("y", [[w2], [w1]])],
        verdicts_for({"x": True, "y": True}),
        write_tools=set(),
    )
    walks = graph.graph["walks"]
    assert walks["x"]["nodes"][2] == walks["y"]["nodes"][2]


def test_state_key_definitions() -> None:
    env = env_state_hash([("cancel_order", "abc")])
    assert env != env_state_hash([])
    assert state_key(env, ["b", "a"], ["s"]) == state_key(env, {"a", "b"}, {"s"})
    assert state_key(env, ["a"], []) != state_key(env, ["a"], ["s"])
    skey = state_key(env, [], [])
    assert err_key(skey, ("get_order", "h"), "not_found") != skey
    assert err_key(skey, ("get_order", "h"), None) == err_key(skey, ("get_order", "h"), "")


def test_error_keeps_the_state_and_a_repeat_read_is_a_self_loop() -> None:
    traj = make_trajectory("x", [[GOOD], [BAD], [GOOD]])
    start, steps = trajectory_steps(traj)
    assert [s.error for s in steps] == [False, True, False]
    assert steps[1].state == steps[0].state != start  # an error does not change state_key
    assert steps[1].node != steps[1].state
    assert steps[2].node == steps[0].node  # the same read again learns nothing
    graph = build_quotient_graph([traj], verdicts_for({"x": True}))
    t = by_id(graph)["x"]
    # edges: A->B, B->E, E->B, B->success; signature A,B,E,B,success; one error recovered
    assert (t.path_len, t.n_errors, t.recovered) == (4, 1, True)
    assert t.signature_len == 5


def test_redundant_repeat_read_lowers_efficiency() -> None:
    graph = build_quotient_graph(
        [make_trajectory("lean", [[GOOD]]), make_trajectory("slow", [[GOOD], [GOOD]])],
        verdicts_for({"lean": True, "slow": True}),
    )
    t = by_id(graph)
    assert graph.has_edge(
        graph.graph["walks"]["slow"]["nodes"][1], graph.graph["walks"]["slow"]["nodes"][1]
    )
    assert t["lean"].efficiency == pytest.approx(1.0, abs=TOL)
    assert t["slow"].efficiency == pytest.approx(2 / 3, abs=TOL)
    assert t["slow"].redundancy == pytest.approx(1 / 3, abs=TOL)
    assert t["lean"].signature == t["slow"].signature  # the self-loop is not a new strategy


def test_l_star_falls_back_when_every_success_had_an_error() -> None:
    graph = build_quotient_graph(
        [make_trajectory("x", [[BAD], [GOOD]]), make_trajectory("y", [[BAD], [GOOD], [GOOD]])],
        verdicts_for({"x": True, "y": True}),
    )
    m = task_metrics(graph)
    assert m.shortest_success_len == 2  # x: 3 edges - 1 recovered error
    t = by_id(graph)
    assert t["x"].efficiency == pytest.approx(1.0, abs=TOL)
    assert t["y"].efficiency == pytest.approx(2 / 3, abs=TOL)


def test_hidden_info_reveal_moves_the_state_and_an_empty_ask_loops() -> None:
    opening = "Please check my last order."
    asked = make_trajectory(
        "x", ["What is your order id?", [GOOD]], replies={0: "It is W1."}, opening=opening
    )
    idle = make_trajectory("y", ["How are you?", [GOOD]], replies={0: "Fine."}, opening=opening)
    graph = build_quotient_graph(
        [asked, idle], verdicts_for({"x": True, "y": True}), hidden_info={"order_id": "W1"}
    )
    wx, wy = graph.graph["walks"]["x"], graph.graph["walks"]["y"]
    assert wx["edges"][0][1] == "ask_user" and wx["nodes"][1] != wx["nodes"][0]
    assert wy["edges"][0][1] == "ask_user" and wy["nodes"][1] == wy["nodes"][0]
    assert wx["nodes"][2] != wy["nodes"][2]  # same read, different revealed slots
    no_hidden = build_quotient_graph([asked], verdicts_for({"x": True}))
    w = no_hidden.graph["walks"]["x"]
    assert w["nodes"][1] == w["nodes"][0]


def test_soft_merge_difflib_and_embedding() -> None:
    long_a = {"order_id": "W1", "note": "x" * 200 + "a"}
    long_b = {"order_id": "W1", "note": "x" * 200 + "b"}
    ts = [
        make_trajectory("x", [[call("get_order", {"order_id": "W1"}, long_a)]]),
        make_trajectory("y", [[call("get_order", {"order_id": "W1"}, long_b)]]),
    ]
    v = verdicts_for({"x": True, "y": True})
    assert task_metrics(build_quotient_graph(ts, v)).n_signatures == 2
    merged = build_quotient_graph(ts, v, soft_merge="difflib")
    assert task_metrics(merged).n_signatures == 1
    assert (
        task_metrics(
            build_quotient_graph(ts, v, soft_merge="difflib", similarity_threshold=1.0)
        ).n_signatures
        == 2
    )

    def embed(texts):
        return np.array([[1.0, 0.0] if "a" in t[-5:] else [0.99, 0.1] for t in texts])

    assert (
        task_metrics(
            build_quotient_graph(ts, v, soft_merge="embedding", embedder=embed)
        ).n_signatures
        == 1
    )
    with pytest.raises(InputError):
        build_quotient_graph(ts, v, soft_merge="embedding")


# --- bad input: defined values, never a crash ------------------------------------------------


def test_no_tool_calls_goes_straight_to_the_terminal() -> None:
    graph = build_quotient_graph([make_trajectory("x", [])], verdicts_for({"x": True}))
    t = by_id(graph)["x"]
    assert (t.path_len, t.efficiency, t.recovered, t.signature_len) == (1, 1.0, False, 2)
    m = task_metrics(graph)
    assert (m.pass_rate, m.strategy_entropy_norm, m.error_branch_ratio, m.rl_score) == (
        1.0,
        0.0,
        0.0,
        0.0,
    )


def test_one_rollout_and_empty_task() -> None:
    m = task_metrics(
        build_quotient_graph([make_trajectory("x", [[BAD]])], verdicts_for({"x": False}))
    )
    assert (m.n_rollouts, m.pass_rate, m.strategy_entropy_norm, m.rl_score) == (1, 0.0, 0.0, 0.0)
    empty = build_quotient_graph([], {}, task_id="t0")
    m = task_metrics(empty)
    assert (m.task_id, m.n_rollouts, m.pass_rate, m.rl_score) == ("t0", 0, None, 0.0)
    assert trajectory_metrics(empty) == []


def test_infra_simulator_and_unverified_rollouts_are_left_out_with_a_reason() -> None:
    ts = [
        make_trajectory("ok", [[GOOD]]),
        make_trajectory(
            "infra", [[GOOD]], termination=Termination.INFRA_ERROR, failure_class=FailureClass.INFRA
        ),
        make_trajectory("sim", [[GOOD]], failure_class=FailureClass.SIMULATOR),
        make_trajectory("noverdict", [[GOOD]]),
        make_trajectory("excl", [[GOOD]]),
    ]
    v = {
        "ok": make_verdict("ok", True),
        "infra": make_verdict("infra", False),
        "excl": make_verdict("excl", False, excluded=True),
    }
    graph = build_quotient_graph(ts, v)
    assert set(graph.graph["walks"]) == {"ok"}
    skipped = graph.graph["skipped"]
    assert "infra" in skipped["infra"] and "simulator" in skipped["sim"]
    assert skipped["noverdict"] == "no verdict" and "excluded" in skipped["excl"]
    m = task_metrics(graph)
    assert (m.n_rollouts, m.n_excluded, m.pass_rate) == (1, 4, 1.0)
    t = by_id(graph)
    assert not t["infra"].included and t["infra"].efficiency is None
    assert all(r in graph.nodes[SUCCESS]["rollouts"] for r in ["ok"])


def test_malformed_call_becomes_an_error_node() -> None:
    broken = call(
        "get_order",
        '{"order_id": ',
        "arguments are not valid JSON",
        error="invalid_json",
        failure=FailureClass.MODEL,
    )
    graph = build_quotient_graph(
        [make_trajectory("x", [[broken], [GOOD]])], verdicts_for({"x": True})
    )
    errs = [n for n, k in graph.nodes(data="kind") if k == "error"]
    assert len(errs) == 1 and graph.nodes[errs[0]]["error_type"] == "invalid_json"
    assert by_id(graph)["x"].recovered


def test_more_than_one_task_is_an_input_error() -> None:
    with pytest.raises(InputError, match="one task per quotient graph"):
        build_quotient_graph(
            [make_trajectory("x", [], task_id="a"), make_trajectory("y", [], task_id="b")],
            verdicts_for({"x": True, "y": True}),
        )


def test_rollout_ended_by_budget_has_an_end_edge() -> None:
    traj = make_trajectory("x", [[GOOD]], final=None, termination=Termination.MAX_TURNS)
    graph = build_quotient_graph([traj], verdicts_for({"x": False}))
    assert graph.graph["walks"]["x"]["edges"][-1][1] == "end:max_turns"


def test_signature_and_ebr_without_branches() -> None:
    assert signature([]) == ()
    graph = build_quotient_graph([make_trajectory("x", [[GOOD]])], verdicts_for({"x": True}))
    assert error_branch_ratio(graph) == (0.0, 0, 0, 0)


# --- the picture ------------------------------------------------------------------------------


def test_rl_score_is_zero_for_uniform_outcomes() -> None:
    ts = [make_trajectory("x", [[GOOD]]), make_trajectory("y", [[BAD], [GOOD]])]
    m = task_metrics(build_quotient_graph(ts, verdicts_for({"x": True, "y": True})))
    assert m.strategy_entropy_norm == pytest.approx(math.log(2) / math.log(2), abs=TOL)
    assert m.rl_score == 0.0
