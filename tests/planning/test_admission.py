"""The planner's checks of a gold run, on calls written out as the audit set stored them."""

from __future__ import annotations

from trajsynth.planning.admission import (
    LOOK_FIRST_SOURCE,
    Refusal,
    copied_status,
    copy_over,
    creates_existing,
    empty_read,
    first_of_many,
    look_first,
    noop_write,
    repeated_call,
    review_blueprint,
    same_ends,
    two_users,
    unrelated_reads,
)
from trajsynth.schemas import (
    AnswerContains,
    Blueprint,
    Cell,
    GoldCall,
    GoldRun,
    Order,
    PlannedCall,
    ReasoningMode,
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


def test_a_read_made_twice_with_the_same_values_is_refused() -> None:
    """server-everything's planner once kept 'get the sum of 1 and 1, then get the sum of 1
    and 1'."""
    calls = [_call("get-sum", "3", a=1, b=2), _call("get-sum", "3", a=1, b=2)]
    refused = repeated_call(calls, set())
    assert refused is not None and refused.reason == "repeated_call"
    assert refused.tool == "get-sum" and '{"a": 1, "b": 2}' in refused.detail
    assert repeated_call([calls[0], _call("get-sum", "4", a=2, b=2)], set()) is None


def test_a_read_made_again_after_a_write_is_a_read_back() -> None:
    read = _call("read_file", "milk", path="docs/groceries.txt")
    write = _call("write_file", "ok", path="docs/groceries.txt", content="eggs")
    assert repeated_call([read, write, read], {"write_file"}) is None
    refused = repeated_call([read, write, write], {"write_file"})
    assert refused is not None and refused.tool == "write_file"


def test_a_conversion_to_its_own_zone_or_a_flight_to_its_own_airport_is_refused() -> None:
    convert = _call(
        "convert_time",
        {},
        source_timezone="America/New_York",
        time="09:16",
        target_timezone="America/New_York",
    )
    refused = same_ends([convert])
    assert refused is not None and refused.reason == "same_ends"
    assert "source_timezone and target_timezone are both 'America/New_York'" in refused.detail
    flight = _call("search_flights", [], origin="SFO", destination="SFO", date="2025-06-02")
    assert same_ends([flight]) is not None
    other = _call("convert_time", {}, source_timezone="Asia/Tokyo", target_timezone="UTC")
    assert same_ends([other]) is None


def test_a_range_that_starts_and_ends_on_one_day_is_kept() -> None:
    day = _call("list_events", [], from_date="2025-06-02", to_date="2025-06-02")
    rows = _call("read_rows", [], from_row=3, to_row=3)
    assert same_ends([day, rows]) is None


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


CODE_WRITES = {"write_file", "delete_file"}
README = "# inventory\n\nA tiny inventory helper. `inventory.py` reads `data/stock.csv`.\n"
LISTING = {"files": [{"path": "README.md", "size": 80}, {"path": "data/sales.csv", "size": 291}]}


def test_a_file_copied_over_another_that_existed_is_refused() -> None:
    """README.md's text written over data/sales.csv, which the listing showed: the task
    destroys the sales data, which no request asks for."""
    calls = [
        _call("list_files", LISTING),
        _call("read_file", {"path": "README.md", "content": README}, path="README.md"),
        _call("write_file", {"path": "data/sales.csv", "created": False},
              path="data/sales.csv", content=README),
    ]  # fmt: skip
    refused = copy_over(calls, CODE_WRITES)
    assert refused is not None and refused.reason == "copy_over" and refused.tool == "write_file"
    assert "path=data/sales.csv" in refused.detail and "path=README.md" in refused.detail
    # without the listing, the initial state's row shows the file existed
    rows = [{"path": "data/sales.csv", "content": "day,sku,qty\n"}]
    assert copy_over(calls[1:], CODE_WRITES, rows) is not None


def test_a_copy_to_a_new_file_or_an_edit_of_the_file_read_is_kept() -> None:
    """Controls: the same copy to a path nothing showed existing (a new file), and a write
    back to the file that was read."""
    read = _call("read_file", {"path": "README.md", "content": README}, path="README.md")
    new = [
        _call("list_files", LISTING),
        read,
        _call("write_file", {"path": "docs/README.md", "created": True},
              path="docs/README.md", content=README),
    ]  # fmt: skip
    assert copy_over(new, CODE_WRITES) is None
    edit = [read, _call("write_file", {"path": "README.md"}, path="README.md", content=README)]
    assert copy_over(edit, CODE_WRITES) is None
    # a short value (a status, a name) copied between records is no copied file
    status = [
        _call("list_files", LISTING),
        _call("read_file", {"path": "README.md", "status": "draft"}, path="README.md"),
        _call("write_file", {}, path="data/sales.csv", status="draft"),
    ]
    assert copy_over(status, CODE_WRITES) is None


def test_a_short_file_copied_over_another_is_refused() -> None:
    """A file's content is a body of text however short: server-filesystem's planner wrote
    the grocery list (17 characters) over the meeting notes, under the floor for names."""
    groceries = "milk\neggs\nbread\n"
    calls = [
        _call("list_directory", {"content": "[FILE] groceries.txt\n[FILE] meeting.txt"},
              path="docs"),
        _call("read_file", {"content": groceries}, path="docs/groceries.txt"),
        _call("write_file", {"content": "Successfully wrote to docs/meeting.txt"},
              path="docs/meeting.txt", content=groceries),
    ]  # fmt: skip
    refused = copy_over(calls, {"write_file"})
    assert refused is not None and "write_file(path=docs/meeting.txt)" in refused.detail
    # the control: the same copy to a new file
    calls[-1] = _call("write_file", {}, path="docs/shopping.txt", content=groceries)
    assert copy_over(calls, {"write_file"}) is None


MEETING = "Meeting at 10am with Sam about the budget.\n"
FS_WRITES = {"write_file", "edit_file", "move_file", "create_directory"}


def _copy_meeting_to(target: str, *before: GoldCall) -> list[GoldCall]:
    return [
        *before,
        _call("read_text_file", {"content": MEETING}, path="docs/meeting.txt"),
        _call("write_file", {"content": f"Successfully wrote to {target}"},
              path=target, content=MEETING),
    ]  # fmt: skip


def test_a_file_a_search_or_its_folder_listed_is_not_copied_over() -> None:
    """server-filesystem: a search answers absolute paths, a folder listing bare names, and
    either shows the file the write replaces."""
    search = _call(
        "search_files",
        {"content": "/work/docs/groceries.txt\n/work/docs/meeting.txt"},
        path="docs",
        pattern="*.txt",
    )
    refused = copy_over(_copy_meeting_to("docs/groceries.txt", search), FS_WRITES)
    assert refused is not None and "write_file(path=docs/groceries.txt)" in refused.detail
    probe = {
        "arguments": '{"path":"docs"}',
        "is_error": False,
        "result": {"content": "[FILE] groceries.txt\n[FILE] meeting.txt"},
    }
    assert copy_over(_copy_meeting_to("docs/groceries.txt"), FS_WRITES, [probe]) is not None


def test_a_copy_to_a_file_no_listing_shows_is_kept() -> None:
    """Controls: a new name in a listed folder, and a probe that failed to read the target."""
    listed = {
        "arguments": '{"path":"docs"}',
        "is_error": False,
        "result": {"content": "[FILE] groceries.txt\n[FILE] meeting.txt"},
    }
    failed = {
        "arguments": '{"path":"docs/notes.txt"}',
        "is_error": True,
        "result": {"content": "Error: ENOENT: no such file or directory"},
    }
    calls = _copy_meeting_to("docs/notes.txt")
    assert copy_over(calls, FS_WRITES, [listed, failed]) is None
    assert copy_over(_copy_meeting_to("docs/groceries-copy.txt"), FS_WRITES, [listed]) is None


def test_a_write_s_confirmation_is_no_value_to_write() -> None:
    """server-filesystem's planner once wrote "Successfully created directory ." into a note."""
    made = _call("create_directory", {"content": "Successfully created directory ."}, path=".")
    echo = _call(
        "write_file",
        {"content": "Successfully wrote to docs/meeting.txt"},
        path="docs/meeting.txt",
        content="Successfully created directory .",
    )
    refused = copied_status([made, echo], FS_WRITES)
    assert refused is not None and refused.reason == "copied_status"
    assert "is what create_directory answered" in refused.detail
    # controls: a field of the record a write returned is the next call's value honestly;
    # a read's text copied is copy_over's to judge
    event = {"event_id": "EV1011", "title": "Quarterly budget review"}
    made_event = _call("create_event", event, title="Quarterly budget review")
    invite = _call("send_message", {}, to_email="a@acme.io", subject="Quarterly budget review")
    assert copied_status([made_event, invite], {"create_event", "send_message"}) is None
    read = _call("read_file", {"content": "Successfully created directory ."}, path="a.txt")
    assert copied_status([read, echo], FS_WRITES) is None


def test_creating_a_folder_the_path_showed_existing_is_a_noop() -> None:
    """server-filesystem's ``create_directory(.)`` answers "Successfully created directory ."
    and changes nothing; so does creating ``docs`` once a listing of the work dir showed it,
    or once ``list_directory(docs)`` answered."""
    made = "Successfully created directory {}"
    for path in (".", "./", "/"):
        refused = creates_existing([_call("create_directory", made.format(path), path=path)],
                                   FS_WRITES)  # fmt: skip
        assert refused is not None and refused.reason == "noop_write", path
        assert "create_directory(path=" in refused.detail
    listed = _call("list_directory", "[DIR] docs\n[FILE] todo.txt", path=".")
    again = _call("create_directory", made.format("docs"), path="docs")
    assert creates_existing([listed, again], FS_WRITES) is not None
    opened = _call("list_directory", "[FILE] a.txt", path="docs")
    assert creates_existing([opened, again], FS_WRITES) is not None
    probe = {"arguments": {"path": "."}, "result": {"content": "[DIR] docs"}, "is_error": False}
    assert creates_existing([again], FS_WRITES, [probe]) is not None
    # controls: a new folder, a folder whose listing failed, a name that only starts like one
    # listed, and a tool that creates something else at a path it is given
    new = _call("create_directory", made.format("docs/2027"), path="docs/2027")
    assert creates_existing([opened, new], FS_WRITES) is None
    failed = GoldCall(tool="list_directory", arguments={"path": "docs"},
                      observation="ENOENT", is_error=True)  # fmt: skip
    assert creates_existing([failed, again], FS_WRITES) is None
    reports = _call("list_directory", "[FILE] reports_2024.txt", path="docs")
    assert creates_existing([reports, _call("create_directory", "ok", path="docs/reports")],
                            FS_WRITES) is None  # fmt: skip
    branch = _call("git_create_branch", "Created branch 'fix'", repo_path=".", branch_name="fix")
    assert creates_existing([branch], {"git_create_branch"}) is None
    # a file created where one was listed is overwritten (or refused), not left as it was
    made = _call("create_file", "Created docs/a.txt", path="docs/a.txt", content="Buy milk")
    assert creates_existing([opened, made], {"create_file"}) is None


def test_a_booking_is_not_the_fare_row_it_shares_a_flight_with() -> None:
    """The initial state's fare row shares ``flight_id`` with the new booking, not
    ``booking_id``: another kind of record, so booking that fare is no no-op."""
    booking = {"booking_id": "BK1007", "flight_id": "TS101", "fare_basis": "basic",
               "user_id": "elena", "status": "confirmed"}  # fmt: skip
    calls = [_call("book_flight", booking, flight_id="TS101", fare_basis="basic", user_id="elena")]
    fares = [{"flight_id": "TS101", "fare_basis": "basic", "price": 276.12}]
    assert noop_write(calls, TRAVEL_WRITES, fares) is None
    assert noop_write(calls, TRAVEL_WRITES, [booking]) is not None  # the same booking again


def _stored(goal: str, calls: list[GoldCall], writes: int = 1) -> Blueprint:
    return Blueprint.model_construct(
        n_writes=writes, slots={}, tool_path=[PlannedCall(tool=c.tool) for c in calls],
        gold_run=GoldRun.model_construct(calls=calls), constraints=[], goal=goal,
        cell=Cell.model_construct(target_mode=ReasoningMode.DIRECT_EXECUTE),
    )  # fmt: skip


def test_review_replays_a_reschedule_against_the_stored_initial_rows() -> None:
    """A stored blueprint's "move" to the time the event already has: refused once the
    audit set keeps the initial state's row, admitted without it or when the row differs."""
    moved = {"event_id": "EV1002", "date": "2025-06-02", "start_time": "10:00",
             "end_time": "10:30", "organizer_id": "priya"}  # fmt: skip
    calls = [_call("reschedule_event", moved, user_id="priya", event_id="EV1002",
                   date="2025-06-02", start_time="10:00", end_time="10:30")]  # fmt: skip
    blueprint = _stored("Please move an event: event id: EV1002; date: 2025-06-02.", calls)
    refused = review_blueprint(blueprint, {"reschedule_event"}, [{**moved, "status": "ok"}])
    assert isinstance(refused, Refusal) and refused.reason == "noop_write"
    assert "the initial state" in refused.detail
    assert isinstance(review_blueprint(blueprint, {"reschedule_event"}), Blueprint)
    earlier = [{**moved, "start_time": "09:00"}]
    assert isinstance(review_blueprint(blueprint, {"reschedule_event"}, earlier), Blueprint)


def test_review_refuses_words_with_two_values_under_one_label() -> None:
    calls = [_call("read_file", {"path": "a.md", "content": "x"}, path="a.md")]
    vague = _stored("Please read a text file: path: a.md; path: b.md.", calls, writes=0)
    refused = review_blueprint(vague, set())
    assert isinstance(refused, Refusal) and refused.reason == "words_check"
    plain = _stored("Please read a text file: path: a.md.", calls, writes=0)
    assert isinstance(review_blueprint(plain, set()), Blueprint)


def test_a_list_of_names_that_finds_nothing_is_an_empty_read() -> None:
    """open_nodes(names=["example"]) after a relation between other names: "example" is a
    node the graph does not have, listed or not; a name the write made is kept."""
    relation = {"from": "notes", "to": "notes", "relationType": "note"}
    calls = [
        _call("create_relations", [relation], relations=[relation]),
        _call("open_nodes", {"entities": [], "relations": []}, names=["example"]),
    ]
    refused = empty_read(calls, {"create_relations"})
    assert refused is not None and "names='example'" in refused.detail
    made = {"entities": [{"name": "notes"}], "relations": []}
    kept = [
        _call("create_entities", made["entities"], entities=[{"name": "notes"}]),
        _call("open_nodes", made, names=["notes"]),
    ]
    assert empty_read(kept, {"create_entities"}) is None
