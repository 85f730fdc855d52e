"""A damaged store file is named, not read as if whole: cut short (a full disk, a partial
copy) or not a DuckDB file at all. Both are one line from the CLI."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from trajsynth.schemas import Termination, Trajectory
from trajsynth.store import Store, StoreCorruptError


def _store(path: Path) -> Store:
    store = Store(path)
    store.insert(
        "trajectories",
        [
            Trajectory(
                trajectory_id=f"traj_{i:04d}", run_id="run_1", blueprint_id="bp_1",
                tree_id="tree_1", leaf_node_id=f"node_{i}", cluster_id="shop",
                messages=[{"role": "user", "content": "hello " * 50}],
                termination=Termination.USER_STOP,
            )
            for i in range(200)
        ],
    )  # fmt: skip
    return store


def test_an_intact_store_opens(tmp_path: Path) -> None:
    store = _store(tmp_path / "s.duckdb")
    assert Store(store.path).counts()["trajectories"] == 200


def test_a_truncated_store_is_refused_by_name(tmp_path: Path) -> None:
    path = _store(tmp_path / "s.duckdb").path
    os.truncate(path, int(path.stat().st_size * 0.15))
    with pytest.raises(StoreCorruptError, match=r"s\.duckdb is damaged: DuckDB cannot read it"):
        Store(path).query("SELECT * FROM trajectories")


def test_a_file_that_is_not_a_store_is_refused_by_name(tmp_path: Path) -> None:
    path = tmp_path / "s.duckdb"
    path.write_bytes(b"not a database at all\n" * 1000)
    with pytest.raises(StoreCorruptError, match="is damaged: DuckDB cannot read it"):
        Store(path).counts()


@pytest.mark.slow
def test_the_cli_says_so_in_one_line(tmp_path: Path) -> None:
    path = _store(tmp_path / "data" / "synth.duckdb").path
    os.truncate(path, int(path.stat().st_size * 0.15))
    out = subprocess.run(
        [sys.executable, "-m", "trajsynth.cli", "query", "select count(*) from trajectories"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
    assert "synth.duckdb" in out.stderr and "Traceback" not in out.stderr


def test_a_store_with_blocks_still_in_its_wal_is_not_called_truncated(tmp_path: Path) -> None:
    """A writer that has not checkpointed yet (another process, a crash) leaves blocks in the
    WAL: the main file is rightly shorter than the block count says."""
    import duckdb

    path = _store(tmp_path / "s.duckdb").path
    con = duckdb.connect(str(path))
    con.execute("PRAGMA disable_checkpoint_on_shutdown")
    con.execute("SET checkpoint_threshold = '1TB'")
    con.execute("CREATE TABLE big AS SELECT range AS i, repeat('x', 200) AS s FROM range(200000)")
    con.close()
    assert path.with_name(path.name + ".wal").exists()
    assert Store(path).counts()["trajectories"] == 200
