"""The planner's checks of a gold run, on calls written out as the audit set stored them."""

from __future__ import annotations

from trajsynth.agents.admission import (
    LOOK_FIRST_SOURCE,
    Refusal,
    empty_read,
    first_of_many,
    look_first,
    noop_write,
    two_users,
    unrelated_reads,
)
from trajsynth.schemas import (
    AnswerContains,
    Blueprint,
    GoldCall,
    GoldRun,
    Order,
    PlannedCall,
    RefArg,
    SlotArg,
)

TRAVEL_WRITES = {"book_flight", "change_seat", "cancel_booking"}


def _call(tool: str, observation: object = None, **arguments: object) -> GoldCall:
    return GoldCall(tool=tool, arguments=arguments, observation=observation)  # type: ignore[arg-type]


BOOKING = {"booking_id": "BK1007", "user_id": "amara", "flight_id": "TS210", "seat": "10D"}


def test_a_seat_changed_to_the_seat_just_booked_is_a_noop_write() -> None:
    calls = [
        _call("book_flight", BOOKING, flight_id="TS210", seat="10D", user_id="amara"),
        _call("change_seat", BOOKING, booking_id="BK1007", seat="10D"),
    ]
    refused = noop_write(calls, TRAVEL_WRITES)
    assert refused is not None and refused.reason == "noop_write"
    assert refused.tool == "change_seat" and "seat=10d" in refused.detail


def test_a_seat_changed_to_another_seat_is_kept() -> None:
    moved = {**BOOKING, "seat": "11A"}
    calls = [
        _call("book_flight", BOOKING, flight_id="TS210", seat="10D", user_id="amara"),
        _call("change_seat", moved, booking_id="BK1007", seat="11A"),
    ]
    assert noop_write(calls, TRAVEL_WRITES) is None


def test_an_event_created_like_one_just_cancelled_is_another_record() -> None:
    """Same title, date and times, another event id: a new record, not a no-op."""
    old = {"event_id": "EV1002", "title": "1:1", "date": "2025-06-02", "status": "cancelled"}
    new = {"event_id": "EV1011", "title": "1:1", "date": "2025-06-02", "status": "confirmed"}
    calls = [
        _call("cancel_event", old, event_id="EV1002", user_id="priya"),
        _call("create_event", new, title="1:1", date="2025-06-02"),
    ]
    assert noop_write(calls, {"cancel_event", "create_event"}) is None


def test_adding_to_a_quantity_already_shown_is_not_a_noop() -> None:
    before = {"cart": [{"product_id": "P1", "quantity": 1, "cart_id": "C1"}]}
    after = {"cart": [{"product_id": "P1", "quantity": 2, "cart_id": "C1"}]}
    calls = [
        _call("get_cart", before, user_id="u1"),
        _call("add_to_cart", after, product_id="P1", quantity=1),
    ]
    assert noop_write(calls, {"add_to_cart"}) is None


def test_a_path_that_acts_as_two_users_is_refused() -> None:
    calls = [
        _call("respond_to_invitation", {}, user_id="hannah", event_id="EV1010"),
        _call("send_message", {}, user_id="daniel", to_email="hannah@acme.io"),
    ]
    refused = two_users(calls)
    assert refused is not None and "acts as 2 users (daniel, hannah)" in refused.detail
    assert two_users(calls[:1]) is None


CONVERT = PlannedCall(
    tool="convert_time",
    args={"source_timezone": SlotArg(name="source"), "time": SlotArg(name="time")},
)


def test_a_last_read_fed_only_what_the_user_stated_is_unrelated() -> None:
    """get_current_time takes its zone from convert_time's result, but the user stated that
    zone: the last read answers another question than the one asked."""
    now = PlannedCall(
        tool="get_current_time", args={"timezone": RefArg(step=0, field="source.timezone")}
    )
    calls = [
        _call("convert_time", {"source": {"timezone": "Australia/Sydney"}}),
        _call("get_current_time", {}, timezone="Australia/Sydney"),
    ]
    slots = {"source": "Australia/Sydney", "time": "09:15"}
    refused = unrelated_reads([CONVERT, now], 0, calls, slots)
    assert refused is not None and refused.reason == "unrelated_reads"


def test_a_last_read_fed_a_value_the_user_did_not_know_is_kept() -> None:
    find = PlannedCall(tool="find_user", args={"query": SlotArg(name="query")})
    details = PlannedCall(
        tool="get_user", args={"user_id": RefArg(step=0, field="users[0].user_id")}
    )
    calls = [
        _call("find_user", {"users": [{"user_id": "yuki_tanaka"}]}, query="Yuki Tanaka"),
        _call("get_user", {"job_title": "Staff Engineer"}, user_id="yuki_tanaka"),
    ]
    assert unrelated_reads([find, details], 0, calls, {"query": "Yuki Tanaka"}) is None
    assert unrelated_reads([find, details], 1, calls, {"query": "Yuki Tanaka"}) is None


def test_look_first_orders_the_last_read_of_the_user_s_records_before_the_write() -> None:
    calls = [
        _call("search_flights", {}, origin="LAX", destination="ORD"),
        _call("list_bookings", {}, user_id="diego"),
        _call("get_seat_map", {}, flight_id="TS331"),
        _call("book_flight", {}, flight_id="TS331", user_id="diego"),
    ]
    constraints = look_first(calls, TRAVEL_WRITES, [])
    assert isinstance(constraints, list)
    (order,) = constraints
    assert isinstance(order, Order) and order.derived_from == LOOK_FIRST_SOURCE
    assert (order.first.tool, order.then.tool) == ("list_bookings", "book_flight")
    again = look_first(calls, TRAVEL_WRITES, constraints)
    assert again == constraints  # applied twice, one order


