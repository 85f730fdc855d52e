"""Whether a value the planner LLM proposed is one a user would give, or a form's blank.

A small model asked for argument values copies what its request shows: the parameter's
description ("The name of the entity"), the JSON schema around it (``"entityType":
"array"``), the answer format's example (``value1``), a template (``Hello, my name is
{name}``), or strings a code base would hold (``type_1234567890``,
``business.BusinessInsightBusinessExecutionResultsCustomBuildIn``). Each of those ran as a
gold call and became a task's words. ``placeholder_reason`` names what is wrong with such a
value, or returns None for a value a person could have typed: a name, a sentence of content, an
ISO date, an id, an SQL statement over real tables. A parameter that holds text a person
writes (``PROSE_PARAMS``: a note's content, a comment, an observation) also refuses a number,
a path or a glob pattern, and a single word (``123`` and ``./*.json`` were written into a
note). ``real_part`` keeps the items of a list that pass, so one good entity of two is not
lost with the other.

The checks read the value against its own schema (and, for an object's fields, each field's
schema) and the texts the request showed beside it (``said``: descriptions and titles of the
parameter, the tool, the server). A value the server's own reads returned (``world``, as
canonical JSON) is never refused: it is the server's, however it reads.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from trajsynth.curation.canon import canonical_json
from trajsynth.mcp_servers.arguments import schema_kinds
from trajsynth.mcp_servers.tags import name_tokens

__all__ = [
    "CAMEL_MASH_CHARS",
    "NAME_CHARS",
    "PROSE_PARAMS",
    "PROSE_WORDS",
    "RESTATED_SHARE",
    "camel_mash",
    "placeholder_reason",
    "real_part",
    "said_words",
]

# a run of identifier characters with no space longer than this, built of three or more
# capitalised words or dotted parts, is a code base's string, not a user's
CAMEL_MASH_CHARS = 20
# a name (a field or parameter called ``name``, ``entityName``, ``branch_name``) is at most this
# long and holds no code punctuation: the bench named an entity "the_typeof_data(value) that
# is returned by function createdByMCP (2016-3-7 ..."
NAME_CHARS = 60
_CODE = re.compile(r"[(){};=<>\[\]]")
# parameters whose value is text a person writes (a note's content, a comment, an
# observation): the bench wrote "123" and the glob "./*.json" into a note
PROSE_PARAMS = frozenset(
    {"content", "contents", "text", "body", "message", "note", "notes", "comment", "observation",
     "observations", "description", "summary", "insight", "memo", "post", "tweet", "reply",
     "caption", "bio"}
)  # fmt: skip
# the fewest words (runs of letters or digits) such a text holds, one of them of letters
PROSE_WORDS = 2
_TOKEN = re.compile(r"[^\W_]+")
_LETTERS = re.compile(r"[^\W\d_]")
_PATH_OR_PATTERN = re.compile(r"[*?/\\]")
# a UUID or a long run of hex digits inside a text: an id no read returned (the sqlite bench
# appended an "insight" holding 17d9526e-cab8-4f0a-bcd-febeafeeefdceadc)
_HEX_ID = re.compile(
    r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f-]{4,}|\b(?=[0-9a-f]*\d)[0-9a-f]{16,}\b", re.I
)
_FILE_NAME = re.compile(r"^[\w.-]+\.[A-Za-z0-9]{1,5}$")
# a code field's label inside a text (``file_path:``, ``"userId":``): a model copying a form's
# fields, not a person writing a note
_CODE_LABEL = re.compile(r"[\"'`]?\b(?:[a-z]+_[a-z_]+|[a-z]+[A-Z]\w*)[\"'`]?\s*:(?!//)")
# the share of a value's words that the request's own texts hold, above which the value
# restates them
RESTATED_SHARE = 0.75

SCHEMA_KEYWORDS = frozenset(
    {"type", "properties", "items", "required", "description", "enum", "anyof", "oneof",
     "allof", "$schema", "additionalproperties", "format", "default", "minimum", "maximum",
     "title", "minitems", "maxitems", "const", "pattern", "examples", "$ref", "$defs"}
)  # fmt: skip
TYPE_NAMES = frozenset(
    {"string", "array", "object", "integer", "number", "boolean", "null", "list", "dict",
     "str", "int", "float", "bool", "json", "none", "undefined"}
)  # fmt: skip
# words that name a form's blank or a test fixture rather than a thing of the user's
GENERIC_WORDS = frozenset(
    {"example", "examples", "sample", "string", "text", "value", "val", "test", "testing",
     "foo", "bar", "baz", "qux", "placeholder", "lorem", "ipsum", "dolor", "dummy", "todo",
     "tbd", "xxx", "abc", "asdf", "data", "item", "entity", "name", "type", "key", "id",
     "obj", "object", "thing", "field", "param", "parameter", "arg", "argument", "node",
     "element", "content", "my", "some", "your", "input", "output", "result", "default",
     "description", "info", "attribute", "attr", "property", "prop", "items", "entities",
     "values", "names", "types", "keys", "column", "table", "record", "row", "list", "array",
     "relation", "observation", "label", "title", "new", "insert", "here", "custom", "generic",
     "random", "untitled", "unknown", "something", "stuff"}
)  # fmt: skip
_STOP = frozenset(
    {"the", "a", "an", "of", "to", "in", "on", "for", "and", "or", "is", "are", "be", "by",
     "with", "from", "at", "as", "it", "its", "this", "that", "these", "those", "into", "e",
     "g", "eg", "ie", "i", "you", "we", "they", "which", "will", "can", "should", "all"}
)  # fmt: skip
_HTML_TAGS = frozenset(
    {"div", "span", "br", "html", "body", "head", "p", "b", "i", "u", "em", "ul", "ol", "li",
     "table", "tr", "td", "th", "a", "img", "h1", "h2", "h3", "code", "pre", "strong"}
)  # fmt: skip

_TEMPLATE = re.compile(
    r"\{\{[^{}]*\}\}"  # {{name}}
    r"|\$\{[^{}]*\}"  # ${name}
    r"|(?<![\w$]){[A-Za-z_][\w.]*}"  # {name}
    r"|%(?:\([A-Za-z_]\w*\))?[sdif]\b"  # %s, %(name)s
    r"|<([A-Za-z_][\w ]{0,30})>"  # <name>, <your name>
    r"|\[(?:YOUR|INSERT|NAME|DATE|VALUE)[\w ]*\]",  # [YOUR NAME]
    re.I,
)
# schema keywords written as keys inside a text: ``{type: 'object', properties: {...}}``
_SCHEMA_IN_TEXT = re.compile(
    r"[\"']?\b(?:type|properties|items|required|additionalProperties|anyOf|oneOf)[\"']?\s*:"
)
_WORD = re.compile(r"[A-Za-z][A-Za-z]+")
_IDENTIFIER = re.compile(r"^[A-Za-z_][\w.]*$")
_HUMP = re.compile(r"[A-Z][a-z]+")
_NUMBERED = re.compile(r"^([A-Za-z]+?)[\s_.-]*(\d+)$")
_EXAMPLE_NOTE = re.compile(
    r"\((?:[^()]*)\)|'[^']*'|\"[^\"]*\"|\b(?:e\.g\.|for example)[^.;]*", re.I
)


def _stem(word: str) -> str:
    word = word.lower()
    if len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
        word = word[:-1]
    for end in ("ing", "ed"):
        if len(word) > len(end) + 2 and word.endswith(end):
            return word[: -len(end)]
    return word


def _words(text: str) -> list[str]:
    """Content words of ``text``, camelCase and snake_case split, stems only."""
    out: list[str] = []
    for raw in _WORD.findall(re.sub(r"([a-z])([A-Z])", r"\1 \2", text)):
        w = _stem(raw)
        if w not in _STOP:
            out.append(w)
    return out


def said_words(texts: Iterable[str]) -> frozenset[str]:
    """The content words of what the request showed beside a value (descriptions, titles,
    tool names), without the examples a description gives (``(e.g. 'America/New_York')``):
    a value the description offers as an example is the description's own suggestion."""
    out: set[str] = set()
    for text in texts:
        out.update(_words(_EXAMPLE_NOTE.sub(" ", text or "")))
    return frozenset(out)


