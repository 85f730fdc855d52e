"""Schema-only argument values written by the planner LLM under the parameters' JSON schemas,
with the scripted fake LLM behind the real openai client."""

from __future__ import annotations

import pytest
from fakes.llm import ScriptedLLM, tool_call

from trajsynth.planning.admission import Refusal
from trajsynth.planning.argfill import (
    DRAWS,
    FILL_TOOL,
    REFUSED_REASON,
    fill_slots,
    fillable_slots,
    fits_items,
    unfilled,
)
from trajsynth.planning.paths import PlannedPath
from trajsynth.planning.values import placeholder_reason
from trajsynth.schemas import (
    Difficulty,
    Domain,
    PathShape,
    PlannedCall,
    ServerKind,
    ServerSpec,
    SlotArg,
    ToolCluster,
    ToolSpec,
)

NOTES = ToolCluster(
    cluster_id="notes",
    domain=Domain.PRODUCTIVITY,
    description="A notebook of titled notes.",
    server=ServerSpec(kind=ServerKind.STDIO, command=["notes-mcp"]),
    source="outside",
    tools=[
        ToolSpec(
            name="put",
            description="Keep a note under a title.",
            input_schema={
                "type": "object",
                "properties": {
                    "title": {"type": "string", "description": "the note's title"},
                    "pages": {"type": "integer", "minimum": 1},
                    "folder": {"type": "string"},
                },
                "required": ["title", "pages", "folder"],
            },
        )
    ],
)
PATH = PlannedPath(
    cluster_id="notes",
    shape=PathShape.SINGLE,
    difficulty=Difficulty.EASY,
    steps=[
        PlannedCall(
            tool="put",
            args={
                "title": SlotArg(name="title"),
                "pages": SlotArg(name="pages"),
                "folder": SlotArg(name="folder"),
            },
        )
    ],
    slots={"title": "notes", "pages": 1, "folder": "/work"},
    slot_sources={"title": "schema", "pages": "schema", "folder": "spec"},  # folder: --arg
)


def test_only_schema_only_slots_are_offered() -> None:
    assert set(fillable_slots(NOTES, PATH)) == {"title", "pages"}  # the --arg value stays


async def test_the_llm_fills_slots_under_their_schemas_and_bad_values_keep_the_schemas() -> None:
    fake = ScriptedLLM([tool_call(FILL_TOOL, {"title": "Dentist on Friday", "pages": "two"})])
    filled, usage = await fill_slots(fake.client(), NOTES, PATH, seed=1)
    fake.assert_consumed()
    request = fake.requests[0]
    assert request["tool_choice"] == "required"
    [tool] = request["tools"]
    params = tool["function"]["parameters"]
    assert params["required"] == ["title", "pages"]
    assert params["properties"]["pages"]["minimum"] == 1  # the slot's own schema, kept
    assert filled is not None and len(usage) == 1
    assert filled.slots == {"title": "Dentist on Friday", "pages": 1, "folder": "/work"}
    assert filled.slot_sources["title"] == "llm" and filled.slot_sources["pages"] == "schema"


async def test_no_fitting_value_leaves_the_path_as_it_was() -> None:
    fake = ScriptedLLM([tool_call(FILL_TOOL, {"title": "", "pages": -3.5})])
    filled, usage = await fill_slots(fake.client(), NOTES, PATH, seed=1)
    assert filled is None and len(usage) == 1


