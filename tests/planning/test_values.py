"""The check that tells a user's value from a form's blank (``planning.values``), on the values
the outside bench's planned blueprints carried and on values a person would give."""

from __future__ import annotations

import pytest

from trajsynth.planning.values import CAMEL_MASH_CHARS, placeholder_reason, real_part

STRING: dict = {"type": "string"}
# server-memory's create_entities(entities), as the server lists it
ENTITIES: dict = {
    "type": "array",
    "items": {
        "type": "object",
        "properties": {
            "name": {"type": "string", "description": "The name of the entity"},
            "entityType": {"type": "string", "description": "The type of the entity"},
            "observations": {
                "type": "array",
                "items": {"type": "string"},
                "description": "An array of observation contents associated with the entity",
            },
        },
        "required": ["name", "entityType", "observations"],
    },
}
CREATE_ENTITIES = ["Create multiple new entities in the knowledge graph", "create entities"]
# server-sqlite's append_insight(insight)
INSIGHT: dict = {"type": "string", "description": "Business insight discovered from data analysis"}
APPEND_INSIGHT = ["Add a business insight to the memo", "append insight", "MCP server sqlite 0.1.0"]


@pytest.mark.parametrize(
    ("value", "kind"),
    [
        # planned on the bench (server-memory, server-filesystem, server-sqlite)
        ("Hello, my name is {name}", "template slot ({name})"),
        ("Dear <recipient name>, thanks", "template slot (<recipient name>)"),
        ("Total: %s items", "template slot (%s)"),
        ("Hi {{ user }}", "template slot"),
        ("value1", "generic placeholder"),
        ("Entity 1", "generic placeholder"),
        ("type_1234567890", "generic placeholder"),
        ("test123", "generic placeholder"),
        ("foo", "generic placeholder"),
        ("example", "generic placeholder"),
        ("exampleTable1", "generic placeholder"),
        ("data.value1", "generic placeholder"),
        ("items.description", "generic placeholder"),
        ("test.MCP", "generic placeholder"),
        ("Lorem ipsum dolor sit amet", "generic placeholder"),
        ("text in JSON", "generic placeholder"),
        ("string", "JSON type name"),
        ("array", "JSON type name"),
        ("get_queries.find(list({type: 'object', properties: {id: 1}}))", "JSON-schema fragment"),
        ("business.BusinessInsightBusinessExecutionResultsCustomBuildIn", "identifier mash"),
        ("add_business.BusinessInsight", "identifier mash"),
    ],
)
def test_each_kind_of_blank_is_refused_with_its_reason(value: str, kind: str) -> None:
    why = placeholder_reason(value, STRING)
    assert why is not None and kind in why, (value, why)


@pytest.mark.parametrize(
    "value",
    [
        "Append Business Insights to the SQLite database",  # the tool's name and server's
        "A business insight discovered from data analysis",  # the parameter's description
        "Append business insight to the memo",
        "Value to be added to a business insight",  # a blank's words with the description's
        "Custom_Insight",
    ],
)
def test_a_value_that_restates_the_description_is_refused(value: str) -> None:
    assert placeholder_reason(value, INSIGHT, APPEND_INSIGHT) == "restates the description"


def test_the_bench_entities_are_refused_at_the_field_that_gives_them_away() -> None:
    """The JSON schema copied in as the value (``"entityType": "array"``), the description as
    the name, a schema fragment in place of an object."""
    cases = [
        ([{"entityType": "array", "name": "The name of the entity", "observations": []}],
         "entityType: is a JSON type name"),
        ([{"entityType": "person", "name": "The name of the entity", "observations": []}],
         "name: is a generic placeholder"),
        ([{"entityType": "person", "name": "Name of entity2", "observations": []}],
         "name: is a generic placeholder"),
        ([{"entityType": "person", "name": "type_1234567890", "observations": []}],
         "name: is a generic placeholder"),
        ([{"type": "object", "properties": {"name": {"type": "string"}}}],
         "is a JSON-schema fragment"),
    ]  # fmt: skip
    for value, reason in cases:
        assert placeholder_reason(value, ENTITIES, CREATE_ENTITIES) == reason, value


@pytest.mark.parametrize(
    "value",
    [
        "Ada Lovelace",
        "person",
        "Acme Corp",
        "works_at",
        "Meeting with Sam about the budget on Friday at 10am.",
        "Rent 1200, food 300",
        "2025-03-14",
        "2025-03-14T15:30:00Z",
        "17d9526e-cab8-4f0a-bcd2-febeafeeefdc",
        "u_1",
        "release-2.0",
        "docs/meeting.txt",
        "budget-2027.txt",
        "America/New_York",
        "SELECT name FROM sqlite_master WHERE type = 'table'",
        "SELECT item, amount FROM expenses WHERE amount > 100",
        "INSERT INTO expenses (item, amount) VALUES ('coffee', 3.5)",
        "Sales of umbrellas doubled in the rainy weeks of March",
        "<b>Bold</b> claims need sources",
        "Project Apollo",
        "The meeting type: weekly; items: 3",
        "Business data shows growth",
    ],
)
def test_a_real_value_passes(value: str) -> None:
    schema = {"type": "string", "description": "IANA timezone name (e.g. 'America/New_York')"}
    assert placeholder_reason(value, schema, ["Get the current time in a timezone"]) is None
    assert placeholder_reason(value, INSIGHT, APPEND_INSIGHT) is None


