"""Verification (docs/methods.md §4): every constraint kind passes and fails on hand-built runs."""

from __future__ import annotations

import json
import typing

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trajsynth.curation.verify import (
    answer_contains_value,
    checker,
    extract_numbers,
    registered_kinds,
    reward,
    state_diff,
    verify,
)
from trajsynth.schemas import (
    AnswerContains,
    AnswerMatches,
    CallPattern,
    CodeTestsPass,
    ConstraintKind,
    EnvState,
    FailureClass,
    FinalState,
    FunctionCall,
    MaxCalls,
    Message,
    MessageRole,
    ObsClass,
    ObservedField,
    Order,
    Termination,
    ToolCall,
    ToolCalled,
    ToolCallRecord,
    ToolNotCalled,
    ToolSpec,
    Trajectory,
)

SHOP_TOOLS = [
    ToolSpec(name="find_user", input_schema={"properties": {"email": {"type": "string"}}}),
    ToolSpec(name="get_order", input_schema={"properties": {"order_id": {"type": "string"}}}),
    ToolSpec(
        name="return_items",
        input_schema={
            "properties": {
                "order_id": {"type": "string"},
                "item_ids": {"type": "array", "items": {"type": "string"}},
                "payment_method_id": {"type": "string"},
                "reason": {"type": "string"},
            }
        },
    ),
    ToolSpec(name="cancel_order", input_schema={"properties": {"order_id": {"type": "string"}}}),
    ToolSpec(
        name="add_to_cart",
        input_schema={
            "properties": {
                "sku": {"type": "string"},
                "qty": {"type": "integer"},
                "options": {"type": "object", "properties": {"color": {"type": "string"}}},
                "steps": {"type": "array", "x-ordered": True},
            }
        },
    ),
]

GOLD_REFUND = {"order_id": "#W1", "item_id": "i9", "method": "card_1", "amount": 54.2}
GIFT_REFUND = {"order_id": "#W1", "item_id": "i9", "method": "gift_7", "amount": 54.2}
GOLD = EnvState(state_hash="9f3c0a", tables={"refunds": [GOLD_REFUND]})


def call(
    tool: str,
    args: dict | None,
    obs: str = '{"ok": true}',
    cls: ObsClass = ObsClass.OK,
    raw: str | None = None,
) -> ToolCallRecord:
    return ToolCallRecord(
        call_id=f"c_{tool}_{len(str(args))}",
        tool=tool,
        raw_arguments=raw if raw is not None else json.dumps(args),
        arguments=args,
        observation=obs,
        obs_class=cls,
    )


def traj(
    calls: list[ToolCallRecord],
    answer: str | None = None,
    *,
    failure: FailureClass | None = None,
    messages: list[Message] | None = None,
    tid: str = "t1",
) -> Trajectory:
    if messages is None:
        # the conversation the calls were made in: each call and its result, then the answer
        messages = [Message(role=MessageRole.USER, content="hi")]
        for c in calls:
            fn = FunctionCall(name=c.tool, arguments=c.raw_arguments)
            messages.append(
                Message(
                    role=MessageRole.ASSISTANT, tool_calls=[ToolCall(id=c.call_id, function=fn)]
                )
            )
            messages.append(
                Message(role=MessageRole.TOOL, content=c.observation, tool_call_id=c.call_id)
            )
        if answer is not None:
            messages.append(Message(role=MessageRole.ASSISTANT, content=answer))
    return Trajectory(
        trajectory_id=tid,
        run_id="r",
        blueprint_id="b",
        tree_id="tr",
        leaf_node_id="n",
        cluster_id="shop",
        messages=messages,
        tools=[t.to_openai() for t in SHOP_TOOLS],
        calls=calls,
        final_answer=answer,
        termination=Termination.ASSISTANT_DONE,
        failure_class=failure,
    )


def one(constraint, trajectory: Trajectory, state: EnvState = GOLD):
    """Verify a single hard/soft constraint; return (passed, detail)."""
    verdict = verify(trajectory, [constraint], state)
    (result,) = verdict.results
    return result.passed, result.detail


# --- the docs/methods.md §4 worked example ------------------------------------------------------

C1 = FinalState(gold_hash="9f3c0a", gold_tables={"refunds": [GOLD_REFUND]})
C2 = ToolCalled(
    call=CallPattern(tool="return_items", matchers={"order_id": "#W1", "item_ids": ["i9"]})
)
C3 = ToolNotCalled(call=CallPattern(tool="cancel_order", matchers={"order_id": "#W1"}))
C4 = AnswerContains(values=["54.20"], hard=False)
EXAMPLE = [C1, C2, C3, C4]
READS = [
    call(
        "find_user",
        {"email": "mia.k@example.com"},
        '{"user_id": "u1", "payment_methods": [{"id": "card_1", "last_four": "1111"}]}',
    ),
    call("get_order", {"order_id": "#W1"}, '{"status": "delivered", "total": 54.2}'),
]


