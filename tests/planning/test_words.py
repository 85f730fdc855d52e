"""Blueprint words: parsing the planner's draft, the checks, the template (docs/methods.md §3)."""

from __future__ import annotations

import re
from pathlib import Path

from fakes.inprocess_env import InProcessEnvironment
from fakes.llm import ScriptedLLM, tool_call

from trajsynth.mcp_servers.registry import get_cluster
from trajsynth.planning.phrasing import Clause
from trajsynth.planning.planner import Planner, plan_blueprint
from trajsynth.planning.words import (
    Answer,
    Words,
    WordsSpec,
    build_messages,
    check_words,
    parse_words,
    pick_answer,
    stale_value,
    template_words,
    words_spec,
)
from trajsynth.schemas import (
    Blueprint,
    Cell,
    Difficulty,
    Domain,
    GoldCall,
    JsonValue,
    PathShape,
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

SHOP_TOOLS = ["search_products", "add_to_cart", "place_order", "find_user_by_email"]


def _string_tool(
    name: str, *params: str, description: str = "", access: ToolAccess | None = None
) -> ToolSpec:
    """A tool whose every parameter is a required string."""
    props = {p: {"type": "string"} for p in params}
    schema = {"type": "object", "properties": props, "required": list(params)}
    extra = {"access": access} if access is not None else {}
    return ToolSpec(name=name, description=description or f"{name}.", input_schema=schema, **extra)


def _outside_cluster(cluster_id: str, command: list[str], *tools: ToolSpec) -> ToolCluster:
    return ToolCluster(
        cluster_id=cluster_id,
        domain=Domain.PRODUCTIVITY,
        server=ServerSpec(kind=ServerKind.STDIO, command=command),
        source="outside",
        tools=list(tools),
    )


def _spec(**kw: object) -> WordsSpec:
    base: dict[str, object] = {
        "domain": "retail",
        "mode": "direct_execute",
        "steps": ["search the catalogue by name"],
        "slots": {"query": "Vortex 600 Blender"},
        "labels": {"query": "product"},
        "tool_names": SHOP_TOOLS,
        "answer": Answer(field="price", value=79.99, subject="Vortex 600 Blender"),
        "known_ids": ["P100", "BLN-600"],
    }
    base.update(kw)
    return WordsSpec.model_validate(base)


def test_parse_takes_the_first_json_object_in_chatter() -> None:
    reply = (
        'Here you go:\n```json\n{"persona": "A home cook.", "goal": "How much is the '
        'Vortex 600 Blender?", "hidden_info": {"Query": "Vortex 600 Blender", "mood": "x"}}\n'
        '```\n{"goal": "second"}'
    )
    words = parse_words(reply, _spec())
    assert words == Words(
        persona="A home cook.",
        goal="How much is the Vortex 600 Blender?",
        hidden_info={"query": "Vortex 600 Blender"},  # slot keys only, true values
    )


def test_parse_rejects_replies_without_a_goal() -> None:
    spec = _spec()
    assert parse_words("I am a small model and I like blenders.", spec) is None
    assert parse_words('{"persona": "x"}', spec) is None
    assert parse_words('{"goal": "   "}', spec) is None
    assert parse_words('{"goal": "unterminated', spec) is None


def test_hidden_info_is_matched_by_value_and_given_true_values() -> None:
    spec = _spec(slots={"email": "mia.k@example.com", "query": "Vortex 600 Blender"})
    words = parse_words(
        '{"goal": "price of the blender?", "hidden_info": {"my mail": "MIA.K@example.com"}}',
        spec,
    )
    assert words is not None
    assert words.hidden_info == {"email": "mia.k@example.com"}


def test_checks_catch_tool_names_ids_answers_and_missing_slots() -> None:
    spec = _spec()
    ok = Words(persona="A home cook.", goal="What does the Vortex 600 Blender cost?")
    assert check_words(ok, spec) == []
    named = ok.model_copy(update={"goal": "Call search_products for the Vortex 600 Blender."})
    assert check_words(named, spec) == ["tool_name: search_products"]
    leaked = ok.model_copy(update={"goal": "What does P100 (Vortex 600 Blender) cost?"})
    assert check_words(leaked, spec) == ["leakage: id P100"]
    answer = ok.model_copy(update={"goal": "Is the Vortex 600 Blender really 79.99?"})
    assert check_words(answer, spec) == ["leakage: the goal gives away the answer 79.99"]
    missing = ok.model_copy(update={"goal": "What does the blender cost?"})
    assert check_words(missing, spec) == [
        "unsolvable: query is neither in the goal nor in hidden_info"
    ]
    held = missing.model_copy(update={"hidden_info": {"query": "Vortex 600 Blender"}})
    assert check_words(held, spec) == []
    steps = ok.model_copy(
        update={"goal": "Search products, then add to cart the Vortex 600 Blender"}
    )
    assert check_words(steps, spec) == ["over_specification: names search_products, add_to_cart"]


def test_clarify_first_holds_one_slot_back() -> None:
    spec = _spec(mode="clarify_first", hidden_slot="query")
    stated = Words(persona="p", goal="What does the Vortex 600 Blender cost?")
    assert "mode: clarify_first, but query is in the goal" in check_words(stated, spec)
    words = template_words(spec)
    assert "Vortex" not in words.goal
    assert words.hidden_info == {"query": "Vortex 600 Blender"}
    assert check_words(words, spec) == []


def test_recover_after_error_states_a_stale_value_first() -> None:
    spec = _spec(
        mode="recover_after_error",
        slots={"email": "mia.k@example.com", "query": "Vortex 600 Blender"},
        stale={"email": "mia.k@old-example.com"},
    )
    words = template_words(spec)
    assert words.goal.startswith("My email is mia.k@old-example.com.")
    assert words.hidden_info == {"email": "mia.k@example.com"}
    assert check_words(words, spec) == []
    assert stale_value("#W1005", {"#W1005", "#W1006"}) == "#W1004"
    assert stale_value("ann@example.com", set()) == "ann@old-example.com"
    assert stale_value("blue", set()) is None


def test_template_goal_is_short_and_explicit_for_a_read() -> None:
    words = template_words(_spec())
    assert words == Words(
        persona="A shopper at an online store.",
        goal="What is the price of Vortex 600 Blender?",
    )
    assert check_words(words, _spec()) == []


def test_template_names_every_write_and_its_details() -> None:
    spec = _spec(
        steps=["look up a customer account by email address", "add units of a product to my cart"],
        actions=["add units of a product to my cart", "check out my cart"],
        slots={"email": "mia.k@example.com", "product": "Red Ceramic Mug"},
        labels={},
        answer=None,
        mode="verify_after_write",
    )
    words = template_words(spec)
    assert words.goal == (
        "My email is mia.k@example.com. Please add units of a product to my cart, then check "
        'out my cart: product: "Red Ceramic Mug". Please confirm that it went through.'
    )
    assert check_words(words, spec) == []


def test_pick_answer_prefers_the_matching_item_and_telling_fields() -> None:
    search = GoldCall(
        tool="search_products",
        arguments={"query": "mug"},
        observation={
            "query": "mug",
            "products": [
                {"product_id": "P104", "name": "Red Ceramic Mug", "price": 12.0, "in_stock": True},
                {"product_id": "P105", "name": "Blue Ceramic Mug", "price": 13.5},
            ],
        },
    )
    assert pick_answer([search], {"query": "Blue Ceramic Mug"}, ["query"]) == Answer(
        field="price", value=13.5, subject="Blue Ceramic Mug"
    )
    # several results and no slot singles one out: the lowest price
    assert pick_answer([search], {"query": "mug"}, ["query"]) == Answer(
        field="lowest price", value=12.0
    )
    user = GoldCall(
        tool="find_user_by_email",
        arguments={"email": "mia.k@example.com"},
        observation={"user_id": "mia_1", "name": "Mia Kim", "email": "mia.k@example.com"},
    )
    assert pick_answer([user], {"email": "mia.k@example.com"}, ["email"]) == Answer(
        field="name", value="Mia Kim"
    )
    ids_only = GoldCall(tool="x", arguments={}, observation={"order_id": "#W1", "refunds": []})
    assert pick_answer([ids_only], {}) is None


def test_of_several_lists_the_answer_comes_from_the_record_the_user_named() -> None:
    """server-memory's ``open_nodes`` answers with the entities and the relations between
    them; asked about Ada Lovelace, the answer is her record's, not nothing (the memory bench
    refused ``open_nodes`` tasks: "checks no outcome")."""
    graph = {
        "entities": [
            {"type": "entity", "name": "Ada Lovelace", "entityType": "person",
             "observations": ["Wrote the first program"]},
            {"type": "entity", "name": "Analytical Engine", "entityType": "machine",
             "observations": []},
        ],
        "relations": [
            {"type": "relation", "from": "Ada Lovelace", "to": "Analytical Engine",
             "relationType": "programmed"},
        ],
    }  # fmt: skip
    read = GoldCall(tool="open_nodes", arguments={"names": ["Ada Lovelace"]}, observation=graph)
    assert pick_answer([read], {"names": ["Ada Lovelace"]}, ["names"]) == Answer(
        field="entityType", value="person", subject="Ada Lovelace"
    )
    # nothing named: a whole graph singles out no record
    everything = GoldCall(tool="read_graph", arguments={}, observation=graph)
    assert pick_answer([everything], {}) is None


def test_a_text_answer_is_what_was_asked_without_the_tools_markup() -> None:
    """server-filesystem's answers: the file's lines without the header naming the file, a
    folder's entries without the listing's ``[DIR]``/``[FILE]`` tags (the filesystem bench
    asked a user to be told "[DIR] docs"); a tag inside a line is the line's own text."""
    read = GoldCall(
        tool="read_multiple_files",
        arguments={"paths": ["docs/groceries.txt"]},
        observation={"content": "docs/groceries.txt:\nmilk\neggs\nbread\n\n"},
    )
    answer = pick_answer([read], {"paths": ["docs/groceries.txt"]}, ["paths"])
    assert answer is not None and answer.value == "milk\neggs\nbread"
    listing = GoldCall(
        tool="list_directory",
        arguments={"path": "."},
        observation={"content": "[DIR] docs\n[FILE] notes.txt"},
    )
    answer = pick_answer([listing], {"path": "."}, ["path"])
    assert answer is not None and answer.value == "docs\nnotes.txt"
    note = GoldCall(
        tool="read_text_file",
        arguments={"path": "a.txt"},
        observation={"content": "see [TODO] list"},
    )
    answer = pick_answer([note], {"path": "a.txt"}, ["path"])
    assert answer is not None and answer.value == "see [TODO] list"


def test_clarify_first_holds_back_a_value_no_other_slot_repeats() -> None:
    """mcp-server-time: the timezone converted from and to are one value; holding back one
    of them while the goal states the other could never pass the check, so a slot with a
    value of its own is held back, and the template's words pass. The current time read
    first is a read the question does not depend on: its timezone is not the user's to say."""
    cluster = _outside_cluster(
        "time",
        ["mcp-server-time"],
        _string_tool(
            "get_current_time", "timezone", description="Get the current time in a timezone."
        ),
        _string_tool(
            "convert_time",
            "source_timezone",
            "time",
            "target_timezone",
            description="Convert a time between timezones.",
        ),
    )
    slots = {
        "timezone": "Asia/Tokyo",
        "source_timezone": "America/New_York",
        "time": "18:45",
        "target_timezone": "America/New_York",
    }
    steps = [
        PlannedCall(tool="get_current_time", args={"timezone": SlotArg(name="timezone")}),
        PlannedCall(
            tool="convert_time",
            args={p: SlotArg(name=p) for p in ("source_timezone", "time", "target_timezone")},
        ),
    ]
    calls = [
        GoldCall(tool="get_current_time", arguments={"timezone": "America/New_York"}),
        GoldCall(tool="convert_time", arguments={k: slots[k] for k in list(slots)[1:]}),
    ]
    spec = words_spec(cluster, ReasoningMode.CLARIFY_FIRST, steps, slots, calls, None)
    assert "timezone" not in spec.slots
    assert spec.hidden_slot == "time"
    words = template_words(spec)
    assert "Asia/Tokyo" not in words.goal and "18:45" not in words.goal
    assert words.hidden_info == {"time": "18:45"}
    assert check_words(words, spec) == []


def test_recover_after_error_without_an_initial_state_still_states_a_stale_value() -> None:
    """``initial_state`` is optional: with a slot's source ("table.column") named but no
    state to read that column from, the stale value is drawn from the slot alone (it used
    to read ``None.tables``)."""
    cluster = _outside_cluster(
        "orders",
        ["orders-server"],
        _string_tool("cancel_order", "order_id", access=ToolAccess.WRITE),
    )
    slots = {"order_id": "#W1005"}
    steps = [PlannedCall(tool="cancel_order", args={"order_id": SlotArg(name="order_id")})]
    calls = [GoldCall(tool="cancel_order", arguments=dict(slots))]
    spec = words_spec(
        cluster,
        ReasoningMode.RECOVER_AFTER_ERROR,
        steps,
        slots,
        calls,
        None,
        slot_sources={"order_id": "orders.order_id"},
    )
    assert set(spec.stale) == {"order_id"}
    assert spec.stale["order_id"] not in (None, "#W1005")


def test_a_parameter_two_calls_take_is_named_by_its_call() -> None:
    """server-filesystem: list_directory(path) then write_file(path, content). "path: .;
    path 2: todo.md" led the embedded model to write to a file named "2"; the write does not
    depend on the listing, so the goal names only the file written and what goes in it."""
    cluster = _outside_cluster(
        "filesystem",
        ["mcp-server-filesystem", "."],
        _string_tool("list_directory", "path", access=ToolAccess.READ),
        _string_tool("write_file", "path", "content", access=ToolAccess.WRITE),
    )
    slots = {"path": ".", "path_2": "todo.md", "content": "Wrote to todo.md"}
    steps = [
        PlannedCall(tool="list_directory", args={"path": SlotArg(name="path")}),
        PlannedCall(
            tool="write_file",
            args={"path": SlotArg(name="path_2"), "content": SlotArg(name="content")},
        ),
    ]
    calls = [
        GoldCall(tool="list_directory", arguments={"path": "."}),
        GoldCall(tool="write_file", arguments={"path": "todo.md", "content": "Wrote to todo.md"}),
    ]
    spec = words_spec(cluster, ReasoningMode.DIRECT_EXECUTE, steps, slots, calls, None)
    assert set(spec.slots) == {"path_2", "content"}
    goal = template_words(spec).goal
    # text of several words is quoted: "content: Wrote to todo.md." had the model write the
    # sentence's period into the file
    assert goal == 'Please write "Wrote to todo.md" to the file todo.md.'
    assert check_words(template_words(spec), spec) == []


def test_a_list_whose_items_all_match_the_request_is_counted_not_answered_by_its_first() -> None:
    """Both of the day's events carry the date the user asked about, so neither is singled
    out: the question becomes how many there are, not the first one's start time."""
    events = [
        {
            "event_id": "EV1001",
            "title": "Team standup",
            "date": "2025-06-02",
            "start_time": "09:00",
        },
        {
            "event_id": "EV1003",
            "title": "Design review",
            "date": "2025-06-02",
            "start_time": "14:00",
        },
    ]
    args = {"user_id": "hannah", "date": "2025-06-02"}
    two = GoldCall(tool="list_events", arguments=args, observation={**args, "events": events})
    answer = pick_answer([two], {"query": "Hannah Schmidt"}, inputs=list(args))
    assert answer is not None and (answer.field, answer.value) == ("number of events", 2)
    one = two.model_copy(update={"observation": {**args, "events": events[:1]}})
    answer = pick_answer([one], {"query": "Hannah Schmidt"}, inputs=list(args))
    assert answer is not None and (answer.field, answer.value) == ("start_time", "09:00")


def test_two_values_under_one_label_are_ambiguous() -> None:
    """The words "path: README.md; path: data/sales.csv" do not say which file is read and which is
    written; the check refuses such words, the template names each by its call's verb."""
    ambiguous = Words(
        persona="a developer",
        goal="Please create or overwrite a text file: path: README.md; path: data/sales.csv.",
    )
    spec = _spec(slots={"path": "README.md", "path_2": "data/sales.csv"}, answer=None,
                 labels={}, known_ids=[])  # fmt: skip
    problems = check_words(ambiguous, spec)
    assert any(p.startswith("ambiguous: 'path' labels 2 values") for p in problems), problems
    told = ambiguous.model_copy(
        update={"goal": "Please copy a file: path to read: README.md; path to write: b.md."}
    )
    assert not [p for p in check_words(told, spec) if p.startswith("ambiguous")]
    # one value stated twice is not two values
    again = ambiguous.model_copy(update={"goal": "Please delete: path: a.md; path: a.md."})
    assert not [p for p in check_words(again, spec) if p.startswith("ambiguous")]


def test_two_calls_about_one_kind_of_thing_are_named_by_their_verbs() -> None:
    """read_file(path) then write_file(path, content): both are about a file, so the labels
    say which path is read and which is written."""
    cluster = _outside_cluster(
        "files",
        ["files-server"],
        _string_tool("read_file", "path", access=ToolAccess.READ),
        _string_tool("write_file", "path", "content", access=ToolAccess.WRITE),
    )
    slots = {"path": "README.md", "path_2": "notes.md"}
    steps = [
        PlannedCall(tool="read_file", args={"path": SlotArg(name="path")}),
        PlannedCall(
            tool="write_file",
            args={"path": SlotArg(name="path_2"), "content": RefArg(step=0, field="content")},
        ),
    ]
    calls = [
        GoldCall(tool="read_file", arguments={"path": "README.md"}, observation={"content": "x"}),
        GoldCall(tool="write_file", arguments={"path": "notes.md", "content": "x"}),
    ]
    spec = words_spec(cluster, ReasoningMode.DIRECT_EXECUTE, steps, slots, calls, None)
    assert (spec.labels["path"], spec.labels["path_2"]) == ("path to read", "path to write")
    assert not [p for p in check_words(template_words(spec), spec) if p.startswith("ambiguous")]


def _outside_spec(**kw: object) -> WordsSpec:
    """A write to a file on an outside server: its descriptions are written for a model."""
    base: dict[str, object] = {
        "domain": "other",
        "mode": "direct_execute",
        "steps": ["create a new file or completely overwrite an existing file with new content"],
        "slots": {"path": "docs/a.txt", "content": "hi there"},
        "tool_names": ["write_file", "get-sum", "echo"],
        "outside": True,
        "descriptions": [
            "Create a new file or completely overwrite an existing file with new content. "
            "Use with caution.",
            "Adds two numbers.",
            "Echoes back the input.",
        ],
    }
    base.update(kw)
    return WordsSpec.model_validate(base)


def _kinds(goal: str, spec: WordsSpec) -> list[str]:
    return [p.split(":")[0] for p in check_words(Words(persona="p", goal=goal), spec)]


def test_a_request_in_the_users_voice_passes_the_outside_check() -> None:
    spec = _outside_spec()
    assert _kinds('Please write "hi there" to the file docs/a.txt.', spec) == []


def test_an_outside_goal_that_asks_for_nothing_is_refused() -> None:
    """A SmolLM2 draft on the sqlite bench stated the insight it was to append and asked for
    nothing; a question, a please, a want or an order opening the goal is a request."""
    spec = _outside_spec(slots={"path": "docs/a.txt", "content": "The budget is due Friday"})
    stated = "The budget is due Friday, as docs/a.txt says in the shared folder."
    assert _kinds(stated, spec) == ["not_a_request"]
    for asked in (
        'Write "The budget is due Friday" to docs/a.txt.',
        'Could you save "The budget is due Friday" in docs/a.txt?',
        'I need "The budget is due Friday" saved in docs/a.txt.',
        'Please save "The budget is due Friday" in docs/a.txt.',
    ):
        assert _kinds(asked, spec) == [], asked


def test_the_outside_check_refuses_each_kind_of_goal_no_person_writes() -> None:
    spec = _outside_spec()
    restated = (
        'Please create a new file or completely overwrite an existing file: "hi there" in '
        "docs/a.txt."
    )
    assert _kinds(restated, spec) == ["restates_description"]
    # most of a description's first sentence, even out of order, is still the description
    shuffled = (
        'With new content "hi there", overwrite an existing file or create a new file docs/a.txt.'
    )
    assert _kinds(shuffled, spec) == ["restates_description"]
    assert _kinds('Please call write_file with "hi there" and docs/a.txt.', spec) == ["tool_name"]
    assert _kinds('Run get-sum, then save "hi there" in docs/a.txt.', spec) == ["tool_name"]
    assert _kinds('Use `echo` to say "hi there", then save it in docs/a.txt.', spec) == [
        "tool_name"
    ]
    labelled = 'Please save the file: path: docs/a.txt; content: "hi there".'
    assert _kinds(labelled, spec) == ["label_list"]
    joined = 'What is in it for path: docs/a.txt and content: "hi there"?'
    assert _kinds(joined, spec) == ["label_list"]
    assert _kinds("mcp-eval", _outside_spec(slots={})) == ["too_short"]
    # a prompt about the user (a bench draft of SmolLM2's), not the user speaking
    about = 'Your user wants "hi there" in docs/a.txt. Here is how you can respond: save it.'
    assert _kinds(about, spec) == ["not_the_users_voice"]
    assert _kinds('The user wants "hi there" saved in docs/a.txt.', spec) == ["not_the_users_voice"]
    assert _kinds('Please save "hi there" in docs/a.txt for the user group.', spec) == []
    # a value's own words and colons are the user's: a file's text may quote a description
    quoting = _outside_spec(
        slots={"path": "docs/a.txt", "content": "Note: create a new file or completely overwrite"}
    )
    assert (
        _kinds(
            'Please write "Note: create a new file or completely overwrite" to docs/a.txt.', quoting
        )
        == []
    )


def test_an_outside_goal_on_another_subject_is_refused() -> None:
    """A draft that names nothing the calls do or are about, and none of the user's values,
    is off topic (a bench draft of SmolLM2's for append_insight); a paraphrase naming the
    insight, or one stating the value, is not."""
    clause = Clause(step=0, verb="append", noun="insight", words="append insight",
                    access=ToolAccess.WRITE)  # fmt: skip
    spec = _outside_spec(slots={"insight": "Travel costs doubled"}, clauses=[clause])
    nonsense = (
        "This is an unexpected and unhelpful piece of code that can be easily prevented with a "
        "few simple adjustments to the SQL syntax."
    )
    no_values = _outside_spec(slots={}, clauses=[clause])  # nothing else to miss
    assert _kinds(nonsense, no_values) == ["off_topic"]
    assert _kinds("Please add an insight about our travel costs to the memo.", no_values) == []
    assert _kinds('Please add the insight "Travel costs doubled" to the memo.', spec) == []
    assert _kinds('Please note down for me: "Travel costs doubled", thanks a lot.', spec) == []


def test_the_bundled_clusters_keep_their_phrasing() -> None:
    """A bundled cluster's descriptions are written as requests and its template lists
    values under labels; the outside-only refusals do not apply to it."""
    spec = _spec(answer=None, slots={"query": "Vortex 600 Blender", "quantity": 2}, labels={})
    words = Words(
        persona="p",
        goal='Please search the catalogue by name: query: "Vortex 600 Blender"; quantity: 2.',
    )
    assert check_words(words, spec) == []


async def test_an_outside_draft_refused_by_the_check_falls_back_to_the_template(
    tmp_path: Path,
) -> None:
    """The planner's chain: each draft the words check refuses (a restated description, a
    label list, a tool name; each states the product, so nothing else is wrong with it) is
    counted as a draft, and the template writes the words. Control: a draft in the user's
    voice is taken as written."""
    shop = get_cluster("shop")
    tool = next(t for t in shop.tools if t.name == "search_products")
    cluster = shop.model_copy(update={"tools": [tool], "edges": [], "source": "outside"})
    cell = Cell(
        cluster_id="shop",
        path_shape=PathShape.SINGLE,
        target_mode=ReasoningMode.DIRECT_EXECUTE,
        difficulty=Difficulty.EASY,
    )

    async def plan(goals: list[str]) -> Blueprint:
        fake = ScriptedLLM(
            [tool_call("write_user_request", {"persona": "A cook.", "goal": g}) for g in goals]
        )
        bp = await plan_blueprint(
            Planner(retries=len(goals) - 1),
            fake.client(),
            lambda: InProcessEnvironment("shop", tmp_path),
            cluster,
            cell,
            3,
        )
        fake.assert_consumed()
        assert isinstance(bp, Blueprint), bp
        return bp

    product = str((await plan(["x"])).slots["query"])
    drafts = [
        f"Search the catalogue by name or description for the {product}.",
        f"Please find it: query: {product}; category: kitchen.",
        f"Call search_products for the {product}, please.",
    ]
    bp = await plan(drafts)
    assert (bp.words_source, bp.words_attempts) == ("template", 3)
    assert bp.goal not in drafts and "search_products" not in bp.goal
    assert not re.search(r"\w: \S", bp.goal), bp.goal
    good = f"I'm after the {product}, what does it cost these days?"
    control = await plan(drafts[:2] + [good])
    assert (control.words_source, control.words_attempts, control.goal) == ("llm", 3, good)


def test_an_outside_draft_is_asked_for_with_the_request_not_the_descriptions() -> None:
    description = "Create a new file or completely overwrite an existing file with new content."
    tool = _string_tool("write_file", "path", "content", description=description)
    cluster = _outside_cluster("files", ["files-server"], tool)
    slots: dict[str, JsonValue] = {"path": "docs/a.txt", "content": "hi there"}
    steps = [PlannedCall(tool="write_file", args={p: SlotArg(name=p) for p in slots})]
    calls = [GoldCall(tool="write_file", arguments=slots)]
    spec = words_spec(cluster, ReasoningMode.DIRECT_EXECUTE, steps, slots, calls, None)
    prompt = build_messages("system", "{steps}\n{facts}\n{question}{mode}", spec)[1].content
    assert "overwrite" not in str(prompt)
    assert 'write "hi there" to the file docs/a.txt' in str(prompt)
