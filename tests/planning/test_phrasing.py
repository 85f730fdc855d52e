"""Outside servers' template goals in the user's voice (planning.phrasing through words)."""

from __future__ import annotations

import re

from trajsynth.planning.words import Answer, check_words, template_words, words_spec
from trajsynth.schemas import (
    Domain,
    GoldCall,
    JsonValue,
    PlannedCall,
    ReasoningMode,
    RefArg,
    ServerKind,
    ServerSpec,
    SlotArg,
    ToolAccess,
    ToolCluster,
    ToolSpec,
)


def _tool(name: str, *params: str, write: bool = False, description: str = "") -> ToolSpec:
    props = {p: {"type": "string"} for p in params}
    return ToolSpec(
        name=name,
        description=description or f"{name}.",
        input_schema={"type": "object", "properties": props, "required": list(params)},
        access=ToolAccess.WRITE if write else ToolAccess.READ,
    )


def _cluster(*tools: ToolSpec) -> ToolCluster:
    return ToolCluster(
        cluster_id="stranger",
        domain=Domain.PRODUCTIVITY,
        server=ServerSpec(kind=ServerKind.STDIO, command=["stranger-server"]),
        source="outside",
        tools=list(tools),
    )


def _slots(tool: str, **values: JsonValue) -> PlannedCall:
    return PlannedCall(tool=tool, args={p: SlotArg(name=p) for p in values})


def _reads_as_a_request(goal: str, cluster: ToolCluster, values: list[str]) -> None:
    """No tool identifier, no "label: value" piece, every value the user supplies."""
    for tool in cluster.tools:
        assert tool.name not in goal
    assert not re.search(r"\w: \S", goal), goal
    for value in values:
        assert value in goal, (value, goal)


def test_a_read_with_two_parameters_asks_a_question() -> None:
    cluster = _cluster(
        _tool("get_forecast", "city", "date", description="Get the forecast for a city.")
    )
    values = {"city": "Paris", "date": "2025-06-02"}
    call = GoldCall(tool="get_forecast", arguments=values, observation={"temperature": 21})
    spec = words_spec(
        cluster,
        ReasoningMode.DIRECT_EXECUTE,
        [_slots("get_forecast", **values)],
        values,
        [call],
        Answer(field="temperature", value=21),
    )
    words = template_words(spec)
    assert words.goal == "What is the temperature of the forecast in Paris on 2025-06-02?"
    _reads_as_a_request(words.goal, cluster, ["Paris", "2025-06-02"])
    assert check_words(words, spec) == []


def test_a_conversion_is_asked_as_what_it_does() -> None:
    """mcp-server-time's convert_time: the time is what is converted, the two zones are
    where from and where to ("from America/New_York", not "source timezone: ...")."""
    cluster = _cluster(
        _tool("convert_time", "source_timezone", "time", "target_timezone"),
        _tool("get_current_time", "timezone"),
    )
    values = {
        "source_timezone": "America/New_York",
        "time": "09:16",
        "target_timezone": "Australia/Sydney",
    }
    call = GoldCall(
        tool="convert_time", arguments=values, observation={"time_difference": "+16.0h"}
    )
    spec = words_spec(
        cluster,
        ReasoningMode.DIRECT_EXECUTE,
        [_slots("convert_time", **values)],
        values,
        [call],
        Answer(field="time_difference", value="+16.0h"),
    )
    words = template_words(spec)
    assert words.goal == (
        "What is the time difference when I convert the time 09:16 from America/New_York "
        "to Australia/Sydney?"
    )
    _reads_as_a_request(words.goal, cluster, list(values.values()))
    assert check_words(words, spec) == []


def test_a_write_with_a_path_and_content_names_the_file_and_what_goes_in_it() -> None:
    description = "Create a new file or completely overwrite an existing file with new content."
    cluster = _cluster(_tool("write_file", "path", "content", write=True, description=description))
    values = {"path": "docs/groceries.txt", "content": "milk and eggs"}
    call = GoldCall(tool="write_file", arguments=values, observation="Successfully wrote")
    steps = [_slots("write_file", **values)]
    spec = words_spec(cluster, ReasoningMode.DIRECT_EXECUTE, steps, values, [call], None)
    words = template_words(spec)
    assert words.goal == 'Please write "milk and eggs" to the file docs/groceries.txt.'
    _reads_as_a_request(words.goal, cluster, list(values.values()))
    assert "overwrite" not in words.goal  # the description is never pasted in
    assert check_words(words, spec) == []
    # the modes: a held-back file is "a file" and in hidden_info; confirmation asked for
    held = words_spec(cluster, ReasoningMode.CLARIFY_FIRST, steps, values, [call], None)
    asked = template_words(held)
    assert asked.goal == 'Please write "milk and eggs" to a file.'
    assert asked.hidden_info == {"path": "docs/groceries.txt"}
    assert check_words(asked, held) == []
    verify = words_spec(cluster, ReasoningMode.VERIFY_AFTER_WRITE, steps, values, [call], None)
    assert template_words(verify).goal.endswith("Please confirm that it went through.")