def test_worked_example_gift_card_fails_final_state_only() -> None:
    t = traj(
        [
            *READS,
            call(
                "return_items",
                {"order_id": "#W1", "item_ids": ["i9"], "payment_method_id": "gift_7"},
            ),
        ],
        "Done: $54.20 will be refunded to your gift card.",
    )
    state = EnvState(state_hash="a71b22", tables={"refunds": [GIFT_REFUND]})
    v = verify(t, EXAMPLE, state)
    assert [r.passed for r in v.results] == [False, True, True, True]
    assert v.results[0].detail.startswith("state hash a71b22 != gold 9f3c0a")
    assert "refunds: +1 -1 rows" in v.results[0].detail
    assert not v.passed
    assert v.score == pytest.approx(0.1)
    assert reward(v) == 0.0
    assert reward(v, shaped=True) == pytest.approx(0.1)
    assert v.state_diff == {"refunds": {"added": [GIFT_REFUND], "removed": [GOLD_REFUND]}}
    assert v.state_hash == "a71b22"
    assert not v.excluded


def test_worked_example_default_card_passes() -> None:
    t = traj(
        [
            *READS,
            call(
                "return_items",
                {"order_id": "#W1", "item_ids": ["i9"], "payment_method_id": "card_1"},
            ),
        ],
        "Your refund of $54.20 goes to your card ending 1111.",
    )
    v = verify(t, EXAMPLE, GOLD)
    assert all(r.passed for r in v.results)
    assert v.passed and v.score == 1.0 and reward(v) == 1.0
    assert v.state_diff == {}


def test_worked_example_missing_answer_only_costs_the_soft_part() -> None:
    t = traj([*READS, call("return_items", {"order_id": "#W1", "item_ids": ["i9"]})], "Done.")
    v = verify(t, EXAMPLE, GOLD)
    assert v.passed
    assert v.score == pytest.approx(0.9)
    assert reward(v) == 1.0 and reward(v, shaped=True) == pytest.approx(0.9)


# --- final_state ---------------------------------------------------------------------------


def test_final_state_unreadable_fails() -> None:
    state = EnvState(state_hash="9f3c0a", readable=False)
    ok, detail = one(C1, traj([]), state)
    assert not ok and detail == "state not readable"
    v = verify(traj([]), [C1], state)
    assert v.state_hash is None and v.state_diff == {}


def test_state_diff_counts_duplicates_and_missing_tables() -> None:
    state = EnvState(state_hash="x", tables={"t": [{"a": 1}, {"a": 1}]})
    assert state_diff({"t": [{"a": 1}], "u": [{"b": 2}]}, state) == {
        "t": {"added": [{"a": 1}], "removed": []},
        "u": {"added": [], "removed": [{"b": 2}]},
    }


# --- tool_called ---------------------------------------------------------------------------


def test_tool_called_passes_and_fails_on_matchers() -> None:
    good = call("return_items", {"order_id": "#W1", "item_ids": ["i9"], "reason": "x"})
    assert one(C2, traj([good]))[0]
    ok, detail = one(C2, traj([call("return_items", {"order_id": "#W2", "item_ids": ["i9"]})]))
    assert not ok
    assert 'differs on order_id="#W2"' in detail
    ok, detail = one(C2, traj([call("get_order", {"order_id": "#W1"})]))
    assert not ok and "return_items was never called" in detail


def test_tool_called_counts_only_successful_calls() -> None:
    failed = call("return_items", {"order_id": "#W1", "item_ids": ["i9"]}, "boom", ObsClass.ERROR)
    ok, detail = one(C2, traj([failed]))
    assert not ok and "observation was error" in detail
    empty = call("return_items", {"order_id": "#W1", "item_ids": ["i9"]}, "[]", ObsClass.EMPTY)
    assert one(C2, traj([empty]))[0]  # an empty result is still a call that happened


def test_tool_called_min_count() -> None:
    c = ToolCalled(call=CallPattern(tool="add_to_cart", matchers={"sku": "M-1"}), min_count=2)
    first = call("add_to_cart", {"sku": "M-1", "qty": 1})
    assert not one(c, traj([first]))[0]
    assert one(c, traj([first, call("add_to_cart", {"sku": "M-1", "qty": 2})]))[0]


