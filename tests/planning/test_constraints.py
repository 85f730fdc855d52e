"""Constraints derived from a gold run (docs/methods.md §4, last column), checked end to end."""

from __future__ import annotations

import json

from trajsynth.curation.constraint_lint import lint_constraints
from trajsynth.curation.verify import reward, verify
from trajsynth.planning.constraints import (
    changed_tables,
    deciding_fields,
    derive_constraints,
    max_calls_for,
    salient_value,
)
from trajsynth.schemas import (
    AnswerContains,
    CallPattern,
    Domain,
    EdgeOrigin,
    EnvState,
    FinalState,
    FunctionCall,
    GoldCall,
    MaxCalls,
    Message,
    MessageRole,
    ObsClass,
    ObservedField,
    Order,
    ServerKind,
    ServerSpec,
    Termination,
    ToolAccess,
    ToolCall,
    ToolCalled,
    ToolCallRecord,
    ToolCluster,
    ToolEdge,
    ToolNotCalled,
    ToolSpec,
    Trajectory,
)

R, W = ToolAccess.READ, ToolAccess.WRITE


def tool(name: str, access: ToolAccess, **props: dict) -> ToolSpec:
    return ToolSpec(name=name, access=access, input_schema={"type": "object", "properties": props})


S, ARR, NUM = {"type": "string"}, {"type": "array", "items": {"type": "string"}}, {"type": "number"}
SHOP = ToolCluster(
    cluster_id="shop",
    domain=Domain.RETAIL,
    server=ServerSpec(kind=ServerKind.BUNDLED, module="trajsynth.mcp_servers.servers.shop"),
    tools=[
        tool("find_user", R, email=S),
        tool("list_orders", R, user_id=S),
        tool("get_order", R, order_id=S),
        tool("return_items", W, order_id=S, item_ids=ARR, payment_method_id=S, reason=S),
        tool(
            "cancel_order", W, order_id=S, reason={"type": "string", "enum": ["no_longer_needed"]}
        ),
        tool("exchange_items", W, order_id=S, item_ids=ARR, new_item_ids=ARR),
        tool("update_profile", W, user_id=S, address=S),
        tool("add_to_cart", W, cart_id=S, sku=S, qty={"type": "integer"}, note=S),
        tool(
            "checkout",
            W,
            cart_id=S,
            payment_method_id=S,
            ship_date={"type": "string", "format": "date"},
        ),
    ],
    edges=[
        ToolEdge(
            source="add_to_cart",
            target="checkout",
            out_field="cart_id",
            in_param="cart_id",
            score=1.0,
            origin=EdgeOrigin.DECLARED,
        )
    ],
)
REFUND = {"order_id": "#W1", "item_id": "i9", "method": "card_1", "amount": 54.2}
INITIAL = EnvState(
    state_hash="init",
    tables={"orders": [{"id": "#W1", "status": "delivered"}], "refunds": []},
)
GOLD_FINAL = EnvState(
    state_hash="gold",
    tables={"orders": [{"id": "#W1", "status": "delivered"}], "refunds": [REFUND]},
)
RETURN_ARGS = {
    "order_id": "#W1",
    "item_ids": ["i9"],
    "payment_method_id": "card_1",
    "reason": "it arrived cracked",
}
GOLD_PATH = [
    GoldCall(
        tool="find_user",
        arguments={"email": "mia.k@example.com"},
        observation={"user_id": "u1", "default_payment_id": "card_1"},
    ),
    GoldCall(tool="list_orders", arguments={"user_id": "u1"}, observation=[{"order_id": "#W1"}]),
    GoldCall(
        tool="get_order",
        arguments={"order_id": "#W1"},
        observation={"status": "delivered", "total": 54.2},
    ),
    GoldCall(tool="return_items", arguments=RETURN_ARGS, observation={"refund_amount": 54.2}),
]