def test_real_entities_pass_and_a_list_keeps_its_real_items() -> None:
    ada = {"name": "Ada Lovelace", "entityType": "person",
           "observations": ["Wrote the first program for the Analytical Engine"]}  # fmt: skip
    assert placeholder_reason([ada], ENTITIES, CREATE_ENTITIES) is None
    blank = {"entityType": "array", "name": "The name of the entity", "observations": []}
    kept, why = real_part([blank, ada], ENTITIES, CREATE_ENTITIES)
    assert kept == [ada] and why == "entityType: is a JSON type name"
    assert real_part([blank], ENTITIES, CREATE_ENTITIES) == (
        None,
        "entityType: is a JSON type name",
    )


def test_a_value_the_server_listed_is_never_refused() -> None:
    """A record the server itself returned is the server's, however it reads (a table the
    user's database really calls ``test123``)."""
    assert placeholder_reason("test123", STRING) is not None
    assert placeholder_reason("test123", STRING, world={'"test123"'}) is None


def test_an_enum_value_and_a_long_plain_identifier_pass() -> None:
    assert placeholder_reason("string", {"type": "string", "enum": ["string", "number"]}) is None
    # under the length, or no humps: a real snake_case id
    assert placeholder_reason("InvoiceDraft", STRING) is None
    assert placeholder_reason("customer_lifetime_value_2024", STRING) is None
    assert len("customer_lifetime_value_2024") > CAMEL_MASH_CHARS


def test_a_name_is_no_sentence_and_no_code() -> None:
    """A field or parameter that holds a name (``name``, ``entityName``, ``branch_name``)
    refuses code and long text; the same text elsewhere (a file's content) is content."""
    junk = "the_typeof_data(value) that is returned by function createdByMCP (2016-3-7 14:59"
    entity = [{"name": junk, "entityType": "person", "observations": []}]
    why = placeholder_reason(entity, ENTITIES, CREATE_ENTITIES)
    assert why is not None and why.startswith("name: is no name"), why
    assert placeholder_reason("release (final)", STRING, param="branch_name") is not None
    assert placeholder_reason("release-2.0", STRING, param="branch_name") is None
    assert placeholder_reason(junk, STRING, param="content") is None


@pytest.mark.parametrize(
    ("value", "why"),
    [
        # written into docs/meeting.txt by the filesystem bench
        ("123", "is no text a person writes (under 2 words)"),
        ("./*.json", "is a path or a pattern where text belongs"),
        ("docs/groceries.txt", "is a path or a pattern where text belongs"),
        ("file1.txt", "is a path or a pattern where text belongs"),
        ("ok", "is no text a person writes (under 2 words)"),
        ("10 20", "is no text a person writes (under 2 words)"),
        (
            "The Business Insights are available at: 17d9526e-cab8-4f0a-bcd-febeafeeefdceadc",
            "holds an id nobody gave (17d9526e-cab8-4f0a-bcd-febeafeeefdceadc)",
        ),
        (
            "true, 10.0, file_path: `/Users/myapp/Desktop/example-image.png`, \n",
            "holds a code field's label (file_path:)",
        ),
        ('Saved "entityType": person', 'holds a code field\'s label ("entityType":)'),
    ],
)
def test_text_a_person_writes_is_words_not_a_number_or_a_pattern(value: str, why: str) -> None:
    assert placeholder_reason(value, STRING, param="content") == why
    # the same value where no text is asked for is a value like any other
    assert placeholder_reason(value, STRING, param="path") is None


@pytest.mark.parametrize(
    "value",
    [
        "Buy milk and eggs",
        "Meet Ann at 10/12",
        "Rent 1200",
        "Plan A",
        "Café au lait",
        "Order 20261102 shipped late",
        "Deadbeef cafe opens at 9",
        "Agenda: budget, hiring",
        "Notes from https://example.org: read later",
    ],
)
def test_a_short_note_passes_as_text(value: str) -> None:
    assert placeholder_reason(value, STRING, param="content") is None
    assert placeholder_reason(value, INSIGHT, APPEND_INSIGHT, param="insight") is None


def test_an_observation_list_keeps_its_sentences() -> None:
    schema = {"type": "array", "items": {"type": "string"}}
    assert real_part(["person", "Lives in Paris"], schema, param="contents") == (
        ["Lives in Paris"],
        "is no text a person writes (under 2 words)",
    )
