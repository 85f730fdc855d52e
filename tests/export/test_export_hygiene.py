"""The SFT export writes exactly what is stored and refuses what is not a clean example.

The stored case that was exported before: one real delete, two pseudo-calls to "delete_file
returned" under one repeated call id, no answer, failure signals, yet a topology saying
``recovered=True, efficiency=1.0`` and a (stale) verdict saying passed. The export refuses it
with every reason; a clean recovery beside it is written whole, with a ``recovered`` that
agrees with the verifier and the signals.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fakes.export_store import select
from fakes.store_rows import RUN, write_round

from trajsynth.curation.verify import verify
from trajsynth.export import sft_rows
from trajsynth.schemas import (
    EnvState,
    FailureClass,
    FunctionCall,
    Message,
    MessageRole,
    ObsClass,
    Termination,
    ToolCall,
    ToolCallRecord,
    Trajectory,
    Verdict,
)
from trajsynth.store import Store

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "delete_file",
            "description": "Delete a file",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}},
                "required": ["path"],
            },
        },
    }
]
README = json.dumps({"path": "README.md"})


def _record(cid: str, tool: str, raw: str, obs: str, error: bool) -> ToolCallRecord:
    try:
        parsed = json.loads(raw)
    except ValueError:
        parsed = None
    return ToolCallRecord(
        call_id=cid,
        tool=tool,
        raw_arguments=raw,
        arguments=parsed if isinstance(parsed, dict) else None,
        observation=obs,
        obs_class=ObsClass.ERROR if error else ObsClass.OK,
        failure_class=FailureClass.MODEL if error else None,
    )


def _trajectory(tid: str, steps: list[tuple[str, str, str, str, bool]], answer: str | None):
    messages = [Message(role=MessageRole.USER, content="Delete README.md please.")]
    calls = []
    for cid, tool, raw, obs, error in steps:
        fn = FunctionCall(name=tool, arguments=raw)
        messages.append(
            Message(role=MessageRole.ASSISTANT, tool_calls=[ToolCall(id=cid, function=fn)])
        )
        messages.append(Message(role=MessageRole.TOOL, content=obs, tool_call_id=cid, name=tool))
        calls.append(_record(cid, tool, raw, obs, error))
    if answer is not None:
        messages.append(Message(role=MessageRole.ASSISTANT, content=answer))
        messages.append(Message(role=MessageRole.USER, content="Thanks!"))
    return Trajectory(
        trajectory_id=tid,
        run_id=RUN,
        blueprint_id="task-1",
        tree_id=f"tree-{tid}",
        leaf_node_id=f"leaf-{tid}",
        cluster_id="code",
        messages=messages,
        tools=TOOLS,
        calls=calls,
        final_answer=answer,
        termination=Termination.USER_STOP if answer else Termination.MAX_TURNS,
    )


ECHO = '{"deleted": "README.md"}'
JUNK = _trajectory(
    "junk",
    [
        ("call_0", "delete_file", README, '{"deleted": true}', False),
        ("call_text_0", "delete_file returned", ECHO, "Error: unknown tool", True),
        ("call_text_0", "delete_file returned", ECHO, "Error: unknown tool", True),
    ],
    None,
)
RECOVERY = _trajectory(
    "recovery",
    [
        ("c1", "delete_file", json.dumps({"path": "READ.md"}), "Error: no such file", True),
        ("c2", "delete_file", README, '{"deleted": true}', False),
    ],
    "README.md is deleted.",
)


def _store(tmp_path: Path) -> Store:
    state = EnvState(state_hash="gold")
    recovery = verify(RECOVERY, [], state).model_copy(update={"passed": True})
    # the junk row's verdict as the verifier before hygiene wrote it: passed, nothing else
    stale = Verdict(verdict_id="v-junk", trajectory_id="junk", results=[], passed=True, score=1.0)
    store = Store(tmp_path / "s.duckdb")
    write_round(
        store, [JUNK, RECOVERY], {"junk": stale, "recovery": recovery}, domains={"code": "files"}
    )
    signals = [
        {"trajectory_id": "junk", "run_id": RUN, "failure": True, "failure_rate": 0.67,
         "no_progress": True, "stagnation": True},
        {"trajectory_id": "recovery", "run_id": RUN, "failure": True, "failure_rate": 0.5},
    ]  # fmt: skip
    scores = [
        {"trajectory_id": t, "run_id": RUN, "recovered": True, "efficiency": 1.0}
        for t in ("junk", "recovery")
    ]
    store.insert_many(
        {
            "signals": signals,
            "scores": scores,
            "selections": [select("sft", "junk", "task-1"), select("sft", "recovery", "task-1")],
        }
    )
    return store


def test_the_stored_junk_row_is_refused_with_every_reason(tmp_path: Path) -> None:
    refused: dict[str, int] = {}
    (row,) = sft_rows(_store(tmp_path), RUN, refused=refused)
    assert row.id == "recovery"
    assert refused == {
        "hygiene:answered": 1,
        "hygiene:known_tools": 1,
        "hygiene:no_repeated_failure": 1,
        "hygiene:unique_call_ids": 1,
        "failure signal without a recovery": 1,
    }


def test_a_clean_recovery_is_written_whole_and_says_so(tmp_path: Path) -> None:
    (row,) = sft_rows(_store(tmp_path), RUN)

    # every stored message up to the answer, both tool results included; only the user's
    # closing words after the answer are left out
    def shape(m: Message) -> tuple:
        calls = [
            (c.id, c.function.name, json.loads(c.function.arguments)) for c in m.tool_calls or []
        ]
        return m.role.value, m.content, m.tool_call_id, calls

    assert [shape(m) for m in row.messages] == [shape(m) for m in RECOVERY.messages[:-1]]
    assert row.messages[-1].content == "README.md is deleted."
    assert [m.role.value for m in row.messages].count("tool") == 2
    # the failure signal and the recovery agree: it failed once and corrected it
    assert row.metadata["recovered"] is True
    ids = [c.id for m in row.messages for c in m.tool_calls or []]
    assert len(ids) == len(set(ids)) == 2


def test_a_trajectory_that_ends_on_a_tool_result_is_refused_not_cut(tmp_path: Path) -> None:
    cut = _trajectory("cut", [("c1", "delete_file", README, '{"deleted": true}', False)], None)
    state = EnvState(state_hash="gold")
    verdict = verify(cut, [], state).model_copy(update={"passed": True})
    store = Store(tmp_path / "s.duckdb")
    write_round(store, [cut], {"cut": verdict}, domains={"code": "files"})
    store.insert_many({"selections": [select("sft", "cut", "task-1")]})
    refused: dict[str, int] = {}
    with pytest.raises(Exception, match="refused"):
        sft_rows(store, RUN, refused=refused)
    assert refused == {"hygiene:answered": 1}