async def test_a_made_up_or_wordless_value_from_the_llm_is_not_taken() -> None:
    """A small model asked for a value with no example to copy answered ``example`` (the
    request's own word) and ``);;;;`` under the grammar: neither becomes a task's value; the
    slot is asked again (``DRAWS`` requests), and a slot with nothing else to fill it refuses
    the path with the values and why (``placeholder_value``)."""
    path = PATH.model_copy(update={"slots": {**PATH.slots, "title": None}})
    fake = ScriptedLLM([tool_call(FILL_TOOL, {"title": "example", "pages": 2})] * DRAWS)
    filled, usage = await fill_slots(fake.client(), NOTES, path, seed=1)
    fake.assert_consumed()
    assert isinstance(filled, Refusal) and filled.reason == REFUSED_REASON == "placeholder_value"
    assert 'put.title = "example": is a made-up record' in filled.detail and filled.tool == "put"
    assert len(usage) == DRAWS
    asked = fake.requests[0]["messages"][-1]["content"]
    assert "the example" not in asked  # no example to copy is named
    assert [line for line in asked.splitlines() if line.startswith("- title")] == [
        "- title (put.title)"
    ]
    # the redraws ask only the refused slot, under other seeds
    assert set(fake.requests[1]["tools"][0]["function"]["parameters"]["properties"]) == {"title"}
    assert len({r["seed"] for r in fake.requests}) == DRAWS
    fake = ScriptedLLM([tool_call(FILL_TOOL, {"title": ");;;;", "pages": 2})] * DRAWS)
    filled, _ = await fill_slots(fake.client(), NOTES, path, seed=1)
    assert isinstance(filled, Refusal) and "has no word in it" in filled.detail
    fake = ScriptedLLM([tool_call(FILL_TOOL, {"title": "Dentist on Friday", "pages": 2})])
    filled, _ = await fill_slots(fake.client(), NOTES, path, seed=1)
    assert isinstance(filled, PlannedPath) and filled.slots["title"] == "Dentist on Friday"
    assert not unfilled(filled)


FILES = ToolCluster(
    cluster_id="files",
    domain=Domain.PRODUCTIVITY,
    description="A folder of documents.",
    server=ServerSpec(kind=ServerKind.STDIO, command=["files-mcp"]),
    source="outside",
    tools=[
        ToolSpec(
            name="list_directory",
            access="read",
            input_schema={
                "type": "object",
                "properties": {"path": {"type": "string"}},
                "required": ["path"],
            },
        ),
        ToolSpec(
            name="write_file",
            access="write",
            description="Create a new file or completely overwrite an existing file.",
            input_schema={
                "type": "object",
                "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
                "required": ["path", "content"],
            },
        ),
    ],
    # discovery listed the work dir and the folder it named (mcp_servers.listings)
    arg_values={"list_directory": {"path": [".", "docs"]}},
)
WRITE = PlannedPath(
    cluster_id="files",
    shape=PathShape.SINGLE,
    difficulty=Difficulty.EASY,
    steps=[
        PlannedCall(
            tool="write_file",
            args={"path": SlotArg(name="path"), "content": SlotArg(name="content")},
        )
    ],
    slots={"path": None, "content": None},
    slot_sources={"path": "schema", "content": "schema"},
)


async def test_a_new_file_is_named_by_the_llm_in_a_folder_the_server_lists() -> None:
    """server-filesystem's writes need a path to create, which no read returns: the folder is
    one its listings name (``docs``), the name the user's (the LLM's)."""
    fake = ScriptedLLM(
        [tool_call(FILL_TOOL, {"path": "budget-2027.txt", "content": "Rent 1200, food 300"})]
    )
    filled, _ = await fill_slots(fake.client(), FILES, WRITE, seed=3)
    assert filled is not None and not unfilled(filled)
    assert filled.slots["path"] == "docs/budget-2027.txt"
    assert filled.slots["content"] == "Rent 1200, food 300"
    asked = fake.requests[0]["messages"][-1]["content"]
    assert "- path: the name of a new file in the folder docs" in asked
    # a path it gives directly in a listed folder is kept as given
    fake = ScriptedLLM([tool_call(FILL_TOOL, {"path": "./plan.txt", "content": "Plan A"})] * 2)
    fake.steps.append(tool_call(FILL_TOOL, {"path": "plan.txt"}))
    filled, _ = await fill_slots(fake.client(), FILES, WRITE, seed=3)
    fake.assert_consumed()  # "./plan.txt" is not normal: asked again, twice
    assert isinstance(filled, PlannedPath) and filled.slots["path"] == "docs/plan.txt"
    assert filled.slots["content"] == "Plan A"  # kept from the first answer
    fake = ScriptedLLM([tool_call(FILL_TOOL, {"path": "plan.txt", "content": "Plan A"})])
    filled, _ = await fill_slots(fake.client(), FILES, WRITE, seed=3)
    assert filled is not None and filled.slots["path"] == "docs/plan.txt"


