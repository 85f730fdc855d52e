"""A store written by the release before the typed store opens with no data lost."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest
from pydantic import BaseModel, Field, ValidationError

from trajsynth.schemas import (
    Blueprint,
    BlueprintAttempt,
    InputError,
    LLMUsage,
    ModeCodebookRecord,
    Node,
    RolloutTree,
    RoundStats,
    Selection,
    Signals,
    TaskTopology,
    ToolCluster,
    ToolEdge,
    ToolSpec,
    Trajectory,
    TrajectoryTopology,
    Verdict,
)
from trajsynth.store import SCHEMA_VERSION, TABLES, Store
from trajsynth.store.rows import (
    RECORD_ROWS,
    ROW_MODELS,
    BlueprintAttemptRow,
    BlueprintRow,
    ClusterRow,
    EdgeRow,
    EvolutionRow,
    LLMCallRow,
    ModeCodebookRow,
    NodeRow,
    RoundStatsRow,
    ScoreRow,
    SelectionRow,
    SignalRow,
    TaskTopologyRow,
    ToolRow,
    TrajectoryRow,
    TrajectoryTopologyRow,
    TreeRow,
    VerdictRow,
    WorkUnitRow,
    column_types,
    model_from_row,
    stored_row,
)

OLD_STORE = Path(__file__).parent / "fixtures" / "store_v3.sql"


@pytest.fixture
def old_store(tmp_path: Path) -> Path:
    """A DuckDB file with trajsynth 392ae75's DDL (schema version 3) and a few rows."""
    path = tmp_path / "old.duckdb"
    con = duckdb.connect(str(path))
    con.execute(OLD_STORE.read_text())
    con.close()
    return path


def test_an_old_store_migrates_with_its_columns_renamed_and_its_rows_kept(old_store: Path) -> None:
    store = Store(old_store)
    assert store.migrate() == SCHEMA_VERSION
    [task] = store.read(TaskTopologyRow, run_id="run_old")
    assert (task.pass_rate, task.error_branch_ratio, task.shortest_success_len) == (0.5, 0.25, 3)
    assert (task.strategy_entropy_norm, task.n_success_strategies) == (1.0, 1)
    assert task.graph == {"nodes": []}
    [traj] = store.read(TrajectoryTopologyRow)
    assert (traj.recovered, traj.efficiency, traj.redundancy) == (True, 0.75, 0.25)
    assert store.read(ScoreRow)[0].action_complexity == 4.5
    [change] = store.read(EvolutionRow)
    assert (change.n_accepted, change.failure_rate, change.validity) == (3, 0.2, 0.8)
    assert (change.weight_old, change.weight_new) == (0.5, 0.6)
    assert store.query("SELECT n_success_strategies FROM round_stats") == [
        {"n_success_strategies": 1.5}
    ]
    assert store.counts()["runs"] == 1


def test_a_migrated_store_has_exactly_the_columns_a_new_one_has(
    old_store: Path, tmp_path: Path
) -> None:
    def columns(path: Path) -> dict[str, list[tuple[str, str]]]:
        con = duckdb.connect(str(path), read_only=True)
        rows = con.execute(
            "SELECT table_name, column_name, data_type FROM information_schema.columns "
            "ORDER BY table_name, ordinal_position"
        ).fetchall()
        con.close()
        out: dict[str, list[tuple[str, str]]] = {}
        for table, column, typ in rows:
            out.setdefault(table, []).append((column, typ))
        return out

    Store(old_store).migrate()
    fresh = tmp_path / "new.duckdb"
    Store(fresh).migrate()
    assert {t: sorted(c) for t, c in columns(old_store).items()} == {
        t: sorted(c) for t, c in columns(fresh).items()
    }


def test_migrating_twice_changes_nothing(old_store: Path) -> None:
    Store(old_store).migrate()
    assert Store(old_store).migrate() == SCHEMA_VERSION
    assert len(Store(old_store).read(TaskTopologyRow)) == 1