def _template(text: str) -> str | None:
    for match in _TEMPLATE.finditer(text):
        tag = match.group(1)
        if tag is not None and tag.strip().lower() in _HTML_TAGS:
            continue
        return match.group(0)
    return None


def _generic(text: str) -> bool:
    """``value1``, ``Entity 1``, ``type_1234567890``, ``data.key``, ``test.MCP``,
    ``lorem ipsum``, ``foo``: words that fill a blank, numbered or dotted."""
    t = text.strip()
    low = t.lower()
    if low in GENERIC_WORDS or low in TYPE_NAMES:
        return True
    numbered = _NUMBERED.match(t)
    if numbered and _stem(numbered.group(1)) in GENERIC_WORDS | {"entitie"}:
        return True
    tokens = name_tokens(t)
    words = [_stem(re.sub(r"\d+$", "", tok)) for tok in tokens if not tok.isdigit()]
    # a phrase of type names counts too (``text in JSON``); a file name does not (``data.json``)
    blank = GENERIC_WORDS | _STOP | (TYPE_NAMES if " " in t else frozenset())
    if words and all(w in blank for w in words):
        return True  # ``my_value``, ``data.value1``, ``Name of entity2`` (stop words aside)
    if "lorem ipsum" in low:
        return True
    if _IDENTIFIER.match(t) and ("." in t or "_" in t):
        # a dotted path one of whose parts is a blank's word (``test.MCP``,
        # ``items.description``), or an identifier with a long digit run (``type_1234567890``);
        # a snake_case name (``customer_id``) is an ordinary name
        parts = [p for p in re.split(r"[._]", t) if p]
        dotted = [p for p in t.split(".") if p]
        if len(dotted) >= 2 and any(
            _stem(w) in GENERIC_WORDS for p in dotted for w in name_tokens(re.sub(r"\d+$", "", p))
        ):
            return True
        if any(re.fullmatch(r"\d{5,}", p) for p in parts):
            return True
    return False