def test_matchers_numbers_strings_ids_lists_paths() -> None:
    def called(matchers: dict, args: dict) -> bool:
        c = ToolCalled(call=CallPattern(tool="add_to_cart", matchers=matchers))
        return one(c, traj([call("add_to_cart", args)]))[0]

    assert called({"qty": 2}, {"qty": 2.0000000001})
    assert called({"qty": 2}, {"qty": "2"})  # numeric string vs number
    assert not called({"qty": 2}, {"qty": 2.01})
    assert not called({"qty": 1}, {"qty": True})  # a bool is not a number
    assert called({"options": {"color": "Blue"}}, {"options": {"color": " blue", "size": "L"}})
    assert called({"options.color": "BLUE"}, {"options": {"color": "blue"}})
    assert not called({"options.color": "blue"}, {"options": "blue"})
    assert not called({"sku": "m-1"}, {"sku": "M-1"})  # identifiers keep their case
    assert not called({"sku": "M-1"}, {})  # missing field
    assert called({"note": None}, {"sku": "M-1"})  # null matcher = absent
    assert called({"tags": ["a", "b"]}, {"tags": ["B", "a"]})  # lists: multiset by default
    assert not called({"tags": ["a", "b"]}, {"tags": ["a", "a"]})
    assert not called({"steps": ["a", "b"]}, {"steps": ["b", "a"]})  # schema says ordered
    ids = ToolCalled(call=CallPattern(tool="return_items", matchers={"item_ids": ["i9", "i3"]}))
    assert one(ids, traj([call("return_items", {"item_ids": ["i3", "i9"]})]))[0]
    assert not one(ids, traj([call("return_items", {"item_ids": ["I3", "i9"]})]))[0]


# --- tool_not_called -----------------------------------------------------------------------


def test_tool_not_called() -> None:
    assert one(C3, traj([call("cancel_order", {"order_id": "#W2"})]))[0]  # other entity
    assert one(C3, traj([]))[0]
    ok, detail = one(
        C3,
        traj([call("get_order", {"order_id": "#W1"}), call("cancel_order", {"order_id": "#W1"})]),
    )
    assert not ok and detail.endswith("attempted at call(s) [1]")


def test_tool_not_called_counts_refused_attempts() -> None:
    refused = call("cancel_order", {"order_id": "#W1"}, "order already delivered", ObsClass.ERROR)
    assert not one(C3, traj([refused]))[0]


# --- order ---------------------------------------------------------------------------------

ORDER = Order(
    first=CallPattern(tool="add_to_cart", matchers={"sku": "M-1"}),
    then=CallPattern(tool="return_items", matchers={"order_id": "#W1"}),
)
ADD = call("add_to_cart", {"sku": "M-1"})
RET = call("return_items", {"order_id": "#W1"})


def test_order_passes_and_fails() -> None:
    ok, detail = one(ORDER, traj([ADD, RET]))
    assert ok and "(call #0) precedes" in detail
    ok, detail = one(ORDER, traj([RET, ADD]))
    assert not ok and "does not precede" in detail
    ok, detail = one(ORDER, traj([RET]))
    assert not ok and detail.startswith("no successful call matches add_to_cart")


def test_order_uses_first_successful_matching_call() -> None:
    failed_add = call("add_to_cart", {"sku": "M-1"}, "boom", ObsClass.ERROR)
    assert not one(ORDER, traj([failed_add, RET, ADD]))[0]
    assert one(ORDER, traj([ADD, RET, ADD]))[0]


# --- answers -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "value", "expected"),
    [
        ("It costs $54.20.", "54.2", True),
        ("It costs $54.20.", 54.2, True),
        ("It costs 54.2 dollars", "$54.20", True),
        ("Total: 1,234.5 points", 1234.5, True),
        ("Total: 1234.5 points", "1,234.5", True),
        ("Total: 1234.50000001", 1234.5, True),
        ("It costs $54.21.", "54.20", False),
        ("Order W12 shipped", "W1", False),
        ("Order #W1 shipped", "#W1", True),
        ("Status: DELIVERED", "delivered", True),
        ("3 items in stock", 3, True),
        ("item i3 is in stock", 3, False),
        ("a balance of -5.50", -5.5, True),
        # a file's lines, stated whole or as a list in their order; a line missing, out of
        # order, or only part of a word does not state the file
        ("The file says: milk eggs bread", "milk\neggs\nbread\n", True),
        ("It lists milk, eggs and bread.", "milk\neggs\nbread\n", True),
        ("- milk\n- eggs\n- bread", "milk\neggs\nbread\n", True),
        ("It lists milk and bread.", "milk\neggs\nbread\n", False),
        ("It lists bread, eggs and milk.", "milk\neggs\nbread\n", False),
        ("It lists milky eggs and breadcrumbs.", "milk\neggs\nbread\n", False),
    ],
)
def test_answer_contains_value(answer: str, value, expected: bool) -> None:
    assert answer_contains_value(answer, value) is expected


