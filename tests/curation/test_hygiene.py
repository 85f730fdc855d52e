"""Hygiene (curation.hygiene): a trajectory passes only when it is also a clean example.

Each check fails on a hand-built run that breaks it and holds on one that does not; the case
that started it (a delete, then model-written "delete_file returned" pseudo-calls and no
answer) passes its constraints and fails verification.
"""

from __future__ import annotations

import json

from trajsynth.curation.hygiene import registered_checks
from trajsynth.curation.verify import verify
from trajsynth.schemas import (
    AnswerContains,
    CallPattern,
    EnvState,
    FailureClass,
    FinalState,
    FunctionCall,
    Message,
    MessageRole,
    ObsClass,
    Termination,
    ToolCall,
    ToolCalled,
    ToolCallRecord,
    ToolSpec,
    Trajectory,
)

TOOLS = [
    ToolSpec(
        name="delete_file",
        input_schema={
            "type": "object",
            "properties": {"path": {"type": "string"}},
            "required": ["path"],
        },
    ),
    ToolSpec(
        name="book_room",
        input_schema={
            "type": "object",
            "properties": {"room": {"type": "string"}, "nights": {"type": "integer"}},
            "required": ["room", "nights"],
        },
    ),
    ToolSpec(name="list_files", input_schema={"type": "object", "properties": {}}),
]
GOLD = EnvState(state_hash="gold", tables={"files": []})
DELETE = [
    FinalState(gold_hash="gold"),
    ToolCalled(call=CallPattern(tool="delete_file", matchers={"path": "README.md"})),
]


def _call(i: int, tool: str, args: dict | str, obs: str = '{"ok": true}', *, error: bool = False):
    raw = args if isinstance(args, str) else json.dumps(args)
    parsed = None if isinstance(args, str) else args
    return ToolCallRecord(
        call_id=f"call_{i}",
        tool=tool,
        raw_arguments=raw,
        arguments=parsed,
        observation=obs,
        obs_class=ObsClass.ERROR if error else ObsClass.OK,
        failure_class=FailureClass.MODEL if error else None,
    )


def run(
    calls: list[ToolCallRecord],
    answer: str | None = "Done: README.md is deleted.",
    *,
    user: str = "Please delete README.md.",
    closing: str | None = None,
    termination: Termination = Termination.ASSISTANT_DONE,
    ids: list[str] | None = None,
    drop_result: bool = False,
) -> Trajectory:
    """A conversation: the user's goal, each call and its result, then the answer."""
    messages = [Message(role=MessageRole.USER, content=user)]
    for k, c in enumerate(calls):
        cid = ids[k] if ids else c.call_id
        fn = FunctionCall(name=c.tool, arguments=c.raw_arguments)
        messages.append(
            Message(role=MessageRole.ASSISTANT, tool_calls=[ToolCall(id=cid, function=fn)])
        )
        if not (drop_result and k == len(calls) - 1):
            messages.append(
                Message(role=MessageRole.TOOL, content=c.observation, tool_call_id=cid, name=c.tool)
            )
    if answer is not None:
        messages.append(Message(role=MessageRole.ASSISTANT, content=answer))
    if closing is not None:
        messages.append(Message(role=MessageRole.USER, content=closing))
    return Trajectory(
        trajectory_id="t",
        run_id="r",
        blueprint_id="b",
        tree_id="tr",
        leaf_node_id="n",
        cluster_id="code",
        messages=messages,
        tools=[t.to_openai() for t in TOOLS],
        calls=calls,
        final_answer=answer,
        termination=termination,
    )


def failed(trajectory: Trajectory, constraints=DELETE) -> list[str]:
    return verify(trajectory, constraints, GOLD).failed_checks


DEL = {"path": "README.md"}


def test_the_delete_file_returned_case_passes_its_constraints_and_fails_verification() -> None:
    """The run that started this: one real delete, then two calls the parser made of the
    model's own "functions.delete_file returned:" text, both unknown, no word to the user,
    and the text call ids repeated."""
    echo = '{"deleted": "README.md"}'
    calls = [
        _call(0, "delete_file", DEL),
        _call(1, "delete_file returned", echo, "Error: unknown tool", error=True),
        _call(2, "delete_file returned", echo, "Error: unknown tool", error=True),
    ]
    trajectory = run(calls, answer=None, ids=["call_0", "call_text_0", "call_text_0"])
    verdict = verify(trajectory, DELETE, GOLD)
    assert verdict.constraints_passed is True
    assert verdict.passed is False and verdict.clean is False and not verdict.recovered
    assert set(verdict.failed_checks) == {
        "known_tools",
        "unique_call_ids",
        "no_repeated_failure",
        "answered",
    }
    detail = {h.check: h.detail for h in verdict.hygiene}
    assert "delete_file returned" in detail["known_tools"]
    assert verdict.score < 0.9  # the shaped score drops with it