def test_return_task_constraints() -> None:
    cs = derive_constraints(GOLD_PATH, GOLD_FINAL, SHOP, ["54.20"], initial_state=INITIAL)
    assert cs == [
        FinalState(
            gold_hash="gold", gold_tables={"refunds": [REFUND]}, derived_from="gold_run.final_state"
        ),
        ToolCalled(
            call=CallPattern(
                tool="return_items",
                matchers={"order_id": "#W1", "item_ids": ["i9"], "payment_method_id": "card_1"},
            ),
            derived_from="gold_run.calls[3]",
        ),
        ToolNotCalled(
            call=CallPattern(tool="cancel_order", matchers={"order_id": "#W1"}),
            derived_from="cluster.write_tools",
        ),
        ToolNotCalled(
            call=CallPattern(tool="exchange_items", matchers={"order_id": "#W1"}),
            derived_from="cluster.write_tools",
        ),
        AnswerContains(values=["54.20"], hard=False, derived_from="blueprint.answer_values"),
        MaxCalls(n=8, hard=False, derived_from="gold_run.length"),
    ]
    assert lint_constraints(cs, INITIAL, SHOP.tools) == []


def record(tool: str, args: dict, cls: ObsClass = ObsClass.OK, obs: str = "") -> ToolCallRecord:
    return ToolCallRecord(
        call_id=tool,
        tool=tool,
        raw_arguments=json.dumps(args),
        arguments=args,
        obs_class=cls,
        observation=obs,
    )


def trajectory(calls: list[ToolCallRecord], answer: str) -> Trajectory:
    # the conversation the calls were made in (the verifier's hygiene reads it too)
    messages = [Message(role=MessageRole.USER, content="hi")]
    for c in calls:
        fn = FunctionCall(name=c.tool, arguments=c.raw_arguments)
        messages += [
            Message(role=MessageRole.ASSISTANT, tool_calls=[ToolCall(id=c.call_id, function=fn)]),
            Message(role=MessageRole.TOOL, content=c.observation, tool_call_id=c.call_id),
        ]
    messages.append(Message(role=MessageRole.ASSISTANT, content=answer))
    return Trajectory(
        trajectory_id="t",
        run_id="r",
        blueprint_id="b",
        tree_id="tr",
        leaf_node_id="n",
        cluster_id="shop",
        messages=messages,
        tools=[t.to_openai() for t in SHOP.tools],
        calls=calls,
        final_answer=answer,
        termination=Termination.USER_STOP,
    )


def test_derived_constraints_judge_rollouts() -> None:
    cs = derive_constraints(GOLD_PATH, GOLD_FINAL, SHOP, ["54.20"], initial_state=INITIAL)
    reads = [record(c.tool, dict(c.arguments)) for c in GOLD_PATH[:3]]
    # the refund the answer states is the one the return reported (an answer must be grounded)
    refund = record("return_items", {**RETURN_ARGS, "reason": "Cracked!"}, obs='{"amount": 54.2}')
    good = trajectory([*reads, refund], "Refund: $54.20")
    v = verify(good, cs, GOLD_FINAL)
    assert v.passed and reward(v) == 1.0
    # a rollout that cancels instead: wrong state, no return, forbidden call
    bad = trajectory([*reads, record("cancel_order", {"order_id": "#W1"})], "Cancelled.")
    cancelled = EnvState(
        state_hash="cx", tables={"orders": [{"id": "#W1", "status": "cancelled"}], "refunds": []}
    )
    v = verify(bad, cs, cancelled)
    assert [r.kind for r in v.results if not r.passed] == [
        "final_state",
        "tool_called",
        "tool_not_called",
        "answer_contains",
    ]
    assert v.state_diff == {"refunds": {"added": [], "removed": [REFUND]}}
    assert reward(v) == 0.0