def camel_mash(text: str) -> bool:
    """An identifier longer than ``CAMEL_MASH_CHARS`` built of three or more capitalised
    words or dotted parts: a code base's name (``DbClientCachingSessionImpl``), not a user's."""
    t = text.strip()
    if len(t) <= CAMEL_MASH_CHARS or not _IDENTIFIER.match(t):
        return False
    dotted = [p for p in t.split(".") if p]
    return len(_HUMP.findall(t)) >= 3 or (len(dotted) >= 2 and len(dotted[-1]) > 4)


def _restates(text: str, said: frozenset[str]) -> bool:
    words = _words(text)
    if len(words) < 2 or not said:
        return False
    # a blank's words count with the description's: "Value to be added to a business insight"
    shared = sum(1 for w in words if w in said or w in GENERIC_WORDS)
    return shared / len(words) >= RESTATED_SHARE


def _schema_fragment(value: Mapping[str, Any], schema: Mapping[str, Any]) -> bool:
    declared = {str(k).lower() for k in (schema.get("properties") or {})}
    keys = {str(k).lower() for k in value} - declared
    return bool(keys) and keys <= SCHEMA_KEYWORDS


def _text_reason(
    text: str, schema: Mapping[str, Any], said: frozenset[str], label: str = ""
) -> str | None:
    enum = schema.get("enum")
    if isinstance(enum, list) and text in enum:
        return None
    tokens = name_tokens(label)
    if tokens and tokens[-1] == "name" and (len(text) > NAME_CHARS or _CODE.search(text)):
        return "is no name (code or a sentence where a name belongs)"
    if "{" in text and len(_SCHEMA_IN_TEXT.findall(text)) >= 2:
        return "is a JSON-schema fragment"
    slot = _template(text)
    if slot:
        return f"holds a template slot ({slot})"
    if text.strip().lower() in TYPE_NAMES:
        return "is a JSON type name"
    if camel_mash(text):
        return f"is an identifier mash longer than {CAMEL_MASH_CHARS} characters"
    if _generic(text):
        return "is a generic placeholder"
    if not schema.get("format") and _restates(text, said):
        return "restates the description"
    if tokens and tokens[-1] in PROSE_PARAMS and not schema.get("format"):
        return _prose_reason(text)
    return None