async def test_a_path_outside_the_listed_folders_a_placeholder_or_a_tool_name_is_refused() -> None:
    """Controls: a folder the server never listed, an escape, an absolute path, a
    placeholder name, and a tool's identifier (the bench's goals named ``write_file``)."""
    for made_up in ("/etc/budget.txt", "../budget.txt", "private/budget.txt", "notes.txt",
                    "write_file.txt", "docs/../budget.txt"):  # fmt: skip
        fake = ScriptedLLM(
            [tool_call(FILL_TOOL, {"path": made_up, "content": "Rent 1200"})] * DRAWS
        )
        filled, _ = await fill_slots(fake.client(), FILES, WRITE, seed=3)
        assert isinstance(filled, Refusal) and "write_file.path" in filled.detail, made_up
        assert "write_file.content" not in filled.detail  # the content was kept
    fake = ScriptedLLM(
        [tool_call(FILL_TOOL, {"path": "rent.txt", "content": "use write_file for rent"})] * DRAWS
    )
    filled, _ = await fill_slots(fake.client(), FILES, WRITE, seed=3)
    assert isinstance(filled, Refusal) and "write_file.content" in filled.detail
    assert "names a tool" in filled.detail
    # with no folder listed, a path is an ordinary slot: no new file may be named
    bare = FILES.model_copy(update={"arg_values": {}})
    fake = ScriptedLLM([tool_call(FILL_TOOL, {"path": "budget.txt", "content": "Rent 1200"})])
    filled, _ = await fill_slots(fake.client(), bare, WRITE, seed=3)
    asked = fake.requests[0]["messages"][-1]["content"]
    assert "- path (write_file.path)" in asked and "new file in the folder" not in asked


async def test_another_tool_s_description_is_no_content() -> None:
    """The request lists every tool of the path with its description; a model wrote
    ``list_allowed_directories``'s into a note. Control: the same words for a path without
    that tool are the user's text."""
    lister = ToolSpec(
        name="list_allowed_directories",
        access="read",
        description="The list of directories that this server is allowed to access.",
    )
    cluster = FILES.model_copy(update={"tools": [*FILES.tools, lister]})
    listed = PlannedCall(tool="list_allowed_directories", args={})
    path = WRITE.model_copy(update={"steps": [listed, *WRITE.steps]})
    copied = "The list of directories that this server is allowed to access."
    fake = ScriptedLLM([tool_call(FILL_TOOL, {"path": "plan.txt", "content": copied})] * DRAWS)
    filled, _ = await fill_slots(fake.client(), cluster, path, seed=3)
    assert isinstance(filled, Refusal) and "restates the description" in filled.detail
    fake = ScriptedLLM([tool_call(FILL_TOOL, {"path": "plan.txt", "content": copied})])
    filled, _ = await fill_slots(fake.client(), cluster, WRITE, seed=3)
    assert isinstance(filled, PlannedPath) and filled.slots["content"] == copied


_ITEM_NAME = {"type": "string", "description": "The name of the entity"}
MEMORY = ToolCluster(
    cluster_id="memory",
    domain=Domain.PRODUCTIVITY,
    description="MCP server memory",
    server=ServerSpec(kind=ServerKind.STDIO, command=["mcp-server-memory"]),
    source="outside",
    tools=[
        ToolSpec(
            name="create_entities",
            access="write",
            description="Create multiple new entities in the knowledge graph",
            input_schema={
                "type": "object",
                "properties": {
                    "entities": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "properties": {
                                "name": _ITEM_NAME,
                                "entityType": {
                                    "type": "string",
                                    "description": "The type of the entity",
                                },
                                "observations": {
                                    "type": "array",
                                    "items": {"type": "string"},
                                    "description": "An array of observation contents",
                                },
                            },
                            "required": ["name", "entityType", "observations"],
                        },
                    }
                },
                "required": ["entities"],
            },
        ),
        ToolSpec(
            name="create_relations",
            access="write",
            description="Create multiple new relations between entities in the knowledge graph",
            input_schema={
                "type": "object",
                "properties": {
                    "relations": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "properties": {
                                "from": {
                                    "type": "string",
                                    "description": "The name of the entity where the relation "
                                    "starts",
                                },
                                "to": {
                                    "type": "string",
                                    "description": "The name of the entity where the relation ends",
                                },
                                "relationType": {
                                    "type": "string",
                                    "description": "The type of the relation",
                                },
                            },
                            "required": ["from", "to", "relationType"],
                        },
                    }
                },
                "required": ["relations"],
            },
        ),
    ],
)
GRAPH = PlannedPath(
    cluster_id="memory",
    shape=PathShape.CHAIN,
    difficulty=Difficulty.MEDIUM,
    steps=[
        PlannedCall(tool="create_entities", args={"entities": SlotArg(name="entities")}),
        PlannedCall(tool="create_relations", args={"relations": SlotArg(name="relations")}),
    ],
    slots={"entities": None, "relations": None},
    slot_sources={"entities": "schema", "relations": "schema"},
)
ADA = {"name": "Ada Lovelace", "entityType": "person", "observations": ["Wrote the first program"]}
BABBAGE = {"name": "Charles Babbage", "entityType": "person", "observations": ["Built engines"]}