def test_a_clean_run_passes_every_check() -> None:
    verdict = verify(run([_call(0, "delete_file", DEL)]), DELETE, GOLD)
    assert verdict.passed and verdict.clean and not verdict.recovered
    assert [h.check for h in verdict.hygiene] == registered_checks()
    assert len(registered_checks()) == 12


def test_a_corrected_failure_is_a_recovery() -> None:
    calls = [
        _call(0, "delete_file", {"path": "READ.md"}, "Error: no such file", error=True),
        _call(1, "delete_file", DEL),
    ]
    verdict = verify(run(calls), DELETE, GOLD)
    assert verdict.passed and verdict.recovered
    assert "#0->#1" in {h.check: h.detail for h in verdict.hygiene}["failures_corrected"]


def test_a_failure_left_standing_fails() -> None:
    calls = [
        _call(0, "delete_file", DEL),
        _call(1, "book_room", {"room": "x", "nights": 1}, "Error: full", error=True),
    ]
    assert failed(run(calls)) == ["failures_corrected"]


def test_arguments_that_break_the_schema_fail_unless_corrected() -> None:
    # the server accepted it (an outside server may): the verifier validates for itself
    bad = _call(0, "delete_file", {"file": "README.md"})
    assert failed(run([bad, _call(1, "book_room", {"room": "a", "nights": 1})])) == [
        "valid_arguments"
    ]
    unparsed = _call(0, "delete_file", '{"path": "README.md', "Error: invalid JSON", error=True)
    assert failed(run([unparsed, _call(1, "delete_file", DEL)])) == []


def test_an_identical_failing_call_repeated_fails_even_when_corrected_later() -> None:
    calls = [
        _call(0, "delete_file", {"path": "x"}, "Error: no such file", error=True),
        _call(1, "delete_file", {"path": "x"}, "Error: no such file", error=True),
        _call(2, "delete_file", DEL),
    ]
    assert failed(run(calls)) == ["no_repeated_failure"]


def test_a_call_without_its_result_fails() -> None:
    calls = [_call(0, "delete_file", DEL)]
    assert "results_paired" in failed(run(calls, answer=None, drop_result=True))


def test_the_conversation_must_end_with_the_assistants_words() -> None:
    calls = [_call(0, "delete_file", DEL)]
    assert failed(run(calls, answer=None)) == ["answered"]
    assert failed(run(calls, answer="  ")) == ["answered"]
    echo = 'functions.delete_file returned:\n{"ok": true}'
    assert "answered" in failed(run(calls, answer=echo))
    # a closing word from the user is fine when the user ended the conversation
    stop = Termination.USER_STOP
    assert failed(run(calls, closing="Thanks!", termination=stop)) == []
    # but a user turn left unanswered is not
    assert failed(run(calls, closing="And the other file?", termination=Termination.MAX_TURNS))


def test_a_write_must_state_the_values_the_user_asked_for() -> None:
    """The booking id the write returned is what the user asked to know: the answer must
    state it, even though the answer constraint is soft on a writing path."""
    booked = _call(0, "book_room", {"room": "sea", "nights": 2}, '{"booking_id": "BK-42"}')
    asked = [
        ToolCalled(call=CallPattern(tool="book_room", matchers={"room": "sea"})),
        AnswerContains(values=["BK-42"], hard=False, derived_from="blueprint.answer_values"),
    ]
    vague = verify(run([booked], answer="Your room is booked."), asked, GOLD)
    assert vague.constraints_passed and not vague.passed
    assert vague.failed_checks == ["outcome_stated"]
    told = verify(run([booked], answer="Booked: your booking id is BK-42."), asked, GOLD)
    assert told.passed
    # a value the verifier guessed (not asked by the task's words) stays a soft check only
    guessed = [asked[0], asked[1].model_copy(update={"derived_from": "gold_run.last_observation"})]
    assert verify(run([booked], answer="Your room is booked."), guessed, GOLD).passed