def test_a_held_back_thing_takes_its_article() -> None:
    """server-memory's delete_entities, its names held back: "delete an entity"."""
    tool = _tool("delete_entities", "entityNames", write=True, description="Delete entities.")
    cluster = _cluster(tool)
    values: dict[str, JsonValue] = {"entityNames": ["Ada Lovelace"]}
    call = GoldCall(tool="delete_entities", arguments=values, observation="Entities deleted")
    steps = [_slots("delete_entities", **values)]
    held = words_spec(cluster, ReasoningMode.CLARIFY_FIRST, steps, values, [call], None)
    asked = template_words(held)
    assert asked.goal == "I would like you to delete an entity.", asked.goal
    assert asked.hidden_info == {"entityNames": ["Ada Lovelace"]}


def test_a_value_the_first_call_gives_is_not_the_users_to_say() -> None:
    """find_user(email) then send_message(user_id from the result, text): the user says
    whose address and what to send; the id is the assistant's to find."""
    cluster = _cluster(
        _tool("find_user", "email"), _tool("send_message", "user_id", "text", write=True)
    )
    steps = [
        _slots("find_user", email="ann@example.com"),
        PlannedCall(
            tool="send_message",
            args={"user_id": RefArg(step=0, field="user_id"), "text": SlotArg(name="text")},
        ),
    ]
    slots: dict[str, JsonValue] = {"email": "ann@example.com", "text": "Lunch at noon?"}
    calls = [
        GoldCall(
            tool="find_user",
            arguments={"email": "ann@example.com"},
            observation={"user_id": "U123", "name": "Ann Lee"},
        ),
        GoldCall(
            tool="send_message",
            arguments={"user_id": "U123", "text": "Lunch at noon?"},
            observation="sent",
        ),
    ]
    spec = words_spec(cluster, ReasoningMode.DIRECT_EXECUTE, steps, slots, calls, None)
    words = template_words(spec)
    assert words.goal == (
        'Please find the user with the email ann@example.com, then send "Lunch at noon?" '
        "to that user."
    )
    assert "U123" not in words.goal
    _reads_as_a_request(words.goal, cluster, ["ann@example.com", "Lunch at noon?"])
    assert check_words(words, spec) == []


def test_a_read_the_outcome_does_not_use_is_left_out() -> None:
    """server-filesystem: a search, a read whose content is copied, the write, a listing
    after it. The user names the file copied and the file written; the search's folder and
    pattern and the listing's folder are no part of the request."""
    cluster = _cluster(
        _tool("search_files", "path", "pattern"),
        _tool("read_text_file", "path"),
        _tool("write_file", "path", "content", write=True),
        _tool("list_directory", "path"),
    )
    steps = [
        PlannedCall(
            tool="search_files",
            args={"path": SlotArg(name="path"), "pattern": SlotArg(name="pattern")},
        ),
        PlannedCall(tool="read_text_file", args={"path": SlotArg(name="path_2")}),
        PlannedCall(
            tool="write_file",
            args={"path": SlotArg(name="path_3"), "content": RefArg(step=1, field="content")},
        ),
        PlannedCall(tool="list_directory", args={"path": SlotArg(name="path_4")}),
    ]
    slots: dict[str, JsonValue] = {
        "path": "docs",
        "pattern": "*.txt",
        "path_2": "docs/meeting.txt",
        "path_3": "docs/groceries.txt",
        "path_4": "archive",
    }
    note = "Meeting at 10am."
    calls = [
        GoldCall(tool="search_files", arguments={"path": "docs", "pattern": "*.txt"}),
        GoldCall(
            tool="read_text_file",
            arguments={"path": "docs/meeting.txt"},
            observation={"content": note},
        ),
        GoldCall(tool="write_file", arguments={"path": "docs/groceries.txt", "content": note}),
        GoldCall(tool="list_directory", arguments={"path": "archive"}),
    ]
    spec = words_spec(cluster, ReasoningMode.DIRECT_EXECUTE, steps, slots, calls, None)
    assert set(spec.slots) == {"path_2", "path_3"}
    words = template_words(spec)
    assert words.goal == (
        "Please write the content of the file docs/meeting.txt to the file docs/groceries.txt."
    )
    for unused in ("*.txt", "archive", "docs "):
        assert unused not in words.goal
    assert check_words(words, spec) == []