async def test_a_list_of_objects_is_filled_with_real_objects_whose_names_later_steps_reuse() -> (
    None
):
    """server-memory's ``entities`` and ``relations``: the request shows one object of the
    item's field names (not its JSON schema with descriptions to copy), the schema copied in
    as a value is refused and asked again, and a relation is drawn between the entities the
    same task created, not the names the model made up."""
    copied = [{"entityType": "array", "name": "The name of the entity", "observations": []}]
    made_up = [{"from": "Entity 1", "to": "Entity 2", "relationType": "works with"}]
    fake = ScriptedLLM(
        [
            tool_call(FILL_TOOL, {"entities": copied, "relations": made_up}),
            tool_call(FILL_TOOL, {"entities": [ADA, BABBAGE]}),
        ]
    )
    filled, usage = await fill_slots(fake.client(), MEMORY, GRAPH, seed=5)
    fake.assert_consumed()
    assert isinstance(filled, PlannedPath) and len(usage) == 2
    assert filled.slots["entities"] == [ADA, BABBAGE]
    # the relation's ends are the entities created by the step before it
    assert filled.slots["relations"] == [
        {"from": "Ada Lovelace", "to": "Charles Babbage", "relationType": "works with"}
    ]
    assert filled.slot_sources == {"entities": "llm", "relations": "llm"}
    first = fake.requests[0]
    asked = first["messages"][-1]["content"]
    assert (
        '- entities (create_entities.entities): 1 to 2 objects, each {"name": …, '
        '"entityType": …, "observations": […]}' in asked
    )
    shown = first["tools"][0]["function"]["parameters"]["properties"]["entities"]
    assert shown["maxItems"] == 2 and shown["minItems"] == 1
    assert "The name of the entity" not in str(shown)  # the inner descriptions are left out
    assert shown["items"]["required"] == ["name", "entityType", "observations"]
    # both were refused, both are asked again; the first answer's relation, read again once the
    # entities passed, is the one kept
    asked_again = fake.requests[1]["tools"][0]["function"]["parameters"]["properties"]
    assert set(asked_again) == {"entities", "relations"}


async def test_objects_that_break_the_item_schema_or_stay_blank_refuse_the_path() -> None:
    """An object missing a required field is no value; three draws of the schema copied in
    refuse the path with the values and why, which the planner records as the reason."""
    fake = ScriptedLLM([tool_call(FILL_TOOL, {"entities": [{"name": "Ada Lovelace"}]})] * DRAWS)
    path = GRAPH.model_copy(
        update={"steps": GRAPH.steps[:1], "slots": {"entities": None},
                "slot_sources": {"entities": "schema"}}
    )  # fmt: skip
    filled, _ = await fill_slots(fake.client(), MEMORY, path, seed=5)
    assert isinstance(filled, Refusal) and "does not fit the parameter's schema" in filled.detail
    copied = [{"entityType": "array", "name": "type_1234567890", "observations": []}]
    fake = ScriptedLLM([tool_call(FILL_TOOL, {"entities": copied})] * DRAWS)
    filled, usage = await fill_slots(fake.client(), MEMORY, path, seed=5)
    fake.assert_consumed()
    assert isinstance(filled, Refusal) and filled.reason == "placeholder_value"
    assert filled.tool == "create_entities" and len(usage) == DRAWS
    assert filled.detail.startswith("create_entities: no value a user would give after 3 draws")
    assert "create_entities.entities = " in filled.detail
    assert "entityType: is a JSON type name" in filled.detail