def test_a_do_nothing_trajectory_fails_hygiene() -> None:
    from trajsynth.curation.constraint_lint import do_nothing_trajectory

    verdict = verify(do_nothing_trajectory(TOOLS), DELETE, EnvState(state_hash="init"))
    assert verdict.clean is False and "answered" in verdict.failed_checks


def test_the_transcript_names_the_failed_hygiene_checks() -> None:
    """``synth show trajectory`` reads ``curation.transcript``: the hygiene results sit under
    the verdict beside the constraints, and the header can say which failed."""
    from trajsynth.curation.transcript import transcript

    calls = [_call(0, "delete_file", DEL)]
    trajectory = run(calls, answer=None)
    t = transcript(trajectory, verify(trajectory, DELETE, GOLD))
    lines = {c.kind: c for c in t.constraints}
    assert not lines["hygiene: answered"].passed and lines["hygiene: known_tools"].passed
    assert t.failed_checks == ["answered"] and t.constraints_passed is True and not t.passed


# --- faithful answers (curation.faithful) ---------------------------------------------------

BOOKED = '{"booking_id": "BK-42", "price": 120.0, "date": "2025-06-11", "status": "confirmed"}'
ROOM = {"room": "sea", "nights": 2}


def test_every_value_the_answer_states_must_come_from_the_episode() -> None:
    booked = [_call(0, "book_room", ROOM, BOOKED)]
    assert failed(run(booked, answer="Booked BK-42 for $120.00 on June 11, 2025.")) == []
    # a figure no tool returned (a refund, a price, an id) is made up
    assert failed(run(booked, answer="Booked BK-42 for $125.00.")) == ["grounded_answer"]
    assert failed(run(booked, answer="Booked BK-43 for 120.")) == ["grounded_answer"]
    # the number formats a model writes are one value: 1,200.5 is 1200.50
    big = [_call(0, "book_room", ROOM, '{"booking_id": "BK-42", "price": 1200.50}')]
    assert failed(run(big, answer="Booked BK-42, 1,200.5 in all.")) == []
    # a count of what a tool listed is a value the tool returned
    listed = [_call(0, "list_files", {}, '{"files": ["a.py", "b.py", "README.md"]}')]
    assert failed(run(listed, answer="There are 3 files.", user="How many files?")) == []
    assert "grounded_answer" in failed(run(listed, answer="There are 4 files.", user="How many?"))
    # the user's own words ground a value too
    assert failed(run(booked, answer="Booked 2 nights: BK-42.", user="Book sea for 2 nights")) == []


def test_a_value_the_task_asked_for_must_have_been_read() -> None:
    """The read was dropped: the answer states the job title the task asked for, yet no tool
    returned it (a words-only value carries no digit, so only the asked values catch it)."""
    asked = [AnswerContains(values=["Staff Engineer"], derived_from="blueprint.answer_values")]
    read = _call(0, "list_files", {}, '{"title": "Staff Engineer"}')
    user = "What is Yuki's job title?"
    title = "Her title: Staff Engineer."
    assert verify(run([read], answer=title, user=user), asked, GOLD).failed_checks == []
    dropped = verify(run([], answer=title, user=user), asked, GOLD)
    assert dropped.failed_checks == ["grounded_answer"]


def test_an_answer_that_says_nothing_happened_when_the_write_succeeded_fails() -> None:
    done = [_call(0, "delete_file", DEL, '{"path": "README.md", "deleted": true}')]
    sorry = "I'm sorry, that did not go through: nothing was changed."
    assert failed(run(done, answer=sorry)) == ["outcome_consistent"]
    # the same words are honest when the write failed and stayed failed
    refused = [_call(0, "delete_file", DEL, "Error: permission denied", error=True)]
    assert "outcome_consistent" not in failed(run(refused, answer=sorry))
    # and a read that found nothing is no write: saying so is the outcome
    empty = [_call(0, "list_files", {}, '{"files": []}')]
    assert failed(run(empty, answer="I could not find any files: the folder is empty.")) == []