def test_cart_chain_orders_and_repeats() -> None:
    path = [
        GoldCall(
            tool="add_to_cart", arguments={"cart_id": "c1", "sku": "M-1", "qty": 2, "note": "gift"}
        ),
        GoldCall(tool="add_to_cart", arguments={"cart_id": "c1", "sku": "T-4", "qty": 1}),
        GoldCall(tool="add_to_cart", arguments={"cart_id": "c1", "sku": "T-4", "qty": 1}),
        GoldCall(
            tool="checkout",
            arguments={"cart_id": "c1", "payment_method_id": "card_1", "ship_date": "2025-03-01"},
        ),
    ]
    cs = derive_constraints(path, GOLD_FINAL, SHOP, [])
    called = [c for c in cs if isinstance(c, ToolCalled)]
    assert [(c.call.tool, c.call.matchers, c.min_count) for c in called] == [
        ("add_to_cart", {"cart_id": "c1", "sku": "M-1", "qty": 2}, 1),
        ("add_to_cart", {"cart_id": "c1", "sku": "T-4", "qty": 1}, 2),
        (
            "checkout",
            {"cart_id": "c1", "payment_method_id": "card_1", "ship_date": "2025-03-01"},
            1,
        ),
    ]
    orders = [(o.first.matchers.get("sku"), o.then.tool) for o in cs if isinstance(o, Order)]
    assert orders == [("M-1", "checkout"), ("T-4", "checkout")]  # adds among themselves: free
    final = cs[0]
    assert (
        isinstance(final, FinalState) and final.gold_tables == GOLD_FINAL.tables
    )  # no initial state
    assert not any(isinstance(c, ToolNotCalled) for c in cs)  # no other write acts on a cart
    assert [c for c in cs if isinstance(c, MaxCalls)][0].n == max_calls_for(4) == 8


def test_read_only_task_answers_hard_and_forbids_writes_on_the_entity() -> None:
    path = GOLD_PATH[:3]
    cs = derive_constraints(path, INITIAL, SHOP, [])
    assert not any(isinstance(c, FinalState) for c in cs)
    answer = [c for c in cs if isinstance(c, AnswerContains)]
    assert answer == [
        AnswerContains(values=[54.2], hard=True, derived_from="gold_run.last_observation")
    ]
    forbidden = {
        (c.call.tool, tuple(c.call.matchers.items())) for c in cs if isinstance(c, ToolNotCalled)
    }
    assert forbidden == {
        ("update_profile", (("user_id", "u1"),)),
        ("return_items", (("order_id", "#W1"),)),
        ("cancel_order", (("order_id", "#W1"),)),
        ("exchange_items", (("order_id", "#W1"),)),
    }
    assert lint_constraints(cs, INITIAL, SHOP.tools) == []
    asked = derive_constraints(path, INITIAL, SHOP, ["delivered", None, "delivered", True])
    assert [c.values for c in asked if isinstance(c, AnswerContains)] == [["delivered"]]


def test_read_only_without_answer_is_rejected_by_lint() -> None:
    path = [
        GoldCall(
            tool="list_orders", arguments={"user_id": "u1"}, observation=[{"id": 1}, {"id": 2}]
        )
    ]
    cs = derive_constraints(path, INITIAL, SHOP, [])
    assert not any(isinstance(c, AnswerContains) for c in cs)
    assert "checks no outcome" in lint_constraints(cs, INITIAL, SHOP.tools)


def test_outside_server_uses_the_call_trace_and_skips_minted_ids() -> None:
    cal = ToolCluster(
        cluster_id="outside-cal",
        domain=Domain.PRODUCTIVITY,
        server=ServerSpec(kind=ServerKind.STDIO, command=["cal-mcp"]),
        state_readable=False,
        source="outside",
        tools=[
            tool("create_event", W, title=S, date={"type": "string"}, duration_min=NUM),
            tool("invite", W, event_id=S, email=S),
            tool("delete_event", W, event_id=S),
        ],
    )
    path = [
        GoldCall(
            tool="create_event",
            arguments={"title": "Standup", "date": "2025-03-01", "duration_min": 15},
            observation='{"event_id": "ev_8f2a"}',
        ),
        GoldCall(
            tool="invite",
            arguments={"event_id": "ev_8f2a", "email": "bo@example.com"},
            observation="ok",
        ),
    ]
    unreadable = EnvState(state_hash="", readable=False)
    cs = derive_constraints(path, unreadable, cal, [])
    assert not any(isinstance(c, FinalState) for c in cs)
    called = [c.call for c in cs if isinstance(c, ToolCalled)]
    assert called == [
        CallPattern(tool="create_event", matchers={"date": "2025-03-01", "duration_min": 15}),
        CallPattern(tool="invite", matchers={"email": "bo@example.com"}),  # ev_8f2a was minted
    ]
    assert [(o.first.tool, o.then.tool) for o in cs if isinstance(o, Order)] == [
        ("create_event", "invite")
    ]
    assert lint_constraints(cs, unreadable, cal.tools) == []


