from __future__ import annotations

import multiprocessing
from pathlib import Path

import pytest

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
