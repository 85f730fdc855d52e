"""A model's lineage: every training row's task, its ancestors' included, never skipped.

A real DuckDB store with blueprints as the planner's flow stores them (``flows.units``)."""

from __future__ import annotations

from pathlib import Path

from trajsynth.flows.lineage import model_lineage, row_lineage
from trajsynth.flows.units import _blueprint_row
from trajsynth.schemas import Blueprint
from trajsynth.store import Store
from trajsynth.training.records import model_row


def _task(task_id: str, path: list[str]) -> Blueprint:
    return Blueprint.model_validate(
        {
            "blueprint_id": task_id,
            "cluster_id": "shop",
            "domain": "retail",
            "cell": {
                "cluster_id": "shop",
                "path_shape": "chain",
                "target_mode": "direct_execute",
                "difficulty": "easy",
            },  # fmt: skip
            "initial_state_id": "s",
            "tool_path": [{"tool": t} for t in path],
            "persona": "p",
            "goal": f"Do {task_id}.",
            "gold_run": {
                "calls": [{"tool": path[0], "arguments": {"q": task_id.upper()}}],
                "final_state": {"state_hash": "h"},
                "initial_state_hash": "h0",
            },
            "constraints": [],
            "seed": 1,
        }
    )


def _model(store: Store, path: str, parent: str, rows: list[dict], known=()) -> dict:
    lineage = row_lineage(store, rows, known)
    row = model_row(path=path, parent=parent, method="sft-lora", run_ids=lineage.run_ids,
                    data=path, n_rows=len(rows), n_tokens=1, config={}, metrics={},
                    gguf_path=f"{path}/model.f16.gguf",
                    lineage=[k.model_dump(mode="json") for k in lineage.keys],
                    unresolved=lineage.unresolved)  # fmt: skip
    store.insert("models", [row])
    return row


def test_a_tuned_models_lineage_holds_its_parents_tasks_too(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.duckdb")
    store.migrate()
    store.insert("blueprints", [_blueprint_row(_task("t1", ["search"]), "run-a"),
                                _blueprint_row(_task("t2", ["buy"]), "run-b")])  # fmt: skip
    first = _model(store, "/m/first", "embedded", [{"task_id": "t1", "run_id": "run-a"}])
    # the second is tuned from the first, on a run of its own and a gold task never stored
    gold = _task("g1", ["search", "buy"])
    _model(store, "/m/second", "/m/first",
           [{"task_id": "t2", "run_id": "run-b"}, {"task_id": "g1", "run_id": "gold"}],
           known=[gold])  # fmt: skip
    lineage = model_lineage(store, "/m/second/model.f16.gguf")
    assert lineage.complete, lineage.why_incomplete
    assert {k.task_id for k in lineage.keys} == {"t1", "t2", "g1"}
    assert lineage.chain[1] == first["model_id"]
    g1 = next(k for k in lineage.keys if k.task_id == "g1")
    assert g1.path == ["search", "buy"] and g1.entities == ["g1"] and g1.goal


def test_what_cannot_be_named_makes_the_lineage_incomplete(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.duckdb")
    store.migrate()
    # an export from another store: its rows' tasks are not here
    _model(store, "/m/foreign", "embedded", [{"task_id": "elsewhere", "run_id": "r"}])
    foreign = model_lineage(store, "/m/foreign")
    assert not foreign.complete and "elsewhere" in str(foreign.why_incomplete)
    # a model this store never trained, and one whose parent it never trained
    assert "no models row" in str(model_lineage(store, "/m/unknown").why_incomplete)
    _model(store, "/m/orphan", "/m/lost", [])
    assert "parent /m/lost has no models row" in str(
        model_lineage(store, "/m/orphan").why_incomplete
    )
    # a base model: nothing to check, nothing missing
    assert model_lineage(store, "embedded").complete


def test_a_model_row_from_before_lineage_falls_back_to_its_runs(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.duckdb")
    store.migrate()
    store.insert("blueprints", [_blueprint_row(_task("t1", ["search"]), "run-a")])
    row = model_row(path="/m/old", parent="embedded", method="sft-lora", run_ids=["run-a"],
                    data="d", n_rows=1, n_tokens=1, config={}, metrics={})  # fmt: skip
    row.pop("lineage"), row.pop("unresolved")
    store.insert("models", [row])
    assert [k.task_id for k in model_lineage(store, "/m/old").keys] == ["t1"]
    silent = model_row(path="/m/none", parent="embedded", method="sft-lora", run_ids=[],
                       data="e", n_rows=1, n_tokens=1, config={}, metrics={})  # fmt: skip
    silent.pop("lineage"), silent.pop("unresolved")
    store.insert("models", [silent])
    assert "neither its rows' tasks nor its runs" in str(
        model_lineage(store, "/m/none").why_incomplete
    )