def test_failed_gold_calls_are_ignored() -> None:
    path = [
        GoldCall(tool="cancel_order", arguments={"order_id": "#W0"}, is_error=True),
        GoldCall(tool="return_items", arguments=RETURN_ARGS),
    ]
    cs = derive_constraints(path, GOLD_FINAL, SHOP, [])
    assert [c.call.tool for c in cs if isinstance(c, ToolCalled)] == ["return_items"]
    assert [c.n for c in cs if isinstance(c, MaxCalls)] == [max_calls_for(2)]


def test_helpers() -> None:
    assert deciding_fields({"sku": "M-1", "note": "hi", "gift": True, "qty": 0}) == {
        "sku": "M-1",
        "qty": 0,
    }
    assert deciding_fields({"order_id": "#W1"}, skip_values=frozenset({'"#W1"'})) == {}
    assert salient_value({"a": {"status": "x"}, "b": {"status": "y"}}) is None
    assert salient_value({"order": {"id": "#W1", "status": "shipped"}}) == "shipped"
    assert salient_value('"Sunny, 21C"') == "Sunny, 21C"
    assert salient_value({"user_id": "u1"}) == "u1"
    assert salient_value(True) is None
    assert changed_tables(GOLD_FINAL, INITIAL) == {"refunds": [REFUND]}


def test_docstring_examples() -> None:
    import doctest

    from trajsynth.planning import constraints as module

    result = doctest.testmod(module)
    assert result.attempted > 0 and result.failed == 0


def test_an_outside_write_its_probes_cannot_see_is_checked_by_its_calls() -> None:
    """server-everything's toggle-simulated-logging changes nothing a read probe shows: the
    final-state check would equal the initial state (a lint failure), so the calls decide."""
    toggles = ToolCluster(
        cluster_id="outside-toggle",
        domain=Domain.PRODUCTIVITY,
        server=ServerSpec(kind=ServerKind.STDIO, command=["everything"]),
        state_readable=True,
        source="outside",
        tools=[tool("toggle_logging", W, level={"type": "string", "enum": ["debug", "info"]})],
    )
    probed = EnvState(state_hash="s0", readable=True)
    path = [GoldCall(tool="toggle_logging", arguments={"level": "debug"}, observation="on")]
    cs = derive_constraints(path, probed, toggles, [], initial_state=probed)
    assert not any(isinstance(c, FinalState) for c in cs)
    assert [c.call for c in cs if isinstance(c, ToolCalled)] == [
        CallPattern(tool="toggle_logging", matchers={"level": "debug"})
    ]
    assert lint_constraints(cs, probed, toggles.tools) == []
    seen = EnvState(state_hash="s1", readable=True)  # a write the probes do see keeps it
    assert any(
        isinstance(c, FinalState)
        for c in derive_constraints(path, seen, toggles, [], initial_state=probed)
    )


def test_the_answer_of_a_write_comes_from_the_write_not_a_trailing_unrelated_read() -> None:
    """A path that returns items and then reads the user's profile: the value the user is
    told is the refund, not the profile's balance; a read-back of the write's own order is
    what the answer reports."""
    probe = GoldCall(
        tool="get_user", arguments={"user_id": "u9"}, observation={"balance": 17.0, "name": "Ann"}
    )
    cs = derive_constraints([*GOLD_PATH, probe], GOLD_FINAL, SHOP, [], initial_state=INITIAL)
    (answer,) = [c for c in cs if isinstance(c, AnswerContains)]
    assert answer.values == [54.2] and not answer.hard
    back = GoldCall(
        tool="get_order", arguments={"order_id": "#W1"}, observation={"status": "returned"}
    )
    cs = derive_constraints([*GOLD_PATH, back], GOLD_FINAL, SHOP, [], initial_state=INITIAL)
    (answer,) = [c for c in cs if isinstance(c, AnswerContains)]
    assert answer.values == ["returned"]