def test_the_ddl_is_read_from_the_row_models() -> None:
    assert TABLES["task_topology"][0] == "task_id"
    assert column_types(TaskTopologyRow)["error_branch_ratio"] == "DOUBLE"
    assert TABLES["trajectories"][1]["seed"] == "BIGINT"
    assert TABLES["embeddings"][1]["vector"] == "FLOAT[]"
    assert TABLES["work_units"][1]["done_at"] == "TIMESTAMP"
    assert TABLES["task_topology"][1]["graph"] == "JSON"


def test_write_and_read_give_back_the_models(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.duckdb")
    rows = [
        TaskTopologyRow(task_id="t1", run_id="r", round=0, pass_rate=0.5, graph={"a": [1]}),
        TaskTopologyRow(task_id="t2", run_id="r", round=1),
    ]
    unit = WorkUnitRow(unit_id="u1", run_id="r", kind="curate")
    assert store.write(rows, units=[unit]) == 3
    assert store.write(rows) == 0  # idempotent by key
    assert store.read(TaskTopologyRow) == rows
    assert store.read(TaskTopologyRow, round=1) == rows[1:]
    assert store.read(TaskTopologyRow, "pass_rate > ?", [0.4]) == rows[:1]
    with pytest.raises(InputError, match="no column 'ebr'"):
        store.read(TaskTopologyRow, ebr=0.1)


def test_a_row_under_a_columns_old_name_is_an_error_not_a_null(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.duckdb")
    with pytest.raises(InputError, match="no column 'ebr' \\(renamed 'error_branch_ratio'\\)"):
        store.insert("task_topology", [{"task_id": "t", "ebr": 0.5}])
    assert store.insert("task_topology", [{"task_id": "t", "not_a_column": 1}]) == 1


RELEASE_STORE = Path(__file__).parent / "fixtures" / "store_4541124.sql"


def test_a_store_of_the_release_before_derived_rows_opens_and_reads_every_row(
    tmp_path: Path,
) -> None:
    """Trees, nodes, trajectories and verdicts as trajsynth 4541124 wrote them (its own row
    models, columns in its order): read back whole as records after the upgrade, and a new
    row goes in beside them."""
    path = tmp_path / "release.duckdb"
    con = duckdb.connect(str(path))
    con.execute(RELEASE_STORE.read_text())
    con.close()
    store = Store(path)
    assert store.migrate() == SCHEMA_VERSION
    trajectories = store.read(TrajectoryRow)
    assert [t.trajectory_id for t in trajectories] == ["traj-1"]
    old = model_from_row(Trajectory, trajectories[0].model_dump())
    assert old.seed == 2**40 and old.calls[0].tool == "get_order"
    assert trajectories[0].total_tokens == 12345678901  # BIGINT, as the release declared it
    assert model_from_row(Verdict, store.read(VerdictRow)[0].model_dump()).passed
    assert store.read(TreeRow)[0].total_tokens == 2**35
    assert store.read(NodeRow)[0].value == 1.0
    new = old.model_copy(update={"trajectory_id": "traj-2"})
    assert store.insert("trajectories", [new]) == 1
    assert len(store.read(TrajectoryRow)) == 2


_PLANNER_ONLY = {"words_attempts", "reads_before_write", "usage", "refused_paths"}


@pytest.mark.parametrize(
    ("row", "record", "added", "left_out"),
    [
        (TreeRow, RolloutTree, set(), set()),
        (NodeRow, Node, set(), set()),
        (TrajectoryRow, Trajectory, {"n_calls", "total_tokens"}, set()),
        (VerdictRow, Verdict, set(), set()),
        (SignalRow, Signals, {"run_id", "round"}, set()),
        (
            TaskTopologyRow,
            TaskTopology,
            {"run_id", "round", "cluster_id", "in_rl_pool", "graph"},
            set(),
        ),
        (TrajectoryTopologyRow, TrajectoryTopology, {"run_id", "round"}, set()),
        (SelectionRow, Selection, {"run_id"}, set()),
        (
            BlueprintRow,
            Blueprint,
            {"run_id", "difficulty", "path_shape", "target_mode"},
            _PLANNER_ONLY,
        ),
        (
            BlueprintAttemptRow,
            BlueprintAttempt,
            {"run_id"},
            {"blueprint_id", "words_source", "usage"},
        ),
        (RoundStatsRow, RoundStats, set(), set()),
        (LLMCallRow, LLMUsage, {"call_key", "run_id", "trajectory_id"}, set()),
        (
            ToolRow,
            ToolSpec,
            {"tool_key", "cluster_id"},
            {"access_source", "access_evidence", "idempotent", "injected"},
        ),
        (EdgeRow, ToolEdge, {"edge_key", "cluster_id"}, {"evidence"}),
        (
            ClusterRow,
            ToolCluster,
            {"n_tools", "n_edges"},
            {
                "tools",
                "edges",
                "seed",
                "probes",
                "arg_values",
                "warnings",
                "facts",
                "preconditions",
            },
        ),
        (
            ModeCodebookRow,
            ModeCodebookRecord,
            {"run_id", "round", "record"},
            {"modes", "centroids", "min_cosine"},
        ),
    ],
)
def test_a_record_stored_whole_declares_its_columns_once(
    row: type[BaseModel], record: type[BaseModel], added: set[str], left_out: set[str]
) -> None:
    """Its row model is derived: the record's fields in order (less those kept in memory
    only), their descriptions as the columns' meanings, plus only the columns the record does
    not hold (its key when it has none, run, round, what the writer computes)."""
    fields = [f for f in record.model_fields if f not in left_out]
    assert [c for c in row.model_fields if c not in added] == fields
    assert set(row.model_fields) - set(fields) == added
    assert all(
        row.model_fields[f].description == record.model_fields[f].description for f in fields
    )
    whole = not any(record.model_fields[f].is_required() for f in left_out)
    assert (RECORD_ROWS.get(record) is row) == whole  # a record reads back whole, or as its row


def test_a_record_field_without_a_meaning_cannot_become_a_column() -> None:
    class Undocumented(BaseModel):
        key: str = Field(description="the key")
        count: int = 0

    with pytest.raises(TypeError, match=r"Undocumented.count has no description"):
        stored_row("UndocumentedRow", Undocumented)


CURRENT_STORE = Path(__file__).parent / "fixtures" / "store_9ff7fe2.sql"


def test_a_store_of_the_release_before_the_typed_door_reads_every_row_through_it(
    tmp_path: Path,
) -> None:
    """A run's store as trajsynth 9ff7fe2 wrote it (rows of every table it fills, columns in
    its order): after the upgrade every row of every table reads back as its row model, and
    every row of a table derived from a record reads back as the record."""
    path = tmp_path / "release.duckdb"
    con = duckdb.connect(str(path))
    con.execute(CURRENT_STORE.read_text())
    con.close()
    store = Store(path)
    assert store.migrate() == SCHEMA_VERSION
    counts = store.counts()
    assert sum(counts.values()) >= 40 and counts["blueprints"] == counts["llm_calls"] == 2
    for table, model in ROW_MODELS.items():
        assert len(store.read(model)) == counts[table], table
    for record, model in RECORD_ROWS.items():
        assert len(store.read(record)) == counts[model.__table__], record.__name__
    [first, _] = store.read(Blueprint)
    assert first.gold_run.calls and first.constraints  # nested records, whole
    row = store.read(BlueprintRow, blueprint_id=first.blueprint_id)[0]
    assert row.difficulty == first.cell.difficulty.value  # a computed column kept
    assert store.write([BlueprintRow.of(first.model_copy(update={"blueprint_id": "bp_new"}))]) == 1
    assert len(store.read(Blueprint)) == 3


def test_a_row_is_validated_where_it_is_built() -> None:
    """``Row.of`` takes the record's columns and the ones it lacks; a value of the wrong type
    fails there, naming the column, instead of reaching SQL."""
    verdict = Verdict(verdict_id="v1", trajectory_id="t1", results=[], passed=True, score=1.0)
    assert VerdictRow.of(verdict).passed is True
    with pytest.raises(ValidationError, match="round"):
        SignalRow.of(Signals(trajectory_id="t1"), run_id="r", round="not a round")