def _prose_reason(text: str) -> str | None:
    """Why ``text`` is not what a person writes as a note, a comment or a message: a pattern
    or a path (``./*.json``), fewer than ``PROSE_WORDS`` words (``ok``), no letter at all
    (``123``), an id nobody gave (a UUID; a value the server returned is never refused), a
    code field's label (``file_path:``); "Rent 1200" and "Agenda: budget" are notes."""
    t = text.strip()
    if " " not in t and (_PATH_OR_PATTERN.search(t) or _FILE_NAME.match(t)):
        return "is a path or a pattern where text belongs"
    if len(_TOKEN.findall(t)) < PROSE_WORDS or not _LETTERS.search(t):
        return f"is no text a person writes (under {PROSE_WORDS} words)"
    made_up = _HEX_ID.search(t)
    if made_up:
        return f"holds an id nobody gave ({made_up.group(0)})"
    label = _CODE_LABEL.search(t)
    if label:
        return f"holds a code field's label ({label.group(0).strip()})"
    return None


def _reason(
    value: Any, schema: Mapping[str, Any], said: frozenset[str], label: str = ""
) -> str | None:
    if isinstance(value, str):
        own = said | said_words(
            [str(schema.get("description") or ""), str(schema.get("title") or "")]
        )
        return _text_reason(value, schema, own, label)
    if isinstance(value, Mapping):
        if _schema_fragment(value, schema):
            return "is a JSON-schema fragment"
        props = schema.get("properties")
        props = props if isinstance(props, Mapping) else {}
        for key, item in value.items():
            sub = props.get(key)
            why = _reason(item, sub if isinstance(sub, Mapping) else {}, said, str(key))
            if why:
                return f"{key}: {why}"
        return None
    if isinstance(value, list):
        items = schema.get("items")
        sub = items if isinstance(items, Mapping) else {}
        for item in value:
            why = _reason(item, sub, said, label)
            if why:
                return why
    return None


def placeholder_reason(
    value: Any,
    schema: Mapping[str, Any],
    said: Iterable[str] = (),
    world: frozenset[str] | set[str] = frozenset(),
    param: str = "",
) -> str | None:
    """Why ``value`` is a blank rather than a user's value, or None when it may be a task's.

    Refused: a value that restates the texts shown beside it (``said`` and the schema's own
    description: ``RESTATED_SHARE`` of its words), holds a template slot (``{name}``,
    ``<name>``, ``%s``), is a numbered or generic placeholder (``value1``, ``Entity 1``,
    ``foo``, ``type_1234567890``, ``lorem ipsum``), a JSON type name where a value belongs
    (``"entityType": "array"``), a JSON-schema fragment (an object whose undeclared keys are
    schema keywords), or an identifier mash longer than ``CAMEL_MASH_CHARS``; for an object or
    a list, the first of its parts that is (``name: restates the description``).

    >>> placeholder_reason("Entity 1", {"type": "string"})
    'is a generic placeholder'
    >>> placeholder_reason("Ada Lovelace", {"type": "string"}) is None
    True
    """
    if value is not None and canonical_json(value) in world:
        return None
    return _reason(value, schema, said_words(said), param)


def real_part(
    value: Any,
    schema: Mapping[str, Any],
    said: Iterable[str] = (),
    world: frozenset[str] | set[str] = frozenset(),
    param: str = "",
) -> tuple[Any, str | None]:
    """``value`` with the items of a list that ``placeholder_reason`` refuses left out, and
    the reason of the first refused; ``(None, reason)`` when nothing of it is left."""
    texts = list(said)
    if isinstance(value, list) and "array" in schema_kinds(schema):
        items = schema.get("items")
        sub = items if isinstance(items, Mapping) else {}
        kept, first = [], None
        for item in value:
            why = placeholder_reason(
                item, sub, [*texts, str(schema.get("description") or "")], world, param
            )
            if why is None:
                kept.append(item)
            first = first or why
        return (kept or None), first
    why = placeholder_reason(value, schema, texts, world, param)
    return (None, why) if why else (value, None)