def _reading(tool_name: str, arguments: dict, observation: dict, answer: str) -> Trajectory:
    """One read with ``arguments`` whose result is ``observation``, closed by ``answer``."""
    args = json.dumps(arguments)
    call = ToolCall(id="c0", function=FunctionCall(name=tool_name, arguments=args))
    return Trajectory(
        trajectory_id="t",
        run_id="r",
        blueprint_id="b",
        tree_id="t",
        leaf_node_id="l",
        cluster_id="clock",
        messages=[
            Message(role=MessageRole.USER, content="What time is it in Tokyo?"),
            Message(role=MessageRole.ASSISTANT, tool_calls=[call]),
            Message(role=MessageRole.TOOL, tool_call_id="c0", content=json.dumps(observation)),
            Message(role=MessageRole.ASSISTANT, content=answer),
        ],
        tools=[t.to_openai() for t in CLOCK.tools],
        calls=[
            ToolCallRecord(
                call_id="c0",
                tool=tool_name,
                raw_arguments=args,
                arguments=arguments,
                observation=json.dumps(observation),
                obs_class=ObsClass.OK,
            )
        ],
        final_answer=answer,
        termination=Termination.ASSISTANT_DONE,
    )


def _clock_reading(timezone: str, stamp: str, answer: str) -> Trajectory:
    return _reading("get_current_time", {"timezone": timezone}, {"datetime": stamp}, answer)


CLOCK = ToolCluster(
    cluster_id="clock",
    domain=Domain.OTHER,
    source="outside",
    server=ServerSpec(kind=ServerKind.STDIO, command=["clock"]),
    tools=[
        tool("get_current_time", R, timezone=S),
        tool("convert_time", R, source_timezone=S, time=S, target_timezone=S),
    ],
)


def test_an_observed_answer_is_held_to_the_read_the_gold_run_made() -> None:
    """A clock's answer is checked against the episode's own reading; a reading of another
    timezone states its own time truthfully, so only a check on the read's arguments tells it
    from the asked one. Control: the answer check alone passes it."""
    from trajsynth.schemas import ObservedField

    gold = GoldCall(
        tool="get_current_time",
        arguments={"timezone": "Asia/Tokyo"},
        observation={"datetime": "2026-11-29T13:32:05+09:00"},
    )
    observed = ObservedField(tool="get_current_time", path=["datetime"])
    state = EnvState(state_hash="s", readable=False)
    cs = derive_constraints(
        [gold], state, CLOCK, ["2026-11-29T13:32:05+09:00"], answer_observed=observed
    )
    (called,) = [c for c in cs if isinstance(c, ToolCalled)]
    assert called.call == CallPattern(tool="get_current_time", matchers={"timezone": "Asia/Tokyo"})
    assert lint_constraints(cs, state, CLOCK.tools) == []
    tokyo = _clock_reading(
        "Asia/Tokyo", "2026-11-29T14:00:00+09:00", "It is 2026-11-29T14:00:00+09:00."
    )
    london = _clock_reading(
        "Europe/London", "2026-11-29T05:00:00+00:00", "It is 2026-11-29T05:00:00+00:00."
    )
    assert verify(tokyo, cs, state).passed
    assert not verify(london, cs, state).constraints_passed
    answer_only = [c for c in cs if not isinstance(c, ToolCalled)]
    assert verify(london, answer_only, state).constraints_passed  # the hole it closes


def test_two_readings_the_other_one_stated_fails() -> None:
    """The reading is taken from the call made with the asked arguments: a run that reads
    Tokyo, then London, and states London's time fails. Control: an observed field without
    matchers (as stored before them) reads the last call of the tool: it passes the wrong run
    and fails the right one."""
    gold = GoldCall(
        tool="get_current_time",
        arguments={"timezone": "Asia/Tokyo"},
        observation={"datetime": "2026-11-29T13:32:05+09:00"},
    )
    asked = ObservedField(
        tool="get_current_time", path=["datetime"], matchers={"timezone": "Asia/Tokyo"}
    )
    state = EnvState(state_hash="s", readable=False)
    tokyo = _clock_reading("Asia/Tokyo", "2026-11-29T14:00:00+09:00", "")
    london = _clock_reading("Europe/London", "2026-11-29T05:00:00+00:00", "")
    both = london.model_copy(
        update={
            "calls": [tokyo.calls[0], london.calls[0].model_copy(update={"call_id": "c1"})],
            "final_answer": "It is 2026-11-29T05:00:00+00:00.",
        }
    )
    right = both.model_copy(update={"final_answer": "It is 2026-11-29T14:00:00+09:00."})
    for observed, wrong_passes in (
        (asked, False),
        (asked.model_copy(update={"matchers": {}}), True),
    ):
        cs = derive_constraints(
            [gold], state, CLOCK, ["2026-11-29T13:32:05+09:00"], answer_observed=observed
        )
        assert verify(both, cs, state).constraints_passed is wrong_passes
        assert verify(right, cs, state).constraints_passed is not wrong_passes