def test_a_tool_with_no_known_verb_falls_back_to_its_name_in_words() -> None:
    cluster = _cluster(_tool("zorp_frobnicator", "level", write=True, description="Zorps."))
    values = {"level": "high"}
    call = GoldCall(tool="zorp_frobnicator", arguments=values, observation="ok")
    steps = [_slots("zorp_frobnicator", **values)]
    spec = words_spec(cluster, ReasoningMode.DIRECT_EXECUTE, steps, values, [call], None)
    words = template_words(spec)
    assert words.goal == "Please help me with the zorp frobnicator with the level high."
    _reads_as_a_request(words.goal, cluster, ["high"])
    assert check_words(words, spec) == []


def test_an_object_value_is_stated_by_its_values_not_its_keys() -> None:
    """server-memory: create_entities(entities=[{name, entityType, observations}])."""
    entities: JsonValue = [
        {"name": "Ann Lee", "entityType": "person", "observations": ["likes tea"]},
        {"name": "Acme", "entityType": "company", "observations": []},
    ]
    schema: dict[str, JsonValue] = {
        "type": "object",
        "properties": {"entities": {"type": "array"}},
        "required": ["entities"],
    }
    tool = ToolSpec(
        name="create_entities",
        description="Create multiple new entities in the knowledge graph",
        input_schema=schema,
        access=ToolAccess.WRITE,
    )
    cluster = _cluster(tool)
    slots: dict[str, JsonValue] = {"entities": entities}
    call = GoldCall(tool="create_entities", arguments=slots, observation="[]")
    steps = [PlannedCall(tool="create_entities", args={"entities": SlotArg(name="entities")})]
    spec = words_spec(cluster, ReasoningMode.DIRECT_EXECUTE, steps, slots, [call], None)
    words = template_words(spec)
    assert words.goal == (
        'Please create the entities "Ann Lee" (entity type person, observations "likes tea") '
        "and Acme (entity type company)."
    )
    assert "entityType" not in words.goal
    assert check_words(words, spec) == []


def test_the_words_examples_hold() -> None:
    """The docstring examples of planning.words (label lists, a too-short goal, a restated
    description) run as written."""
    import doctest

    from trajsynth.planning import words as module

    result = doctest.testmod(module)
    assert result.attempted > 0 and result.failed == 0


def test_without_a_verb_every_value_is_still_stated() -> None:
    cluster = _cluster(_tool("zorp_frobnicator", "path", "content", write=True))
    values = {"path": "docs/a.txt", "content": "two words"}
    call = GoldCall(tool="zorp_frobnicator", arguments=values, observation="ok")
    steps = [_slots("zorp_frobnicator", **values)]
    spec = words_spec(cluster, ReasoningMode.DIRECT_EXECUTE, steps, values, [call], None)
    words = template_words(spec)
    assert words.goal == (
        "Please help me with the zorp frobnicator for the file docs/a.txt with the content "
        '"two words".'
    )
    assert check_words(words, spec) == []


def test_a_zone_the_first_call_gives_is_named_by_its_field() -> None:
    """convert_time, then get_current_time in the zone the conversion reports as its source:
    the question says which zone ("the source timezone"), not a bare "what is the datetime"."""
    cluster = _cluster(
        _tool("convert_time", "source_timezone", "time", "target_timezone"),
        _tool("get_current_time", "timezone"),
    )
    values: dict[str, JsonValue] = {
        "source_timezone": "Australia/Sydney",
        "time": "09:15",
        "target_timezone": "America/New_York",
    }
    steps = [
        _slots("convert_time", **values),
        PlannedCall(
            tool="get_current_time",
            args={"timezone": RefArg(step=0, field="source.timezone")},
        ),
    ]
    now = {"datetime": "2026-11-29T03:28:48+11:00", "timezone": "Australia/Sydney"}
    calls = [
        GoldCall(
            tool="convert_time",
            arguments=values,
            observation={"source": {"timezone": "Australia/Sydney"}, "time_difference": "-16h"},
        ),
        GoldCall(
            tool="get_current_time", arguments={"timezone": "Australia/Sydney"}, observation=now
        ),
    ]
    answer = Answer(field="datetime", value=now["datetime"])
    spec = words_spec(cluster, ReasoningMode.DIRECT_EXECUTE, steps, values, calls, answer)
    words = template_words(spec)
    assert words.goal == (
        "After you convert the time 09:15 from Australia/Sydney to America/New_York, what is "
        "the datetime in the source timezone?"
    )
    assert check_words(words, spec) == []