def test_a_successful_call_repeated_with_nothing_written_between_fails() -> None:
    ls = '{"files": ["README.md"]}'
    twice = [
        _call(0, "list_files", {}, ls),
        _call(1, "list_files", {}, ls),
        _call(2, "delete_file", DEL),
    ]
    assert failed(run(twice)) == ["no_redundant_call"]
    # reading again after a write is checking its effect, not redundant
    after = [_call(0, "list_files", {}, ls), _call(1, "delete_file", DEL),
             _call(2, "list_files", {}, '{"files": []}')]  # fmt: skip
    assert failed(run(after)) == []
    same_after_write = [_call(0, "list_files", {}, ls), _call(1, "delete_file", DEL),
                        _call(2, "list_files", {}, ls)]  # fmt: skip
    assert "no_redundant_call" not in failed(run(same_after_write))
    # polling: the same call whose result changed learned something
    polled = [_call(0, "list_files", {}, '{"files": []}'), _call(1, "list_files", {}, ls),
              _call(2, "delete_file", DEL)]  # fmt: skip
    assert failed(run(polled)) == []


def test_a_clock_read_again_is_redundant() -> None:
    """mcp-server-time's ``get_current_time`` called three times for one question, the user
    having said only "That's a beautiful date." between: the results differ in the seconds
    alone. A result whose words changed (a job that finished) is still a poll."""
    now = '{"timezone": "Asia/Tokyo", "datetime": "2026-11-29T19:47:%s+09:00"}'
    zone = {"timezone": "Asia/Tokyo"}
    clock = [_call(0, "get_current_time", zone, now % "06"),
             _call(1, "get_current_time", zone, now % "19")]  # fmt: skip
    assert "no_redundant_call" in failed(run(clock, answer="It is 19:47:19 in Tokyo."))
    job = {"job": "j1"}
    polled = [_call(0, "job_status", job, '{"state": "running", "done": 40}'),
              _call(1, "job_status", job, '{"state": "finished", "done": 100}')]  # fmt: skip
    assert "no_redundant_call" not in failed(run(polled, answer="The job j1 is finished."))


def test_an_answer_that_explains_the_tool_instead_of_the_outcome_fails() -> None:
    """server-memory's bench: the entity was deleted and the 135M model answered with what the
    tool does in general; its words "empty" and "no such" read as outcomes before."""
    done = [_call(0, "delete_file", DEL, "Entities deleted successfully")]
    explained = (
        "This is a function that will delete all the entities in the given list.\n"
        "The function returns an empty list if no such entity exists."
    )
    assert failed(run(done, answer=explained)) == ["answer_informs"]
    told = "README.md is deleted; the tool returned a confirmation."
    assert failed(run(done, answer=told)) == []
    # the outcome, then a lecture on the tool (the time bench: "This function returns the
    # current date and time in UTC (UTC+08) by default ...")
    lecture = "README.md is deleted. This function returns nothing when the file is missing."
    assert failed(run(done, answer=lecture)) == ["answer_informs"]


def test_an_answer_that_speaks_of_the_tool_by_its_name_fails() -> None:
    """The sqlite bench's one pass at f363a60: 'The table "TableTypeInfo" has been
    successfully created. The function "create_table" returned a result set with the requested
    data type as specified by the query.' The tool said "Table created successfully"; the
    second sentence is about the function, and wrong. Control: the first sentence alone (a
    tool named by a plain word, "add", is a word: ``named_tool``'s doctest)."""
    done = [_call(0, "delete_file", DEL, "File deleted successfully")]
    spoke = 'README.md is deleted. The function "delete_file" returned a result set.'
    assert failed(run(done, answer=spoke)) == ["answer_informs"]
    assert failed(run(done, answer="README.md is deleted. I called delete_file for it.")) == [
        "answer_informs"
    ]
    assert failed(run(done, answer="README.md is deleted.")) == []


def test_an_answer_that_talks_of_functions_the_user_never_asked_about_fails() -> None:
    """sqlite's two passes with no user's database (5bd051c, ``--empty-worlds``): "The function
    has been added to the memo. The memo is a list of functions, where each function returns a
    new instance ..." and "... The function returned an instance of the "Insight" class".
    Control: the same words where the user asked about code, and a plain outcome."""
    done = [_call(0, "delete_file", DEL, "File deleted successfully")]
    talk = "README.md is deleted. The function returned an instance of the File class."
    assert failed(run(done, answer=talk)) == ["answer_informs"]
    asked = "Please delete README.md; which function did that?"
    assert failed(run(done, answer=talk, user=asked)) == []
    assert failed(run(done, answer="README.md is deleted.")) == []
    # a coding episode (a tool runs code) speaks of functions whatever the user said
    coding = run(done, answer=talk, user="Make the tests in test_slug.py pass.")
    runner = {"type": "function", "function": {"name": "run_tests", "parameters": {}}}
    assert failed(coding.model_copy(update={"tools": [*coding.tools, runner]})) == []


