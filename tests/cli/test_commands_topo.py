"""`synth topo TASK_ID`: the quotient graph of a stored task, drawn (docs/methods.md §8)."""

from __future__ import annotations

import typer
from fakes.trajectories import call, make_trajectory, verdicts_for
from typer.testing import CliRunner

from trajsynth.cli.commands import topo
from trajsynth.store import Store

GOOD = call("get_order", {"order_id": "W1"}, {"status": "delivered"})
BAD = call("get_order", {"order_id": "X9"}, "no such order", error="not_found")


def _cli() -> typer.Typer:
    app = typer.Typer()
    app.command("topo")(topo.topo)

    @app.command()
    def other() -> None:  # a second command keeps `topo` a subcommand, as in `synth`
        """Placeholder."""

    return app


def test_topo_draws_a_stored_task(tmp_path) -> None:
    store = Store(tmp_path / "s.duckdb")
    trajectories = [
        make_trajectory("r1", [[GOOD]]),
        make_trajectory("r2", [[GOOD]]),
        make_trajectory("r3", [[BAD], [GOOD]]),
        make_trajectory("r4", [[BAD]], final="Sorry."),
    ]
    store.insert("trajectories", trajectories)
    verdicts = verdicts_for({"r1": True, "r2": True, "r3": True, "r4": False})
    store.insert("verdicts", list(verdicts.values()))
    out = tmp_path / "g.html"
    result = CliRunner().invoke(
        _cli(), ["topo", "task-1", "--store", str(store.path), "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    assert "0.4688" in result.output  # rl_score of docs/methods.md §8's example
    page = out.read_text()
    assert "<svg" in page and "0.46875" in page

    trajectories_, verdicts_, write_tools, hidden = topo.load_task(store, "task-1")
    assert [t.trajectory_id for t in sorted(trajectories_, key=lambda t: t.trajectory_id)] == [
        "r1", "r2", "r3", "r4",
    ]  # fmt: skip
    assert verdicts_["r3"].passed and write_tools is None and hidden is None


def test_topo_unknown_task_is_a_clear_error(tmp_path) -> None:
    store = Store(tmp_path / "s.duckdb")
    store.insert("trajectories", [make_trajectory("r1", [[GOOD]])])
    result = CliRunner().invoke(_cli(), ["topo", "nope", "--store", str(store.path)])
    assert result.exit_code != 0
    assert "no task id starts with 'nope'" in str(result.exception)