async def test_a_list_keeps_its_usable_items_and_drops_a_made_up_one() -> None:
    """An entity named with a placeholder (``example``) or a tool's name beside a real one:
    the real one is kept, not the whole answer refused; a list of nothing else is refused."""
    path = GRAPH.model_copy(
        update={"steps": GRAPH.steps[:1], "slots": {"entities": None},
                "slot_sources": {"entities": "schema"}}
    )  # fmt: skip
    made_up = {"name": "example", "entityType": "person", "observations": ["Lives in Paris"]}
    tool = {"name": "create_entities", "entityType": "person", "observations": ["Is a tool"]}
    fake = ScriptedLLM([tool_call(FILL_TOOL, {"entities": [ADA, made_up, tool]})])
    filled, _ = await fill_slots(fake.client(), MEMORY, path, seed=5)
    assert isinstance(filled, PlannedPath) and filled.slots["entities"] == [ADA]
    fake = ScriptedLLM([tool_call(FILL_TOOL, {"entities": [made_up, tool]})] * DRAWS)
    filled, _ = await fill_slots(fake.client(), MEMORY, path, seed=5)
    assert isinstance(filled, Refusal) and "is a made-up record" in filled.detail


async def test_a_relation_between_records_nobody_made_is_refused() -> None:
    """A path that draws relations without creating entities (``create_relations`` alone): on
    an empty graph a relation from "people" to "location" names nothing the server has, so it
    is refused; between entities the server's reads listed, it is kept."""
    path = GRAPH.model_copy(
        update={"steps": GRAPH.steps[1:], "slots": {"relations": None},
                "slot_sources": {"relations": "schema"}}
    )  # fmt: skip
    nowhere = [{"from": "people", "to": "location", "relationType": "built"}]
    fake = ScriptedLLM([tool_call(FILL_TOOL, {"relations": nowhere})] * DRAWS)
    filled, _ = await fill_slots(fake.client(), MEMORY, path, seed=2)
    assert isinstance(filled, Refusal)
    assert "from: names a record neither the path nor the server has" in filled.detail
    listed = MEMORY.model_copy(
        update={"arg_values": {"open_nodes": {"names": [["Ada Lovelace", "Analytical Engine"]]}}}
    )
    known = [{"from": "Ada Lovelace", "to": "Analytical Engine", "relationType": "built"}]
    fake = ScriptedLLM([tool_call(FILL_TOOL, {"relations": known})])
    filled, _ = await fill_slots(fake.client(), listed, path, seed=2)
    assert isinstance(filled, PlannedPath) and filled.slots["relations"] == known


@pytest.mark.llm
@pytest.mark.slow
async def test_the_embedded_model_fills_entities_and_relations_or_the_path_is_refused() -> None:
    """SmolLM2-135M under llama.cpp's grammar, asked for server-memory's entities and the
    relations between them: what is kept fits the item schema, passes the value check, and
    its relations join the entities it created; else the path is refused with the reason."""
    from trajsynth.llm.client import open_llm_client
    from trajsynth.schemas import LLMConfig

    async with open_llm_client(LLMConfig(max_tokens=256)) as llm:
        filled, usage = await fill_slots(llm, MEMORY, GRAPH, seed=0)
    assert 1 <= len(usage) <= DRAWS
    if isinstance(filled, Refusal):
        assert filled.reason == "placeholder_value" and "create_" in filled.detail
        return
    assert isinstance(filled, PlannedPath)
    entities, relations = filled.slots["entities"], filled.slots["relations"]
    schema = MEMORY.tool("create_entities").input_schema["properties"]["entities"]
    assert fits_items(entities, schema)
    assert placeholder_reason(entities, schema) is None
    names = {e["name"] for e in entities}
    assert all(r["from"] in names and r["to"] in names for r in relations), relations