def test_a_null_printed_as_the_answer_is_no_answer() -> None:
    """The sqlite bench: a table created, then the answer "None.", which passed: "none"
    reads as an outcome. Control: "None of the files was deleted." is words."""
    done = [_call(0, "delete_file", DEL, '{"path": "README.md", "deleted": true}')]
    for null in ("None.", "null", " NONE "):
        assert "answered" in failed(run(done, answer=null)), null
    assert "answered" not in failed(run(done, answer="None of it is left: README.md is deleted."))


def test_a_tool_s_output_pasted_as_the_answer_is_no_answer() -> None:
    """The time bench: ``get_current_time:`` and the JSON it returned, as the last turn."""
    done = [_call(0, "delete_file", DEL, '{"path": "README.md", "deleted": true}')]
    pasted = 'delete_file:\n{\n  "path": "README.md",\n  "deleted": true\n}'
    assert "answered" in failed(run(done, answer=pasted))
    # a label of the user's own words before a list is an answer
    listed = 'Deleted: {"path": "README.md"} is gone.'
    assert "answered" not in failed(run(done, answer=listed))


def test_an_answer_that_only_echoes_the_request_fails() -> None:
    done = [_call(0, "delete_file", DEL, '{"path": "README.md", "deleted": true}')]
    assert failed(run(done, answer="Here is what I found: README.md.")) == ["answer_informs"]
    assert failed(run(done, answer="README.md is deleted.")) == []
    assert failed(run(done, answer="All done: I have taken care of that for you.")) == []
    # a read's answer informs with a word the tool returned and the user never said
    read = [_call(0, "list_files", {}, '{"owner": "Hannah Weber"}')]
    asked = "Who owns this folder?"
    assert failed(run(read, answer="The owner is Hannah Weber.", user=asked)) == []
    assert failed(run(read, answer="Who owns this folder? Here you are.", user=asked)) == [
        "answer_informs"
    ]


def test_a_proper_name_the_episode_never_said_is_made_up() -> None:
    """A time bench pass: the right datetime, then "This value represents the current date and
    time in Japan's Eastern Standard Calendar (Yon)." Every answer of the stored outside
    benches that names such a thing made it up (five of them); a name the user or a result
    gave, with ``_`` read as a space, is grounded."""
    read = [_call(0, "list_files", {}, '{"timezone": "America/New_York", "owner": "Ann Lee"}')]
    made_up = "The owner is Ann Lee, in the Eastern Standard Calendar."
    assert "grounded_answer" in failed(run(read, answer=made_up))
    told = "The owner is Ann Lee, and the folder keeps New York time."
    assert "grounded_answer" not in failed(run(read, answer=told))


def test_a_unit_the_result_never_gave_is_a_guess() -> None:
    """server-everything's weather (``{"temperature": 33, ...}``): six stored passes said
    "33 degrees Celsius" or "33°C". The number is the result's; the unit nobody gave. Control:
    the bare number, and a result that states its unit."""
    bare = [_call(0, "list_files", {}, '{"temperature": 33, "humidity": 82}')]
    assert "grounded_answer" in failed(run(bare, answer="It is 33°C there."))
    assert "grounded_answer" in failed(run(bare, answer="It is 33 degrees Celsius there."))
    assert "grounded_answer" not in failed(run(bare, answer="The temperature is 33."))
    stated = [_call(0, "list_files", {}, '{"temperature": 33, "unit": "celsius"}')]
    assert "grounded_answer" not in failed(run(stated, answer="It is 33°C there."))


def test_grounding_reads_values_as_a_reviewer_would() -> None:
    """Prose that only looks like a value, list numbering, clock times told in 12 hours and a
    rounded amount are not made up."""
    read = [_call(0, "list_files", {}, '{"at": "2025-06-11T14:30:00", "total": 54.199}')]
    user = "When and how much?"
    told = "Two things, i.e. time and/or amount:\n1. At 2:30 pm\n2. A total of $54.20"
    assert failed(run(read, answer=told, user=user)) == []
    assert "grounded_answer" in failed(run(read, answer="A total of $54.30", user=user))
