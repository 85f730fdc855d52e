"""The dashboard's figures from SQL over a store of known rows (see conftest.known_rows)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from trajsynth.cli.main import app
from trajsynth.dashboards import dashboard_command, queries
from trajsynth.dashboards.figures import quotient_figure, tree_figure
from trajsynth.dashboards.views import load_transcript, quotient_graph
from trajsynth.schemas import InputError
from trajsynth.store import Store
from trajsynth.store.summary import summarize_run


def test_runs_newest_first_with_state_and_pass_rate(known_store: Store) -> None:
    runs = queries.runs(known_store)
    assert [(r["run_id"], r["state"]) for r in runs] == [
        ("run-alpha", "finished"),
        ("run-beta", "running"),
    ]
    alpha, beta = runs
    # alpha: 8 trajectories, 1 excluded (left out of the rate), 4 of the other 7 passed
    assert (alpha["n_trajectories"], alpha["n_judged"], alpha["n_passed"]) == (8, 7, 4)
    assert alpha["pass_rate"] == pytest.approx(4 / 7)
    # beta: one passed, one never verified (not in the denominator either)
    assert (beta["n_trajectories"], beta["n_judged"], beta["pass_rate"]) == (2, 1, 1.0)
    assert queries.run_ids(known_store) == ["run-alpha", "run-beta"]


def test_overview_counts(known_store: Store) -> None:
    o = queries.overview(known_store, "run-alpha")
    assert (o["n_tasks"], o["n_excluded"], o["total_tokens"]) == (2, 1, 4 * 100 + 4 * 200)
    everything = queries.overview(known_store, None)
    assert (everything["n_trajectories"], everything["n_passed"]) == (10, 5)
    assert everything["pass_rate"] == pytest.approx(5 / 8)


def test_costs_per_verified_are_the_run_summarys(known_store: Store) -> None:
    summary, final = queries.run_summary(known_store, "run-alpha")
    # the wall time the run stored at its end (120 s), not the trajectories' summed 16 s
    assert final and summary.wall_s == 120.0
    assert summary == summarize_run(known_store, "run-alpha", wall_s=120.0)
    # tokens of every LLM call (planner, user, assistant: 523 + 1,050) per passed trajectory
    assert summary.passed == 4 and summary.tokens_per_verified == (523 + 1050) / 4
    assert summary.seconds_per_verified == 30.0
    running, final = queries.run_summary(known_store, "run-beta")
    assert not final and running.passed == 1  # still running: the time so far
    # up to its last change (09:00 to 09:05), not until now: a run that died unfinished
    # would otherwise grow without end
    assert running.wall_s == 300.0 and running.seconds_per_verified == running.wall_s


def test_distributions_by_cluster_mode_and_round(known_store: Store) -> None:
    clusters = {r["cluster_id"]: r for r in queries.by_cluster(known_store, "run-alpha")}
    assert clusters["shop"]["pass_rate"] == 0.75
    assert clusters["calendar"]["pass_rate"] == pytest.approx(1 / 3)
    assert clusters["calendar"]["n_excluded"] == 1 and "bank" not in clusters
    modes = {r["mode"]: r for r in queries.by_mode(known_store, "run-alpha")}
    assert {m: r["n_trajectories"] for m, r in modes.items()} == {
        "plan-first": 3,
        "explore": 3,
        "recover": 2,
    }
    assert modes["recover"]["pass_rate"] == 0.0 and modes["recover"]["n_judged"] == 1
    beta_modes = queries.by_mode(known_store, "run-beta")
    assert [(r["mode"], r["n_trajectories"]) for r in beta_modes] == [("(unscored)", 2)]
    rounds = queries.by_round(known_store, "run-alpha")
    assert [(r["round"], r["total_tokens"], r["pass_rate"], r["trajectory_s"]) for r in rounds] == [
        (0, 400, 0.75, 8.0),
        (1, 800, pytest.approx(1 / 3), 8.0),
    ]


def test_round_stats_and_their_empty_state(known_store: Store) -> None:
    rows = queries.round_stats(known_store, "run-alpha")
    assert [r["round"] for r in rows] == [0, 1]
    assert rows[0]["domain_entropy"] == 0.6931 and rows[1]["reasoning_mode_entropy"] == 1.0397
    assert rows[1]["action_complexity"] == 5.5 and rows[0]["error_branch_ratio"] == 0.2
    assert queries.round_stats(known_store, "run-beta") == []  # curation has not run
    known_store.execute("DROP TABLE round_stats")  # a store from before the curation migration
    assert queries.round_stats(known_store, "run-alpha") == []
    assert queries.overview(known_store, "run-alpha")["n_trajectories"] == 8


def test_tokens_by_role_sum_llm_calls(known_store: Store) -> None:
    roles = {r["role"]: r for r in queries.tokens_by_role(known_store, "run-alpha")}
    assert {k: (r["calls"], r["prompt_tokens"]) for k, r in roles.items()} == {
        "assistant": (8, 600),
        "planner": (2, 150),
        "user": (8, 300),
    }
    assert roles["user"]["completion_tokens"] == 4 * 12 + 4 * 25


def test_task_tree_drawn_in_layers_with_leaf_outcomes(known_store: Store) -> None:
    tasks = queries.tasks(known_store, "run-alpha")
    assert [t["blueprint_id"] for t in tasks] == ["task-a1", "task-a2"]  # mixed outcomes first
    trees = queries.trees_of_task(known_store, "task-a1")
    assert [t["tree_id"] for t in trees] == ["tree-task-a1"]
    nodes, leaves = queries.task_tree(known_store, "tree-task-a1")
    assert len(nodes) == 8 and len(leaves) == 4
    assert all("messages" not in n for n in nodes)
    fig = tree_figure(nodes, leaves)
    edges, points = fig.data
    assert len([x for x in edges.x if x is None]) == 7  # every node but the root has its edge
    labels = " ".join(points.text)
    assert labels.count("pass") == 3 and labels.count("fail") == 1
    assert "pruned: repeated_call" in labels
    assert any("value 0.50" in h for h in points.hovertext)  # long text in the hover
    # one column per depth, no two nodes in one place, every parent level with its children
    pos = dict(zip(points.customdata, zip(points.x, points.y, strict=True), strict=True))
    assert {x for x, _ in pos.values()} == {0.0, 1.0, 2.0}
    assert len(set(pos.values())) == 8
    by_id = {n["node_id"]: n for n in nodes}
    for node_id, (_, y) in pos.items():
        kids = [pos[c][1] for c, n in by_id.items() if n["parent_id"] == node_id]
        if kids:
            assert y == pytest.approx(sum(kids) / len(kids))
    assert fig.layout.dragmode == "pan" and fig.layout.height >= 360
    excluded = tree_figure(*queries.task_tree(known_store, "tree-task-a2"))
    assert sum("excluded" in t for t in excluded.data[1].text) == 1
    outcomes = queries.trajectories_of_tree(known_store, "tree-task-a1")
    assert [(r["trajectory_id"], r["passed"]) for r in outcomes][-1] == ("task-a1-t3", False)


def test_quotient_graph_of_a_task(known_store: Store) -> None:
    graph, metrics = quotient_graph(known_store, "task-a1")
    assert (
        metrics["n_rollouts"] == 4
        and metrics["pass_rate"] == 0.75
        and metrics["error_branch_ratio"] == 0.5
    )
    fig = quotient_figure(graph)
    points = fig.data[-1]
    assert set(points.text) == {"start", "S1", "E1", "success", "fail"}
    xs = dict(zip(points.text, points.x, strict=True))
    assert xs["start"] < xs["S1"] < xs["success"] == xs["fail"]  # layers, terminals last
    ys = dict(zip(points.text, points.y, strict=True))
    assert ys["S1"] == ys["success"] and ys["E1"] == ys["fail"]  # no crossing edges
    assert len(set(zip(points.x, points.y, strict=True))) == len(points.x)  # none overlap
    with pytest.raises(InputError, match="no trajectories for task 'nope'"):
        quotient_graph(known_store, "nope")


def test_transcript_of_a_trajectory(known_store: Store) -> None:
    t = load_transcript(known_store, "task-a1-t3")
    assert t.passed is False and t.cluster_id == "shop"
    kinds = [e.kind for e in t.entries]
    assert "user" in kinds and "call" in kinds and "result" in kinds and "assistant" in kinds
    call = next(e for e in t.entries if e.kind == "call")
    assert call.name == "get_order" and "X9" in (call.arguments or "")
    assert [(c.kind, c.passed, c.why) for c in t.constraints][-1] == (
        "final_state",
        False,
        "order X9 does not exist",
    )
    with pytest.raises(InputError, match="no trajectory with id 'nope'"):
        load_transcript(known_store, "nope")


def test_dashboard_command_binds_loopback(tmp_path) -> None:
    cmd = dashboard_command(tmp_path / "s.duckdb", port=8765)
    assert cmd[cmd.index("--server.address") + 1] == "127.0.0.1"
    assert cmd[cmd.index("--server.port") + 1] == "8765"
    assert cmd[-2:] == ["--store", str((tmp_path / "s.duckdb").resolve())]


def test_synth_dashboard_without_a_store_is_a_clear_error(tmp_path) -> None:
    missing = tmp_path / "none.duckdb"
    result = CliRunner().invoke(app, ["dashboard", "--store", str(missing)])
    assert result.exit_code != 0
    assert isinstance(result.exception, InputError) and "no store at" in str(result.exception)
    result = CliRunner().invoke(app, ["dashboard", "--store", str(missing), "--port", "0"])
    assert "--port 0 is not a TCP port" in str(result.exception)


def test_page_reads_every_figure_in_one_go(known_store: Store, tmp_path) -> None:
    figures = queries.page(known_store, "run-alpha")
    assert set(figures) == set(queries.PAGE_QUERIES)
    assert figures["overview"] == queries.overview(known_store, "run-alpha")
    assert figures["by_mode"] == queries.by_mode(known_store, "run-alpha")
    assert figures["round_stats"] == queries.round_stats(known_store, "run-alpha")
    assert [r["run_id"] for r in figures["runs"]] == ["run-alpha", "run-beta"]
    empty = Store(tmp_path / "new.duckdb")
    empty.migrate()  # a store with tables and no rows yet
    nothing = queries.page(empty, None)
    assert nothing["runs"] == [] and nothing["overview"]["n_trajectories"] == 0


@pytest.mark.parametrize("run_id", ["run-alpha", "run-beta"])  # beta: unverified trajectories
def test_the_page_agrees_with_synth_stats_and_the_run_summary(
    known_store: Store, run_id: str
) -> None:
    from trajsynth.cli.commands.stats import collect_stats

    page = queries.page(known_store, run_id)["overview"]
    stats = collect_stats(known_store, run_id)
    summary, _ = queries.run_summary(known_store, run_id)
    for key in ("n_trajectories", "n_tasks", "n_passed", "n_excluded"):
        assert page[key] == stats[key], key
    assert page["pass_rate"] == pytest.approx(stats["pass_rate"]) == summary.pass_rate
    assert (page["n_passed"], page["n_judged"]) == (summary.passed, summary.counted)
    clusters = {r["cluster_id"]: r for r in queries.by_cluster(known_store, run_id)}
    for c in stats["pass_rate_by_cluster"]:
        row = clusters[c["cluster_id"]]
        assert (row["n_trajectories"], row["n_passed"], row["n_excluded"]) == (
            c["n"],
            c["passed"],
            c["excluded"],
        )
        assert row["pass_rate"] == pytest.approx(c["pass_rate"])