def test_extract_numbers() -> None:
    assert extract_numbers("$1,234.56, 7 and .5 but not W12 or 3rd") == [1234.56, 7.0, 0.5]


def test_answer_contains_constraint() -> None:
    c = AnswerContains(values=["54.20", "delivered"])
    assert one(c, traj([], "Order delivered; total $54.20"))[0]
    ok, detail = one(c, traj([], "Order delivered"))
    assert not ok and detail == 'answer lacks ["54.20"]'
    ok, detail = one(c, traj([]))
    assert not ok and detail == "no final assistant message"


def test_a_volatile_answer_is_checked_against_the_episodes_own_reading() -> None:
    # the gold run read the clock at 09:47:50; this episode read it a minute later
    c = AnswerContains(
        values=["2026-11-26T09:47:50-05:00"],
        observed=ObservedField(tool="get_current_time", path=["source", "datetime"]),
    )
    now = call("get_current_time", {"timezone": "America/New_York"},
               '{"source": {"datetime": "2026-11-26T09:48:51-05:00"}}')  # fmt: skip
    ok, detail = one(c, traj([now], "It is 2026-11-26T09:48:51-05:00 in New York."))
    assert ok, detail
    assert "get_current_time's source.datetime in this episode" in detail
    ok, detail = one(c, traj([now], "It is 2026-11-26T09:47:50-05:00."))  # the gold's copy
    assert not ok and '"2026-11-26T09:48:51-05:00"' in detail
    # the last successful reading counts; an error or a call without the field is skipped
    later = call("get_current_time", {}, '{"source": {"datetime": "T2"}}')
    failed = call("get_current_time", {}, "Error: unknown timezone", ObsClass.ERROR)
    other = call("get_current_time", {}, '{"timezone": "UTC"}')
    assert one(c, traj([now, later, failed, other], "T2 it is"))[0]
    assert not one(c, traj([now, later], "2026-11-26T09:48:51-05:00"))[0]
    ok, detail = one(c, traj([failed], "2026-11-26T09:47:50-05:00"))
    assert not ok and detail == "no successful get_current_time call returned source.datetime"
    assert not one(c, traj([now]))[0]  # no answer at all
    flag = AnswerContains(values=[False], observed=ObservedField(tool="f", path=["is_dst"]))
    assert one(flag, traj([call("f", {}, '{"is_dst": false}')], "is_dst: false"))[0]


def test_answer_is_last_assistant_message_with_text() -> None:
    messages = [
        Message(role=MessageRole.USER, content="price?"),
        Message(role=MessageRole.ASSISTANT, content="It is $12.50."),
        Message(role=MessageRole.USER, content="thanks"),
        Message(role=MessageRole.ASSISTANT, content=None),
    ]
    c = AnswerContains(values=[12.5])
    assert one(c, traj([], messages=messages))[0]
    messages.append(Message(role=MessageRole.ASSISTANT, content="Anything else?"))
    assert not one(c, traj([], messages=messages))[0]  # only the final message counts


def test_answer_matches() -> None:
    c = AnswerMatches(pattern=r"(?i)refund(ed)? .*\$54\.20")
    assert one(c, traj([], "Refunded to your card: $54.20"))[0]
    assert not one(c, traj([], "Refund pending"))[0]
    ok, detail = one(AnswerMatches(pattern="(unclosed"), traj([], "x"))
    assert not ok and detail.startswith("invalid pattern")


# --- max_calls and code_tests_pass ---------------------------------------------------------


def test_max_calls_counts_every_call() -> None:
    c = MaxCalls(n=2, hard=True)
    assert one(c, traj([ADD, RET]))[0]
    bad = call("add_to_cart", None, "", ObsClass.ERROR, raw="{")
    ok, detail = one(c, traj([ADD, RET, bad]))
    assert not ok and detail == "3 tool call(s), limit 2"


def test_code_tests_pass() -> None:
    c = CodeTestsPass(check_id="tests_1", test_source="assert open('out.txt').read() == '42'")
    ok_state = EnvState(state_hash="h", checks={"tests_1": True})
    bad_state = EnvState(state_hash="h", checks={"tests_1": False})
    assert one(c, traj([]), ok_state) == (True, "check 'tests_1' passed")
    assert one(c, traj([]), bad_state) == (False, "check 'tests_1' failed")
    assert one(c, traj([]), GOLD) == (False, "check 'tests_1' was not run")