def test_look_first_refuses_a_path_that_reads_nothing_of_the_user_s() -> None:
    """A flight search and a seat map are not "what I have"."""
    calls = [
        _call("search_flights", {}, origin="LAX", destination="ORD"),
        _call("get_seat_map", {}, flight_id="TS331"),
        _call("book_flight", {}, flight_id="TS331", user_id="diego"),
    ]
    refused = look_first(calls, TRAVEL_WRITES, [])
    assert isinstance(refused, Refusal) and refused.reason == "mode_unrealised"
    assert "nothing of the user's" in refused.detail


def test_look_first_accepts_a_read_of_a_whole_one_user_service() -> None:
    calls = [_call("read_graph", {}), _call("delete_entities", {}, entityNames=["x"])]
    constraints = look_first(calls, {"delete_entities"}, [])
    assert isinstance(constraints, list) and constraints[0].first.tool == "read_graph"


def test_a_read_that_finds_nothing_for_a_name_nothing_else_uses_is_refused() -> None:
    """A node 'example' searched for and not found: the request is about nothing."""
    calls = [
        _call("create_relations", [{"from": "a", "to": "b"}], relations=[{"from": "a"}]),
        _call("search_nodes", {"entities": [], "relations": []}, query="example"),
    ]
    refused = empty_read(calls, {"create_relations"})
    assert refused is not None and refused.reason == "empty_read" and "'example'" in refused.detail


def test_a_look_before_creating_what_it_looked_for_is_kept() -> None:
    """describe_table('notes') finds nothing, then the path creates notes; a SELECT that
    finds nothing names no thing."""
    calls = [
        _call("read_query", [], query="SELECT name FROM sqlite_master WHERE type = 'table'"),
        _call("describe_table", [], table_name="notes"),
        _call("create_table", "ok", query="CREATE TABLE IF NOT EXISTS notes (id INTEGER)"),
    ]
    assert empty_read(calls, {"create_table"}) is None


def test_a_write_that_sets_what_the_initial_state_holds_is_a_noop() -> None:
    """The result names the record by its id and shows the values set; the initial state's
    row of that record already held them (the actor, ``user_id``, is not a field of it)."""
    moved = {"event_id": "EV1002", "date": "2025-06-02", "start_time": "10:00", "status": "ok"}
    calls = [_call("reschedule_event", moved, user_id="priya", event_id="EV1002",
                   date="2025-06-02", start_time="10:00")]  # fmt: skip
    rows = [{"event_id": "EV1002", "date": "2025-06-02", "start_time": "10:00"}]
    refused = noop_write(calls, {"reschedule_event"}, rows)
    assert refused is not None and "the initial state" in refused.detail
    other = [{"event_id": "EV1002", "date": "2025-06-02", "start_time": "09:00"}]
    assert noop_write(calls, {"reschedule_event"}, other) is None
    assert noop_write(calls, {"reschedule_event"}) is None


def test_an_answer_from_the_first_of_several_matching_records_is_refused() -> None:
    """A stored blueprint that asked for the first event's start time of a day with two is
    not what the planner asks today (it counts them)."""
    events = [
        {"event_id": "EV1001", "date": "2025-06-02", "start_time": "09:00"},
        {"event_id": "EV1003", "date": "2025-06-02", "start_time": "14:00"},
    ]
    args = {"user_id": "hannah", "date": "2025-06-02"}
    call = _call("list_events", {**args, "events": events}, **args)
    step = PlannedCall(tool="list_events", args={k: SlotArg(name=k) for k in args})
    blueprint = Blueprint.model_construct(
        n_writes=0, slots=args, tool_path=[step],
        gold_run=GoldRun.model_construct(calls=[call]),
        constraints=[AnswerContains(values=["09:00"], derived_from="blueprint.answer_values")],
    )  # fmt: skip
    refused = first_of_many(blueprint)
    assert refused is not None and "first of 2 records" in refused.detail
    one = blueprint.model_copy(
        update={"gold_run": GoldRun.model_construct(calls=[
            _call("list_events", {**args, "events": events[:1]}, **args)])}
    )  # fmt: skip
    assert first_of_many(one) is None


def test_a_read_back_that_finds_nothing_of_what_a_write_made_is_refused() -> None:
    """A relation between entities that do not exist: created, yet open_nodes on its end
    finds nothing. After a delete, finding nothing is the delete confirmed, and kept."""
    relation = {"from": "notes", "to": "notes", "relationType": "note"}
    made = [
        _call("create_relations", [relation], relations=[relation]),
        _call("open_nodes", {"entities": [], "relations": []}, names=["notes"]),
    ]
    refused = empty_read(made, {"create_relations"})
    assert refused is not None and "finds nothing of what the write made" in refused.detail
    deleted = [
        _call("delete_entities", "Entities deleted successfully", entityNames=["notes"]),
        _call("open_nodes", {"entities": [], "relations": []}, names=["notes"]),
    ]
    assert empty_read(deleted, {"delete_entities"}) is None