def test_a_question_whose_value_is_held_back_says_whose_it_is() -> None:
    """A clock read in clarify mode: the zone is the user's to give when asked, so the
    question names it as theirs, and the words check takes it (four words were too short)."""
    cluster = _cluster(_tool("get_current_time", "timezone", description="Get the time."))
    values = {"timezone": "Asia/Tokyo"}
    call = GoldCall(
        tool="get_current_time", arguments=values, observation={"datetime": "2026-11-29T14:41"}
    )
    steps = [_slots("get_current_time", **values)]
    answer = Answer(field="datetime", value="2026-11-29T14:41")
    held = words_spec(cluster, ReasoningMode.CLARIFY_FIRST, steps, values, [call], answer)
    words = template_words(held)
    assert words.goal == "What is the datetime in my timezone?"
    assert words.hidden_info == {"timezone": "Asia/Tokyo"}
    assert check_words(words, held) == []
    said = words_spec(cluster, ReasoningMode.DIRECT_EXECUTE, steps, values, [call], answer)
    assert template_words(said).goal == "What is the datetime in Asia/Tokyo?"


def test_a_read_with_no_answer_to_ask_is_requested_once() -> None:
    """A one-read task whose result names no field to ask for is a request, said once
    (server-everything's get-sum was asked as "..., then get the sum ... " twice)."""
    cluster = _cluster(_tool("get-sum", "a", "b", description="Returns the sum of two numbers."))
    values = {"a": "17", "b": "25"}
    call = GoldCall(tool="get-sum", arguments=values, observation="The sum of 17 and 25 is 42.")
    spec = words_spec(
        cluster, ReasoningMode.DIRECT_EXECUTE, [_slots("get-sum", **values)], values, [call], None
    )
    goal = template_words(spec).goal
    assert goal.count("sum") == 1 and ", then " not in goal, goal
    _reads_as_a_request(goal, cluster, ["17", "25"])


def test_the_top_folder_is_named_in_words() -> None:
    """The filesystem bench asked "What is the content of the directory .?"."""
    tool = _tool("list_directory", "path", description="List the files in a folder.")
    cluster = _cluster(tool)
    values: dict[str, JsonValue] = {"path": "."}
    call = GoldCall(tool="list_directory", arguments=values, observation={"content": "docs"})
    steps = [_slots("list_directory", **values)]
    spec = words_spec(
        cluster,
        ReasoningMode.DIRECT_EXECUTE,
        steps,
        values,
        [call],
        Answer(field="content", value="docs"),
    )
    words = template_words(spec)
    assert "top directory (.)" in words.goal or "top folder (.)" in words.goal, words.goal
    assert check_words(words, spec) == []


def test_a_tools_word_for_its_output_is_no_thing_of_the_users() -> None:
    """server-everything's ``get-structured-content`` (weather for a location): the bench
    asked "What is the temperature of the structured content in Chicago?"."""
    tool = _tool(
        "get-structured-content",
        "location",
        description="Returns structured content along with an output schema.",
    )
    cluster = _cluster(tool)
    values: dict[str, JsonValue] = {"location": "Chicago"}
    observation = {"temperature": 36, "conditions": "Light rain", "humidity": 82}
    call = GoldCall(tool="get-structured-content", arguments=values, observation=observation)
    steps = [_slots("get-structured-content", **values)]
    answer = Answer(field="temperature", value=36)
    spec = words_spec(cluster, ReasoningMode.DIRECT_EXECUTE, steps, values, [call], answer)
    words = template_words(spec)
    assert words.goal == "What is the temperature in Chicago?", words.goal
    assert check_words(words, spec) == []


def test_values_of_parameters_whose_names_say_nothing_are_stated_as_operands() -> None:
    """server-everything's ``get-sum(a, b)``: the bench asked "Please get the sum with the a 1
    with the b 1."."""
    tool = _tool("get-sum", "a", "b", description="Returns the sum of two numbers.")
    cluster = _cluster(tool)
    values: dict[str, JsonValue] = {"a": 3, "b": 4}
    call = GoldCall(tool="get-sum", arguments=values, observation="The sum of 3 and 4 is 7.")
    steps = [_slots("get-sum", **values)]
    spec = words_spec(cluster, ReasoningMode.DIRECT_EXECUTE, steps, values, [call], None)
    words = template_words(spec)
    assert words.goal == "Please get the sum of 3 and 4.", words.goal
    assert check_words(words, spec) == []
    asked = Answer(field="sum", value=7)
    spec = words_spec(cluster, ReasoningMode.DIRECT_EXECUTE, steps, values, [call], asked)
    assert template_words(spec).goal == "What is the sum of 3 and 4?"