# --- malformed calls never crash -----------------------------------------------------------


def test_malformed_arguments_never_crash() -> None:
    bad = call("return_items", None, "arguments did not parse", ObsClass.ERROR, raw='{"order_id": ')
    # recorded as OK by a sloppy caller: still no crash, still no match on matchers
    sloppy = call("return_items", None, "", ObsClass.OK, raw="[1, 2]")
    constraints = [
        C1,
        C2,
        C3,
        ToolCalled(call=CallPattern(tool="return_items")),
        ToolNotCalled(call=CallPattern(tool="return_items", matchers={"order_id": "#W1"})),
        Order(first=CallPattern(tool="return_items"), then=CallPattern(tool="cancel_order")),
        AnswerContains(values=["x"]),
        MaxCalls(n=1, hard=False),
    ]
    v = verify(traj([bad, sloppy]), constraints, GOLD)
    assert [r.passed for r in v.results] == [True, False, True, False, True, False, False, False]
    assert "arguments did not parse" in v.results[1].detail
    forbidden_any = ToolNotCalled(call=CallPattern(tool="return_items"))
    assert not one(forbidden_any, traj([bad]))[0]  # an attempt at a forbidden tool counts


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["return_items", "cancel_order", "add_to_cart", "nope"]),
            st.none()
            | st.dictionaries(
                st.text(max_size=8),
                st.none()
                | st.integers()
                | st.text(max_size=5)
                | st.lists(st.integers(), max_size=3),
                max_size=4,
            ),
            st.sampled_from(list(ObsClass)),
        ),
        max_size=5,
    ),
    st.none() | st.text(max_size=30),
)
def test_random_runs_never_crash(calls, answer) -> None:
    records = [call(tool, args, "x", cls) for tool, args, cls in calls]
    v = verify(traj(records, answer), [*EXAMPLE, ORDER, MaxCalls(n=3)], GOLD)
    assert 0.0 <= v.score <= 1.0
    assert len(v.results) == 6


# --- verdict mechanics ---------------------------------------------------------------------


def test_excluded_failures_get_no_reward() -> None:
    run = [*READS, RET]
    for failure in (FailureClass.INFRA, FailureClass.SIMULATOR):
        v = verify(traj(run, failure=failure), EXAMPLE, GOLD)
        assert v.excluded and reward(v) is None and reward(v, shaped=True) is None
    v = verify(traj(run, failure=FailureClass.TOOL), EXAMPLE, GOLD)
    assert not v.excluded and reward(v) is not None


def test_score_without_soft_and_without_hard() -> None:
    t = traj([RET], "Done: the items are returned.")
    assert verify(t, [C3], GOLD).score == 1.0
    assert verify(t, [C2], GOLD).score == 0.0
    soft_only = verify(t, [MaxCalls(n=5, hard=False)], GOLD)
    assert not soft_only.passed  # nothing hard: nothing verified
    assert soft_only.score == pytest.approx(0.1)
    empty = verify(t, [], GOLD)
    assert not empty.passed and empty.score == 0.0


def test_verdict_id_is_content_derived() -> None:
    t = traj([RET], "ok")
    a, b = verify(t, EXAMPLE, GOLD), verify(t, EXAMPLE, GOLD)
    assert a.verdict_id == b.verdict_id and a.verdict_id.startswith("verdict_")
    other_state = EnvState(state_hash="zzz")
    assert verify(t, EXAMPLE, other_state).verdict_id != a.verdict_id
    assert verify(traj([RET], "ok", tid="t2"), EXAMPLE, GOLD).verdict_id != a.verdict_id
    assert verify(t, EXAMPLE[:3], GOLD).verdict_id != a.verdict_id


def test_constraints_as_dicts_from_a_dataset_row() -> None:
    t = traj([*READS, RET], "$54.20")
    as_dicts = [c.model_dump(mode="json") for c in EXAMPLE]
    assert verify(t, as_dicts, GOLD).results == verify(t, EXAMPLE, GOLD).results  # type: ignore[arg-type]


def test_every_constraint_kind_has_one_checker() -> None:
    assert registered_kinds() == sorted(typing.get_args(ConstraintKind))
    with pytest.raises(ValueError, match="already registered"):
        checker("max_calls")(lambda c, ctx: (True, ""))


def test_docstring_examples() -> None:
    import doctest

    from trajsynth.curation import verify as module

    result = doctest.testmod(module)
    assert result.attempted > 0 and result.failed == 0
