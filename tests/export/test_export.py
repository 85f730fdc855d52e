"""SFT and RL export: round trip through ``datasets``, the formats, and bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fakes.export_store import RUN, export_store, select

from trajsynth.export import (
    EmptySelectionError,
    ExportError,
    export_dataset,
    export_rl,
    export_sft,
    rl_rows,
    sft_rows,
)
from trajsynth.export.records import message_dict
from trajsynth.llm.chat_template import load_tokenizer, render
from trajsynth.store import Store


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer()


def _leftovers(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if p.name.startswith("."))


@pytest.mark.slow
def test_sft_rows_round_trip_through_load_dataset(tmp_path: Path, tokenizer) -> None:
    import datasets

    store = export_store(tmp_path / "s.duckdb")
    rows = sft_rows(store, RUN)
    report = export_sft(store, tmp_path / "sft", tokenizer=tokenizer)
    assert [r.id for r in rows] == ["t1", "t2", "t4"]  # t3 was rejected
    assert report.n_sft == 3 and "train-00000-of-00001.parquet" in report.files
    assert "tokenizer/chat_template.jinja" in report.files  # trainable without trajsynth
    ds = datasets.load_dataset(
        "parquet", data_files=str(tmp_path / "sft" / "*.parquet"), split="train"
    )
    assert ds["id"] == ["t1", "t2", "t4"]
    for loaded, row in zip(ds, rows, strict=True):
        assert loaded["messages"] == [message_dict(m) for m in row.messages]
        assert loaded["tools"] == row.tools
    t2 = ds[1]
    call = t2["messages"][4]["tool_calls"][0]
    assert call == {
        "id": "t2-c1",
        "type": "function",
        "function": {"name": "get_item", "arguments": '{"order_id": "W2"}'},
    }
    assert t2["messages"][5] == {
        "role": "tool",
        "content": '{"sku": "M1"}',
        "tool_calls": None,
        "tool_call_id": "t2-c1",
        "name": "get_item",
    }
    # the closing user turn after the last assistant turn is cut
    assert [m["role"] for m in t2["messages"]][-1] == "assistant"
    assert t2["mode"] == "clarify" and t2["cac"] == 3.25 and t2["verdict"] is True
    assert ds[2]["messages"][-1]["content"] == "Done ✓."
    assert json.loads(t2["metadata"])["selection_score"] == 0.75
    # every row renders as TRL will render it, with assistant tokens to train on
    masks = [render(r["messages"], r["tools"], tokenizer, row_id=r["id"])[1] for r in ds]
    assert all(sum(m) > 0 for m in masks)
    assert report.n_assistant_tokens == sum(sum(m) for m in masks)


@pytest.mark.slow
def test_rl_rows_carry_prompt_env_and_constraints(tmp_path: Path) -> None:
    import datasets

    store = export_store(tmp_path / "s.duckdb")
    report = export_rl(store, tmp_path / "rl")
    assert report.n_rl == 1
    ds = datasets.load_dataset("parquet", data_files=str(tmp_path / "rl" / "*.parquet"))["train"]
    row = ds[0]
    assert row["id"] == "task-1"
    assert [m["role"] for m in row["prompt"]] == ["system", "user"]
    assert row["prompt"][1]["content"] == "Please check my order W1."
    assert row["env"] == {"cluster_id": "shop", "seed": 7, "initial_state_id": "state-task-1"}
    constraints = json.loads(row["constraints"])
    assert constraints[0]["kind"] == "tool_called"
    assert constraints[0]["call"] == {"tool": "get_order", "matchers": {"order_id": "W1"}}
    assert row["pass_rate"] == pytest.approx(2 / 3)
    assert {t["function"]["name"] for t in row["tools"]} >= {"get_order", "cancel_order"}


@pytest.mark.slow
def test_rl_export_reads_back_as_grpo_rows(tmp_path: Path) -> None:
    from trajsynth.training.tasks import load_rl_rows

    store = export_store(tmp_path / "s.duckdb")
    export_rl(store, tmp_path / "rl")
    (loaded,) = load_rl_rows(tmp_path / "rl")
    (expected,) = rl_rows(store, RUN)
    assert loaded == expected


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["openai-jsonl", "sharegpt"])
def test_jsonl_formats(tmp_path: Path, fmt: str, tokenizer) -> None:
    store = export_store(tmp_path / "s.duckdb")
    report = export_dataset(store, tmp_path / "out", fmt=fmt, tokenizer=tokenizer, plots=False)
    lines = (tmp_path / "out" / "sft" / "train.jsonl").read_text().splitlines()
    first = json.loads(lines[0])
    assert len(lines) == report.n_sft == 3
    if fmt == "openai-jsonl":
        assert set(first) == {"messages", "tools"}
        assert first["messages"][2]["tool_calls"][0]["function"]["arguments"] == (
            '{"order_id": "W1"}'
        )
        assert "tool_call_id" not in first["messages"][1]  # no nulls in the OpenAI layout
        meta = json.loads((tmp_path / "out" / "sft" / "metadata.jsonl").read_text().splitlines()[0])
        assert meta["id"] == "t1" and meta["task_id"] == "task-1"
    else:
        assert first["system"] == "You are a helpful assistant."
        assert [t["from"] for t in first["conversations"]] == [
            "human",
            "function_call",
            "observation",
            "gpt",
        ]
        assert json.loads(first["conversations"][1]["value"]) == {
            "name": "get_order",
            "arguments": {"order_id": "W1"},
        }
    rl = json.loads((tmp_path / "out" / "rl" / "train.jsonl").read_text().splitlines()[0])
    assert rl["env"]["initial_state_id"] == "state-task-1"


def test_bad_arguments_name_the_trajectory_and_leave_nothing(tmp_path: Path) -> None:
    store = export_store(tmp_path / "s.duckdb", bad_args=True)
    out = tmp_path / "data"
    with pytest.raises(ExportError, match=r"trajectory t2: message 4, call 'get_item'.*not valid"):
        export_dataset(store, out, check_render=False)
    assert not out.exists()
    assert _leftovers(tmp_path) == []


def test_tool_schema_without_name_is_rejected(tmp_path: Path) -> None:
    store = export_store(tmp_path / "s.duckdb")
    store.execute(
        "UPDATE trajectories SET tools = ? WHERE trajectory_id = 't4'",
        [json.dumps([{"type": "function", "function": {"description": "no name"}}])],
    )
    with pytest.raises(ExportError, match=r"trajectory t4: tool 0 .*no name"):
        export_sft(store, tmp_path / "sft", check_render=False)
    assert not (tmp_path / "sft").exists()


@pytest.mark.slow
def test_row_the_template_rejects_is_an_error_with_its_id(tmp_path: Path, tokenizer) -> None:
    store = export_store(tmp_path / "s.duckdb")
    bad = json.dumps(
        [
            {"role": "user", "content": "hi"},
            {"role": "critic", "content": "?"},
            {"role": "assistant", "content": "ok"},
        ]
    )
    store.execute("UPDATE trajectories SET messages = ? WHERE trajectory_id = 't4'", [bad])
    with pytest.raises(ExportError, match=r"trajectory t4"):
        export_sft(store, tmp_path / "sft", tokenizer=tokenizer)
    assert not (tmp_path / "sft").exists() and _leftovers(tmp_path) == []


def test_empty_selection_is_an_error(tmp_path: Path) -> None:
    store = export_store(tmp_path / "s.duckdb", selections=False)
    with pytest.raises(EmptySelectionError, match="empty selection"):
        export_dataset(store, tmp_path / "out")
    store = export_store(tmp_path / "s2.duckdb")
    with pytest.raises(EmptySelectionError, match=r"no selected SFT .* round 5"):
        export_sft(store, tmp_path / "out", round=5, check_render=False)
    with pytest.raises(ExportError, match="run 'nope' has no selections"):
        export_rl(store, tmp_path / "out", run_id="nope")
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_default_run_is_the_newest_that_selected_something(tmp_path: Path) -> None:
    from trajsynth.export import resolve_run

    store = export_store(tmp_path / "s.duckdb")
    # a later run whose curation rejected everything it saw
    store.insert_many(
        {
            "runs": [{"run_id": "run-later", "state": "done", "config": {}}],
            "selections": [
                {**select("sft", "t9", "task-9", selected=False), "run_id": "run-later"}
            ],
        }
    )
    assert resolve_run(store, None) == RUN
    assert export_dataset(store, tmp_path / "out", check_render=False).run_id == RUN
    with pytest.raises(EmptySelectionError, match="run 'run-later'"):
        export_dataset(store, tmp_path / "out2", run_id="run-later", check_render=False)


@pytest.mark.slow
def test_existing_folder_needs_overwrite(tmp_path: Path) -> None:
    store = export_store(tmp_path / "s.duckdb")
    out = tmp_path / "rl"
    out.mkdir()
    (out / "old.txt").write_text("keep me")
    with pytest.raises(ExportError, match="exists; pass --overwrite"):
        export_rl(store, out)
    assert (out / "old.txt").read_text() == "keep me"
    report = export_rl(store, out, overwrite=True)
    assert sorted(p.name for p in out.iterdir()) == report.files
    assert _leftovers(tmp_path) == []


def test_unknown_format_is_an_error(tmp_path: Path) -> None:
    store = export_store(tmp_path / "s.duckdb")
    with pytest.raises(ExportError, match="unknown format 'csv'"):
        export_rl(store, tmp_path / "rl", fmt="csv")


@pytest.mark.slow
def test_cli_export_writes_then_refuses_to_overwrite(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from trajsynth.cli.main import app

    store = export_store(tmp_path / "s.duckdb")
    args = ["export", "--out", str(tmp_path / "ds"), "--store", str(store.path)]
    first = CliRunner().invoke(app, args)
    assert first.exit_code == 0, first.output
    assert (tmp_path / "ds" / "README.md").is_file()
    assert sorted(p.name for p in (tmp_path / "ds" / "sft").iterdir()) == [
        "train-00000-of-00001.parquet"
    ]
    again = CliRunner().invoke(app, args)
    assert again.exit_code != 0
    assert CliRunner().invoke(app, [*args, "--overwrite"]).exit_code == 0


def test_empty_selection_says_what_the_selection_saw(tmp_path: Path) -> None:
    """A curated round that kept nothing: counts per kind and the top reasons, not
    'curate a round first'."""
    store = export_store(tmp_path / "s.duckdb", selections=False)
    left = [
        {**select("sft", t, "task-1", selected=False), "reason": "not verified"}
        for t in ("t1", "t2", "t3")
    ]
    left.append({**select("sft", "t4", "task-2", selected=False), "reason": "near-duplicate"})
    left.append({**select("rl", "task-1", "task-1", selected=False), "reason": "all pass"})
    store.insert_many({"selections": left})
    with pytest.raises(EmptySelectionError) as info:
        export_dataset(store, tmp_path / "out", check_render=False)
    seen = info.value.seen
    assert (seen.run_id, seen.n_trajectories, seen.n_verified) == (RUN, 4, 3)
    assert seen.considered == {"sft": 4, "rl": 1} and seen.selected == {"sft": 0, "rl": 0}
    assert seen.reasons == [("not verified", 3), ("all pass", 1), ("near-duplicate", 1)]
    message = str(info.value)
    assert "curate a round first" not in message
    assert "4 trajectories, 3 verified" in message and "sft: 0 selected of 4 considered" in message
    assert "'not verified' x3" in message


def test_empty_selection_of_an_uncurated_run_says_so(tmp_path: Path) -> None:
    store = export_store(tmp_path / "s.duckdb", selections=False)
    with pytest.raises(EmptySelectionError, match="no curation decisions") as info:
        export_dataset(store, tmp_path / "out", check_render=False)
    assert info.value.seen.n_trajectories == 4 and info.value.seen.considered == {}
    empty = Store(tmp_path / "empty.duckdb")
    empty.execute("SELECT 1")  # the store exists, with its tables and no row
    with pytest.raises(EmptySelectionError, match="has no runs"):
        export_dataset(empty, tmp_path / "out")


def test_an_outside_clusters_server_and_a_clusters_tools_come_from_their_rows(
    tmp_path: Path,
) -> None:
    """What rebuilds an RL task's environment: the server of an outside cluster (none for a
    bundled one) and a cluster's tools as OpenAI schemas, by cluster then name."""
    from trajsynth.export.rows import _cluster_tools, _outside_servers
    from trajsynth.schemas import Domain, ServerKind, ServerSpec, ToolCluster, ToolSpec
    from trajsynth.store.rows import ClusterRow, ToolRow

    store = Store(tmp_path / "s.duckdb")
    stdio = ServerSpec(kind=ServerKind.STDIO, command=["memo-server"], env_keys=["MEMO_KEY"])
    outside = ToolCluster(cluster_id="memo", domain=Domain.OTHER, server=stdio, tools=[],
                          source="outside")  # fmt: skip
    bundled = ToolCluster(cluster_id="shop", domain=Domain.OTHER, tools=[],
                          server=ServerSpec(kind=ServerKind.BUNDLED, module="x"))  # fmt: skip
    tools = [ToolSpec(name="b_tool", description="second"), ToolSpec(name="a_tool")]
    store.write(
        [ClusterRow.of(c, n_tools=0, n_edges=0) for c in (outside, bundled)]
        + [ToolRow.of(t, tool_key=f"memo/{t.name}", cluster_id="memo") for t in tools]
    )
    assert _outside_servers(store, {"memo", "shop"}) == {"memo": stdio}
    listed = _cluster_tools(store, {"memo", "shop"})
    assert [t["function"]["name"] for t in listed["memo"]] == ["a_tool", "b_tool"]
    assert listed["memo"][1]["function"]["description"] == "second" and "shop" not in listed