def test_an_outside_read_is_held_to_its_arguments_when_the_answer_is_the_same_for_others() -> None:
    """server-time's ``convert_time`` answers the time difference, "+14.0h" for 09:15 as for
    10:15: a read of another time states its own result and the asked value. Control: the
    answer check alone passes it."""
    asked = {
        "source_timezone": "America/New_York",
        "time": "09:15",
        "target_timezone": "Asia/Tokyo",
    }
    result = {"time_difference": "+14.0h", "target": {"datetime": "2026-11-29T23:15:00+09:00"}}
    gold = GoldCall(tool="convert_time", arguments=asked, observation=result)
    state = EnvState(state_hash="s", readable=False)
    cs = derive_constraints([gold], state, CLOCK, ["+14.0h"])
    (called,) = [c for c in cs if isinstance(c, ToolCalled)]
    assert called.call == CallPattern(tool="convert_time", matchers=asked)
    later = {**asked, "time": "10:15"}
    other = {**result, "target": {"datetime": "2026-11-30T00:15:00+09:00"}}
    wrong = _reading("convert_time", later, other, "+14.0h: 2026-11-30T00:15:00+09:00")
    right = _reading("convert_time", asked, result, "+14.0h: 2026-11-29T23:15:00+09:00")
    assert verify(right, cs, state).passed
    assert not verify(wrong, cs, state).constraints_passed
    answer_only = [c for c in cs if not isinstance(c, ToolCalled)]
    assert verify(wrong, answer_only, state).constraints_passed  # the hole it closes
    bundled = derive_constraints([gold], state, CLOCK.model_copy(update={"source": "bundled"}),
                                 ["+14.0h"])  # fmt: skip
    assert not any(isinstance(c, ToolCalled) for c in bundled)  # a bundled read: as before


ADDER = ToolCluster(
    cluster_id="clock",
    domain=Domain.OTHER,
    source="outside",
    server=ServerSpec(kind=ServerKind.STDIO, command=["adder"]),
    tools=[tool("get-sum", R, a=NUM, b=NUM)],
)


def test_a_sentence_result_asks_for_the_number_it_states() -> None:
    """server-everything's ``get-sum`` answers "The sum of 17 and 25 is 42.": the question
    asks for 42, so a right answer in other words passes and a wrong sum fails. Control: the
    sentence as the value (as derived before) fails the right answer in other words."""
    sentence = "The sum of 17 and 25 is 42."
    gold = GoldCall(tool="get-sum", arguments={"a": 17, "b": 25}, observation=sentence)
    state = EnvState(state_hash="s", readable=False)
    cs = derive_constraints([gold], state, ADDER, [])
    (answer,) = [c for c in cs if isinstance(c, AnswerContains)]
    assert answer.values == [42] and answer.hard

    def run(said: str) -> Trajectory:
        t = _reading("get-sum", {"a": 17, "b": 25}, {}, said)
        record = t.calls[0].model_copy(update={"observation": sentence})
        return t.model_copy(update={"calls": [record], "tools": [ADDER.tools[0].to_openai()]})

    assert verify(run("17 plus 25 makes 42."), cs, state).constraints_passed
    assert not verify(run("17 plus 25 makes 43."), cs, state).constraints_passed
    whole = [c if not isinstance(c, AnswerContains) else c.model_copy(update={"values": [sentence]})
             for c in cs]  # fmt: skip
    assert not verify(run("17 plus 25 makes 42."), whole, state).constraints_passed
