"""Constraint lint: sets a do-nothing run passes, or that check no outcome, are rejected."""

from __future__ import annotations

from trajsynth.curation.constraint_lint import (
    DO_NOTHING_PASSES,
    NO_OUTCOME,
    do_nothing_trajectory,
    lint_constraints,
)
from trajsynth.curation.verify import verify
from trajsynth.schemas import (
    AnswerContains,
    AnswerMatches,
    CallPattern,
    CodeTestsPass,
    EnvState,
    FinalState,
    MaxCalls,
    Order,
    ToolAccess,
    ToolCalled,
    ToolNotCalled,
    ToolSpec,
)

TOOLS = [
    ToolSpec(name="get_order", input_schema={"properties": {"order_id": {"type": "string"}}}),
    ToolSpec(
        name="return_items",
        input_schema={
            "properties": {
                "order_id": {"type": "string"},
                "item_ids": {"type": "array"},
                "refund": {"type": "object", "properties": {"method_id": {"type": "string"}}},
            }
        },
        access=ToolAccess.WRITE,
    ),
    ToolSpec(
        name="cancel_order",
        input_schema={"properties": {"order_id": {"type": "string"}}},
        access=ToolAccess.WRITE,
    ),
    ToolSpec(name="free_form"),  # a schema that lists no fields
]
INITIAL = EnvState(state_hash="init0", tables={"orders": [{"id": "#W1", "status": "delivered"}]})
RETURN = CallPattern(tool="return_items", matchers={"order_id": "#W1", "item_ids": ["i9"]})
CANCEL = CallPattern(tool="cancel_order", matchers={"order_id": "#W1"})
GOOD = [
    FinalState(gold_hash="gold9"),
    ToolCalled(call=RETURN),
    ToolNotCalled(call=CANCEL),
    AnswerContains(values=["54.20"], hard=False),
    MaxCalls(n=8, hard=False),
]


def test_a_good_set_is_clean() -> None:
    assert lint_constraints(GOOD, INITIAL, TOOLS) == []
    # and the baseline really fails it
    assert not verify(do_nothing_trajectory(TOOLS), GOOD, INITIAL).passed


def test_final_state_equal_to_initial_state_passes_doing_nothing() -> None:
    issues = lint_constraints([FinalState(gold_hash="init0")], INITIAL, TOOLS)
    assert issues == [
        DO_NOTHING_PASSES,
        "constraint 0 (final_state): the gold state equals the initial state",
    ]


def test_only_restrictions_check_no_outcome() -> None:
    issues = lint_constraints([ToolNotCalled(call=CANCEL), MaxCalls(n=3)], INITIAL, TOOLS)
    assert issues[:2] == [DO_NOTHING_PASSES, NO_OUTCOME]
    # soft outcome constraints do not count as checking an outcome
    soft = [ToolCalled(call=RETURN, hard=False), ToolNotCalled(call=CANCEL)]
    assert NO_OUTCOME in lint_constraints(soft, INITIAL, TOOLS)
    assert lint_constraints([], INITIAL, TOOLS) == ["no constraints", NO_OUTCOME]


def test_vacuous_answer_checks() -> None:
    issues = lint_constraints([AnswerMatches(pattern=".*")], INITIAL, TOOLS)
    assert DO_NOTHING_PASSES in issues
    assert "constraint 0 (answer_matches): pattern '.*' matches an empty answer" in issues
    issues = lint_constraints([AnswerMatches(pattern="(x")], INITIAL, TOOLS)
    assert any("does not compile" in i for i in issues)
    issues = lint_constraints(
        [AnswerContains(values=["  "]), ToolCalled(call=RETURN)], INITIAL, TOOLS
    )
    assert issues == ["constraint 0 (answer_contains): an empty value is contained in every answer"]


def test_code_check_that_already_passes() -> None:
    c = CodeTestsPass(check_id="t1", test_source="assert True")
    passing = EnvState(state_hash="init0", checks={"t1": True})
    issues = lint_constraints([c], passing, TOOLS)
    assert issues == [
        DO_NOTHING_PASSES,
        "constraint 0 (code_tests_pass): check 't1' already passes initially",
    ]
    assert lint_constraints([c], INITIAL, TOOLS) == []
    empty = CodeTestsPass(check_id="t2", test_source=" ")
    assert lint_constraints([empty], INITIAL, TOOLS) == [
        "constraint 0 (code_tests_pass): empty test source"
    ]


def test_unknown_tools_and_fields() -> None:
    bad = [
        ToolCalled(call=CallPattern(tool="refund_all")),
        ToolCalled(call=CallPattern(tool="return_items", matchers={"orderid": "#W1"})),
        ToolCalled(call=CallPattern(tool="return_items", matchers={"refund.method_id": "c1"})),
        ToolCalled(call=CallPattern(tool="return_items", matchers={"refund.card": "c1"})),
        ToolCalled(call=CallPattern(tool="free_form", matchers={"anything": 1})),
        Order(first=CANCEL, then=CallPattern(tool="get_ordr")),
    ]
    assert lint_constraints(bad, INITIAL, TOOLS) == [
        "constraint 0 (tool_called): unknown tool 'refund_all'",
        "constraint 1 (tool_called): return_items has no argument 'orderid'",
        "constraint 3 (tool_called): return_items has no argument 'refund.card'",
        "constraint 5 (order): unknown tool 'get_ordr'",
    ]


def test_contradictions() -> None:
    issues = lint_constraints(
        [
            ToolCalled(call=RETURN),
            ToolNotCalled(call=CallPattern(tool="return_items", matchers={"order_id": "#W1"})),
        ],
        INITIAL,
        TOOLS,
    )
    assert issues == ["constraint 1 (tool_not_called) forbids what constraint 0 requires"]
    issues = lint_constraints([Order(first=RETURN, then=RETURN)], INITIAL, TOOLS)
    assert issues == ["constraint 0 (order): a call cannot precede itself"]
    issues = lint_constraints(
        [ToolCalled(call=RETURN, min_count=2), ToolCalled(call=CANCEL), MaxCalls(n=2)],
        INITIAL,
        TOOLS,
    )
    assert issues == ["constraint 2 (max_calls): 2 calls < 3 required calls"]


def test_final_state_on_unreadable_state() -> None:
    unreadable = EnvState(state_hash="", readable=False)
    issues = lint_constraints(
        [FinalState(gold_hash="gold9"), ToolCalled(call=RETURN)], unreadable, TOOLS
    )
    assert issues == ["constraint 0 (final_state): the environment state is not readable"]
