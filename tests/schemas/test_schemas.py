"""Schema round trips, id stability and validation errors."""

from __future__ import annotations

import json

import pytest
from pydantic import TypeAdapter, ValidationError

from trajsynth.schemas import (
    AnswerContains,
    CallPattern,
    Constraint,
    EnvironmentStartError,
    FailureClass,
    FinalState,
    FunctionCall,
    InfraError,
    LLMConfig,
    MCPServerError,
    MCPServerStartError,
    Message,
    MessageRole,
    RunConfig,
    SandboxError,
    SandboxStartError,
    ToolCall,
    ToolCalled,
    ToolSpec,
    content_id,
    counts_against_policy,
    stable_hash,
)

CONSTRAINTS = TypeAdapter(list[Constraint])


def test_constraint_union_round_trips_by_kind() -> None:
    items = [
        FinalState(gold_hash="abc"),
        ToolCalled(call=CallPattern(tool="return_items", matchers={"order_id": "#W1"})),
        AnswerContains(values=["54.20"], hard=False),
    ]
    dumped = CONSTRAINTS.dump_json(items)
    back = CONSTRAINTS.validate_json(dumped)
    assert back == items
    assert [c.kind for c in back] == ["final_state", "tool_called", "answer_contains"]


def test_unknown_constraint_kind_names_the_tag() -> None:
    with pytest.raises(ValidationError, match="does_not_exist"):
        CONSTRAINTS.validate_python([{"kind": "does_not_exist"}])


def test_records_are_frozen_and_reject_typos() -> None:
    spec = ToolSpec(name="get_order")
    with pytest.raises(ValidationError):
        spec.name = "x"  # type: ignore[misc]
    with pytest.raises(ValidationError, match="descripton"):
        ToolSpec(name="get_order", descripton="typo")  # type: ignore[call-arg]


def test_message_openai_format_keeps_arguments_as_string() -> None:
    msg = Message(
        role=MessageRole.ASSISTANT,
        tool_calls=[ToolCall(id="c1", function=FunctionCall(name="f", arguments='{"a": 1'))],
    )
    wire = msg.to_openai()
    assert wire == {
        "role": "assistant",
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1'}}
        ],
    }
    with pytest.raises(ValueError):
        msg.tool_calls[0].function.parsed_arguments()  # type: ignore[index]
    assert Message.model_validate(json.loads(json.dumps(wire))) == msg


def test_content_id_is_stable_and_ignores_volatile_fields() -> None:
    a = {"goal": "x", "seed": 1, "wall_s": 0.5}
    b = {"seed": 1, "goal": "x", "wall_s": 9.0}
    vol = frozenset({"wall_s"})
    assert content_id("bp", a, volatile=vol) == content_id("bp", b, volatile=vol)
    assert content_id("bp", a, volatile=vol) != content_id("bp", {**a, "seed": 2}, volatile=vol)
    assert content_id("bp", a, volatile=vol).startswith("bp_")


def test_run_config_hash_changes_with_meaning() -> None:
    assert RunConfig().config_hash() == RunConfig().config_hash()
    assert RunConfig(seed=1).config_hash() != RunConfig(seed=2).config_hash()


def test_the_tool_view_changes_the_run_id_only_when_set() -> None:
    """Runs from before ``llm.distractors`` keep their ids (and resume); a run that lists a
    fixed view of the tools shows the model other prompts, so it is another run."""
    plain = RunConfig()
    assert "distractors" in plain.llm.model_dump()
    assert plain.config_hash() == _hash_without_distractors(plain)  # what older runs hashed
    focused = RunConfig(llm=LLMConfig(distractors=4))
    assert focused.config_hash() != plain.config_hash()
    assert focused.config_hash() != RunConfig(llm=LLMConfig(distractors=2)).config_hash()


_NOT_IN_ID = {"sandbox_pool": True, "llm": {"embedded_ctx", "embedded_deterministic"}}


def _hash_without_distractors(config: RunConfig) -> str:
    dump = config.model_dump(mode="json", exclude=_NOT_IN_ID)
    del dump["policy"]
    del dump["llm"]["distractors"]
    dump["llm"]["timeout_s"] = dump["llm"]["timeout_s"] or 120.0  # the old default
    del dump["judge"]  # likewise the model judge, off
    del dump["plan_attempts"]  # nor a planning budget
    del dump["user_stop_when_met"]  # nor a user who stops when served
    return stable_hash(dump, length=16)


def test_run_ids_of_the_last_release_are_kept() -> None:
    # RunConfig().config_hash() and with seed=3 at baed5d9: a new option must not move them
    assert RunConfig().config_hash() == "c7722b3396a85a24"
    assert RunConfig(seed=3).config_hash() == "0cba9faac0fc57e4"
    assert RunConfig(user_stop_when_met=True).config_hash() != RunConfig().config_hash()


def test_a_planning_budget_changes_the_run_id_only_when_set() -> None:
    plain = RunConfig()
    assert plain.plan_budget() == 60  # three attempts per task asked
    assert RunConfig(plan_attempts=10).plan_budget() == 20  # never fewer than the tasks
    assert plain.config_hash() == _hash_without_distractors(plain)
    assert RunConfig(plan_attempts=30).config_hash() != plain.config_hash()


def test_an_unset_llm_timeout_keeps_the_ids_of_runs_made_with_the_old_default() -> None:
    """``timeout_s`` was 120 s by default and is now unset (adaptive): runs from before
    resume under their ids; a timeout set to something else is still another run."""
    assert RunConfig().llm.timeout_s is None
    old_default = RunConfig(llm=LLMConfig(timeout_s=120.0))
    assert RunConfig().config_hash() == old_default.config_hash()
    assert RunConfig(llm=LLMConfig(timeout_s=5.0)).config_hash() != old_default.config_hash()


def test_only_tool_and_model_failures_count_against_the_policy() -> None:
    assert counts_against_policy(FailureClass.TOOL)
    assert counts_against_policy(FailureClass.MODEL)
    assert not counts_against_policy(FailureClass.INFRA)
    assert not counts_against_policy(FailureClass.SIMULATOR)
    assert not counts_against_policy(None)


@pytest.mark.parametrize(
    ("error", "family"),
    [(SandboxStartError, SandboxError), (MCPServerStartError, MCPServerError)],
)
def test_an_environment_that_did_not_start_is_one_type(
    error: type[Exception], family: type[Exception]
) -> None:
    """Callers branch on the type (skip the cluster, retry elsewhere), never on the message;
    the old handlers of the sandbox's or the server's errors still catch it."""
    with pytest.raises(EnvironmentStartError) as info:
        raise error("did not start")
    assert isinstance(info.value, family) and isinstance(info.value, InfraError)
    assert info.value.failure_class is FailureClass.INFRA


def test_a_tools_parameters_are_read_typed_from_any_input_schema() -> None:
    from trajsynth.schemas import ToolSpec

    spec = ToolSpec(
        name="t",
        input_schema={
            "type": "object",
            "properties": {"path": {"type": "string"}, "anything": True},
            "required": ["path", 3],
        },
    )
    assert spec.parameter_schemas() == {"path": {"type": "string"}}  # `true` is no schema object
    assert spec.required_parameters() == ["path"]
    bare = ToolSpec(name="u", input_schema={"properties": ["x"], "required": "path"})
    assert (bare.parameter_schemas(), bare.required_parameters()) == ({}, [])
