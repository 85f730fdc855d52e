from __future__ import annotations

import multiprocessing
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from trajsynth.schemas import InputError, Termination, Trajectory
from trajsynth.store import SCHEMA_VERSION, Store


def _trajectory(i: int) -> Trajectory:
    return Trajectory(
        trajectory_id=f"traj_{i}",
        run_id="run_1",
        blueprint_id=f"bp_{i % 3}",
        tree_id=f"tree_{i}",
        leaf_node_id=f"node_{i}",
        cluster_id="shop",
        messages=[{"role": "user", "content": f"hello {i}"}],
        calls=[],
        termination=Termination.USER_STOP,
    )


def test_insert_is_idempotent_by_id(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.duckdb")
    assert store.insert("trajectories", [_trajectory(i) for i in range(5)]) == 5
    assert store.insert("trajectories", [_trajectory(i) for i in range(7)]) == 2
    assert store.counts()["trajectories"] == 7


def test_nested_fields_are_json_that_sql_reaches_into(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.duckdb")
    store.insert("trajectories", [_trajectory(1)])
    rows = store.query("SELECT messages->0->>'content' AS first, cluster_id FROM trajectories")
    assert rows == [{"first": "hello 1", "cluster_id": "shop"}]


def test_multi_table_batch_is_one_transaction(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.duckdb")
    store.migrate()
    with pytest.raises(KeyError):
        store.insert_many({"trajectories": [_trajectory(1)], "no_such_table": [{"a": 1}]})
    assert store.counts()["trajectories"] == 0


def test_schema_version_and_migrate_twice(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.duckdb")
    assert store.migrate() == SCHEMA_VERSION
    assert Store(tmp_path / "s.duckdb").migrate() == SCHEMA_VERSION
    assert store.query("SELECT max(version) AS v FROM schema_version") == [{"v": SCHEMA_VERSION}]


def test_bad_sql_is_a_clear_error(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.duckdb")
    store.migrate()
    with pytest.raises(InputError, match="SQL error"):
        store.query_table("SELEC nothing")


def test_reading_a_missing_store_says_what_to_run(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="synth run"):
        Store(tmp_path / "none.duckdb").query_table("select 1")


def test_runs_record_state_and_resume(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.duckdb")
    assert store.start_run("run_a", {"seed": 1}, {"model": "m"}) is True
    store.finish_run("run_a", "crashed", {})
    assert store.start_run("run_a", {"seed": 1}, {"model": "m"}) is False
    assert store.get("runs", "run_a")["state"] == "running"


def _writer(path: str, n: int) -> None:
    store = Store(path)
    for i in range(n):
        store.insert("trajectories", [_trajectory(1000 + i)])


@pytest.mark.slow  # several seconds: planning, processes or a full round
def test_reader_answers_while_another_process_writes(tmp_path: Path) -> None:
    path = tmp_path / "s.duckdb"
    store = Store(path)
    store.migrate()
    proc = multiprocessing.get_context("spawn").Process(target=_writer, args=(str(path), 40))
    proc.start()
    seen = []
    while proc.is_alive():
        seen.append(store.query("SELECT count(*) AS n FROM trajectories")[0]["n"])
    proc.join()
    assert proc.exitcode == 0
    assert store.counts()["trajectories"] == 40
    assert seen == sorted(seen)  # every read saw a committed prefix


def test_a_record_built_whole_is_its_rows_one_definition(tmp_path: Path) -> None:
    """``ScoreRow`` and ``MetricValueRow`` are ``Scores`` and ``MetricValue`` under a table
    name: the same columns in the same order, an enum stored as its plain value."""
    from trajsynth.schemas import MetricScope, MetricValue, Scores
    from trajsynth.store.rows import MetricValueRow, ScoreRow, column_types

    assert list(ScoreRow.model_fields) == list(Scores.model_fields)
    assert list(MetricValueRow.model_fields) == list(MetricValue.model_fields)
    assert column_types(MetricValueRow)["scope"] == "VARCHAR"
    store = Store(tmp_path / "s.duckdb")
    value = MetricValue(
        value_id=MetricValue.key_of(MetricScope.TASK, "t1", "m"),
        scope=MetricScope.TASK,
        item_id="t1",
        metric="m",
        value=2.5,
    )
    store.insert("metric_values", [value.model_dump(mode="json")])
    rows = store.query("SELECT item_id, value FROM metric_values WHERE scope = 'task'")
    assert rows == [{"item_id": "t1", "value": 2.5}]


def _trajectory_row(i: int) -> Any:
    from trajsynth.store.rows import TrajectoryRow

    t = _trajectory(i)
    return TrajectoryRow.of(t, n_calls=len(t.calls), total_tokens=t.total_tokens)


def test_the_typed_door_writes_rows_and_reads_back_the_records(tmp_path: Path) -> None:
    """``Store.write`` takes row models (a dict is refused), ``Store.read`` of a record gives
    the records the rows were made of, filtered by any column, ordered by key."""
    from trajsynth.store.rows import TrajectoryRow, WorkUnitRow

    store = Store(tmp_path / "s.duckdb")
    rows = [_trajectory_row(i) for i in range(4)]
    done = WorkUnitRow(unit_id="u", run_id="run_1", kind="rollout")
    assert store.write(rows, units=[done]) == 5
    assert store.write(rows) == 0  # idempotent by key
    assert store.read(Trajectory) == [_trajectory(i) for i in range(4)]
    assert [t.trajectory_id for t in store.read(Trajectory, blueprint_id="bp_0")] == [
        "traj_0",
        "traj_3",
    ]
    assert store.read(TrajectoryRow, "n_calls = ?", [0], run_id="run_1") == rows
    shared = store.read(Trajectory, shared=("tools", "messages"))
    assert shared == store.read(Trajectory)
    with pytest.raises(TypeError, match="row models, not dict"):
        store.write([{"trajectory_id": "x"}])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="neither a row model nor stored whole"):
        store.read(InputRecord)


class InputRecord(BaseModel):
    name: str


def test_a_row_a_record_cannot_take_is_named_and_left_out(tmp_path: Path) -> None:
    """A stored row that no longer validates (a value outside today's enum): with
    ``on_error`` it is named and skipped, the other rows read; without it, it raises."""
    store = Store(tmp_path / "s.duckdb")
    store.write([_trajectory_row(i) for i in range(3)])
    store.execute("UPDATE trajectories SET termination = 'gone' WHERE trajectory_id = 'traj_1'")
    skipped: dict[str, str] = {}
    read = store.read(Trajectory, on_error=lambda key, exc: skipped.setdefault(key, str(exc)))
    assert [t.trajectory_id for t in read] == ["traj_0", "traj_2"]
    assert list(skipped) == ["traj_1"] and "termination" in skipped["traj_1"]
    with pytest.raises(ValidationError):
        store.read(Trajectory)


def test_a_write_with_delete_replaces_a_slice_in_one_transaction(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.duckdb")
    store.write([_trajectory_row(i) for i in range(3)])
    newer = _trajectory_row(7)
    delete = [("DELETE FROM trajectories WHERE blueprint_id = ?", ["bp_0"])]
    assert store.write([newer], delete=delete) == 1
    assert [t.trajectory_id for t in store.read(Trajectory)] == ["traj_1", "traj_2", "traj_7"]
    with pytest.raises(Exception, match="DELETE FROM nowhere|nowhere"):
        store.write([_trajectory_row(8)], delete=[("DELETE FROM nowhere", [])])
    assert len(store.read(Trajectory)) == 3  # the failed write left nothing
