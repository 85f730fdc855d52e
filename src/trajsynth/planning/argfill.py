"""Argument values the planner LLM writes for an outside cluster's path (no seed data).

A path over an outside server binds what it can from the user's ``--arg`` values, from values
the server's own reads returned (discovery's ``arg_values``), from enums and ranges; what is
left comes from the parameter's schema alone (a format such as a date or a timezone), and a
parameter whose schema gives nothing but a made-up record (a name, a text, a file to create:
``arguments.is_placeholder``) is left empty (``None``). Those slots are offered to the planner
LLM as the one tool of the request, its parameters the slots' own JSON schemas, with
``tool_choice`` "required": servers that constrain tool calls by grammar (llama.cpp, vLLM) can
only answer with values of the right shape. A value that still breaks its schema keeps the
schema's; the planner runs the gold path with the filled values and falls back to the
schema's when that run fails. A slot still empty after that (no LLM, or no value that fits)
has no value a task may use: the path is rejected (``unfilled``), never run with a placeholder.

Every value the LLM gives is read by ``values.placeholder_reason`` (the description restated,
a template slot, ``value1``, the JSON schema copied in, an identifier mash): a refused value is
asked again under another seed (``DRAWS`` requests in all), and a slot refused every time
refuses the path (``placeholder_value``). A list of objects is shown as one object of its
field names, and its fields that name another record take the names an earlier step created.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping
from typing import Any

from trajsynth.curation.canon import canonical_json
from trajsynth.llm.client import LLMClient
from trajsynth.mcp_servers.arguments import fits_schema, is_placeholder, schema_kinds
from trajsynth.mcp_servers.listings import is_path_param, listed_dirs, under_listed_dir
from trajsynth.mcp_servers.tags import name_tokens
from trajsynth.planning.admission import Refusal
from trajsynth.planning.function_call import call_function
from trajsynth.planning.paths import PlannedPath
from trajsynth.planning.values import camel_mash, real_part
from trajsynth.schemas import LLMUsage, Message, MessageRole, SlotArg, ToolAccess, ToolCluster

__all__ = [
    "DRAWS",
    "FILL_TOOL",
    "REFUSED_REASON",
    "fill_slots",
    "created_names",
    "fits_items",
    "known_records",
    "fillable_slots",
    "new_file_path",
    "new_file_slots",
    "new_table_slots",
    "new_table_sql",
    "reuse_names",
    "unfilled",
    "world_values",
]

log = logging.getLogger(__name__)

FILL_TOOL = "fill_arguments"
_SYSTEM = (
    "You choose realistic values that a user of a service would give to its tools. "
    "Answer by calling the function with one value for every parameter."
)


def fillable_slots(cluster: ToolCluster, path: PlannedPath) -> dict[str, tuple[str, str, dict]]:
    """slot -> (tool, param, schema) for the slots whose value came from the schema alone."""
    out: dict[str, tuple[str, str, dict]] = {}
    for step in path.steps:
        props = cluster.tool(step.tool).input_schema.get("properties") or {}
        for param, arg in step.args.items():
            if not isinstance(arg, SlotArg) or path.slot_sources.get(arg.name) != "schema":
                continue
            schema = props.get(param) if isinstance(props, Mapping) else None
            if isinstance(schema, Mapping) and arg.name not in out:
                out[arg.name] = (step.tool, param, dict(schema))
    return out


def new_file_slots(
    cluster: ToolCluster, slots: Mapping[str, tuple[str, str, dict]], seed: int
) -> dict[str, str]:
    """slot -> folder, for the slots that name a file a write creates (``write_file.path``):
    the folder is one the server's own listings name (``listings.listed_dirs``; a sub-folder
    before the work dir), the file's name is the user's, written by the LLM."""
    dirs = listed_dirs(cluster)
    inner = [d for d in dirs if d not in (".", "./")] or dirs
    out: dict[str, str] = {}
    for k, (name, (tool, param, schema)) in enumerate(slots.items()):
        spec = cluster.tool(tool)
        if (
            inner
            and spec.access is ToolAccess.WRITE
            and is_path_param(param)
            and schema_kinds(schema) <= {"string"}
        ):
            out[name] = inner[(seed + k) % len(inner)]
    return out


def new_file_path(value: Any, folder: str, cluster: ToolCluster) -> str | None:
    """The path of a new file the LLM named for ``folder``: its name joined to the folder,
    or a path it gave directly in one of the folders the server lists; None for anything
    else (a folder the server never listed, ``..``, a placeholder, a tool's name)."""
    if not isinstance(value, str) or not _usable(value, cluster):
        return None
    text = value.strip()
    dirs = listed_dirs(cluster)
    if "/" in text or "\\" in text:
        return text if under_listed_dir(text, dirs) else None
    joined = text if folder in (".", "./") else f"{folder.rstrip('/')}/{text}"
    return joined if under_listed_dir(joined, dirs) else None


_CREATE_TABLE = re.compile(r"\bcreate\s+table\b", re.I)
_SQL_PARAMS = frozenset({"query", "sql", "statement"})
_IDENT = re.compile(r"^[A-Za-z][A-Za-z0-9_]{1,39}$")
_SQL_WORDS = frozenset(
    {"select", "table", "create", "insert", "update", "delete", "drop", "from", "where",
     "values", "index", "null", "primary", "key", "into", "name", "column", "alter", "join",
     "order", "group", "by", "and", "or", "not", "as", "on", "unique", "default", "check",
     "references", "foreign", "constraint", "limit", "set", "view", "trigger"}
)  # fmt: skip
# SQL type names: a model asked for a column's name answered with its type (``int TEXT``)
_SQL_TYPES = frozenset(
    {"int", "integer", "tinyint", "smallint", "mediumint", "bigint", "real", "double", "float",
     "numeric", "decimal", "number", "boolean", "bool", "date", "datetime", "timestamp", "time",
     "text", "char", "varchar", "nchar", "nvarchar", "clob", "blob", "string", "varying"}
)  # fmt: skip
# words that name the schema's parts, not the user's things: ``TableName``, ``column1``,
# ``my_table`` are a form's blanks
_SCHEMA_BLANKS = frozenset({"my", "new", "col", "tbl", "table", "column", "field", "name"})
TABLE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "table": {"type": "string", "description": "the new table's name, one word"},
        "columns": {
            "type": "array",
            "items": {"type": "string"},
            "description": "the names of its columns, one word each",
        },
    },
    "required": ["table", "columns"],
}


def new_table_slots(cluster: ToolCluster, slots: Mapping[str, tuple[str, str, dict]]) -> set[str]:
    """The slots that hold the SQL statement a write runs to create a table (server-sqlite's
    ``create_table(query)``: "CREATE TABLE SQL statement"): the statement's form is the
    tool's, the table's and columns' names are the user's, written by the LLM as names."""
    out: set[str] = set()
    for name, (tool, param, schema) in slots.items():
        spec = cluster.tool(tool)
        said = f"{schema.get('description') or ''} {spec.description}"
        if (
            spec.access is ToolAccess.WRITE
            and set(name_tokens(param)) & _SQL_PARAMS
            and _CREATE_TABLE.search(said)
            and schema_kinds(schema) <= {"string"}
        ):
            out.add(name)
    return out


def _sql_name(value: Any, cluster: ToolCluster) -> str | None:
    if not isinstance(value, str):
        return None
    text = value.strip()
    if not _IDENT.match(text) or not _usable(text, cluster):
        return None
    if camel_mash(text):
        return None  # a code base's class name (``DbClientCachingSessionImpl``)
    words = {re.sub(r"\d+$", "", t) for t in name_tokens(text)} - {""}
    if not words or words <= _SQL_WORDS | _SQL_TYPES | _SCHEMA_BLANKS:
        return None  # an SQL word or type, or a blank of the form (``TableName``, ``int``)
    return text


def new_table_sql(value: Any, cluster: ToolCluster) -> str | None:
    """``CREATE TABLE name (column TEXT, ...)`` from the names the LLM gave (``TABLE_SCHEMA``),
    or None when the table's name or every column's is no usable name (a placeholder such as
    ``notes``, a tool's name, an SQL word, punctuation)."""
    if not isinstance(value, Mapping) or not isinstance(value.get("columns"), list):
        return None
    table = _sql_name(value.get("table"), cluster)
    if table is None:
        return None
    columns: list[str] = []
    for raw in value["columns"][:6]:
        column = _sql_name(raw, cluster)
        if column and column.lower() not in {c.lower() for c in [table, *columns]}:
            columns.append(column)
    if not columns:
        return None
    return f"CREATE TABLE {table} ({', '.join(f'{c} TEXT' for c in columns)})"


def _request(
    cluster: ToolCluster,
    path: PlannedPath,
    slots: Mapping[str, tuple[str, str, dict]],
    folders: Mapping[str, str] | None = None,
    tables: set[str] | None = None,
) -> tuple[list[Message], dict[str, Any]]:
    folders = folders or {}
    tables = tables or set()
    properties = {
        name: (
            TABLE_SCHEMA
            if name in tables
            else {
                **_shown_schema(schema),
                "description": (
                    f"the name of a new file in the folder {folders[name]} (no folder in it)"
                    if name in folders
                    else f"{tool}.{param}: {schema.get('description') or param}"
                )[:200],
            }
        )
        for name, (tool, param, schema) in slots.items()
    }
    tool = {
        "type": "function",
        "function": {
            "name": FILL_TOOL,
            "description": "Realistic values for the parameters of the tools below.",
            "parameters": {"type": "object", "properties": properties, "required": list(slots)},
        },
    }
    tools = "\n".join(
        f"- {name}: {cluster.tool(name).description.strip()[:200]}"
        for name in dict.fromkeys(path.tools)
    )
    examples = "\n".join(
        (
            f"- {name}: the name of a new file in the folder {folders[name]}"
            if name in folders
            else f"- {name}: the name of a new table and the names of its columns"
            if name in tables
            else f"- {name} ({tool}.{param})"
            + _object_form(schema)
            + (
                f", for example {json.dumps(path.slots[name])}"
                if path.slots.get(name) is not None
                else ""
            )
        )
        for name, (tool, param, schema) in slots.items()
    )
    user = (
        f"Service: {cluster.description.strip()[:300]}\nTools, called in this order:\n{tools}\n"
        f"Give a realistic value a user of this service would use for:\n{examples}"
    )
    messages = [
        Message(role=MessageRole.SYSTEM, content=_SYSTEM),
        Message(role=MessageRole.USER, content=user),
    ]
    return messages, tool


# the most objects asked for a list of objects: each is a few dozen tokens of the answer
MAX_OBJECTS = 2
_SHOWN_ONLY = frozenset({"description", "title", "examples", "default", "$schema"})


def _shown_schema(schema: Mapping[str, Any], top: bool = True) -> dict[str, Any]:
    """The slot's schema as the request shows it (and the grammar reads it): the inner
    descriptions and titles left out, since a small model copies them as values ("The name
    of the entity"); a list of objects asks for 1 to ``MAX_OBJECTS`` of them."""
    out: dict[str, Any] = {}
    for key, sub in schema.items():
        if not top and key in _SHOWN_ONLY:
            continue
        if key == "properties" and isinstance(sub, Mapping):
            out[key] = {
                k: _shown_schema(v, False) if isinstance(v, Mapping) else v for k, v in sub.items()
            }
        elif key == "items" and isinstance(sub, Mapping):
            out[key] = _shown_schema(sub, False)
        else:
            out[key] = sub
    items = schema.get("items")
    if isinstance(items, Mapping) and "object" in schema_kinds(items):
        out.setdefault("minItems", 1)
        out.setdefault("maxItems", MAX_OBJECTS)
    return out


def _object_form(schema: Mapping[str, Any]) -> str:
    """For a list of objects: one object written with the item's field names and no values
    (``{"name": …, "entityType": …, "observations": […]}``), the shape to fill rather than a
    JSON schema to copy."""
    items = schema.get("items")
    if not isinstance(items, Mapping) or not isinstance(items.get("properties"), Mapping):
        return ""
    fields = []
    for key, sub in items["properties"].items():
        blank = "[…]" if isinstance(sub, Mapping) and "array" in schema_kinds(sub) else "…"
        fields.append(f"{json.dumps(key)}: {blank}")
    return (
        f": 1 to {MAX_OBJECTS} objects, each {{{', '.join(fields)}}}, every field written "
        "with the real things of one user (people, places, projects, facts about them)"
    )


# requests per path at most: a refused value is asked again under another seed
DRAWS = 3
REFUSED_REASON = "placeholder_value"


def _said(
    cluster: ToolCluster, path: PlannedPath, tool: str, schema: Mapping[str, Any]
) -> list[str]:
    """The texts a request shows beside a slot: its own description and title, its tool's
    name, title and description, the other tools of the path (the request lists each with
    its description: a model wrote ``list_allowed_directories``'s into a note), the server's
    description."""
    spec = cluster.tool(tool)
    others = [cluster.tool(name).description for name in dict.fromkeys(path.tools) if name != tool]
    return [
        str(schema.get("description") or ""),
        str(schema.get("title") or ""),
        " ".join(name_tokens(tool)),
        spec.description,
        *others,
        cluster.description,
    ]


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 80 else text[:77] + "..."


async def fill_slots(
    llm: LLMClient,
    cluster: ToolCluster,
    path: PlannedPath,
    *,
    seed: int,
    temperature: float = 0.7,
    max_tokens: int = 256,
) -> tuple[PlannedPath | Refusal | None, list[LLMUsage]]:
    """``path`` with its schema-only slots written by the LLM (source ``"llm"``), or None when
    it has none or the LLM gave no value that fits its schema; and the LLM usage.

    Every value is read by ``values.placeholder_reason`` (a form's blank: the description
    restated, a template slot, ``value1``, a schema fragment ...); a list keeps the items
    that pass. A slot whose value is refused is asked again under another seed, ``DRAWS``
    requests in all; a slot with no other value that is still refused after them refuses the
    path (``Refusal`` with reason ``placeholder_value``, each refused value and why in its
    detail), so the planner records why instead of running a blank."""
    slots = fillable_slots(cluster, path)
    if not slots:
        return None, []
    folders = new_file_slots(cluster, slots, seed)
    tables = new_table_slots(cluster, slots) - set(folders)
    world = world_values(cluster)
    values = dict(path.slots)
    sources = dict(path.slot_sources)
    usage: list[LLMUsage] = []
    refused: dict[str, str] = {}
    last: dict[str, Any] = {}
    asking = dict(slots)
    for draw in range(DRAWS):
        messages, tool = _request(cluster, path, asking, folders, tables)
        given, result = await call_function(
            llm, messages, tool, seed=(seed + 7919 * draw) % 2**31,
            temperature=temperature, max_tokens=max_tokens,
        )  # fmt: skip
        usage.append(result.usage)
        for name, (tool_name, param, schema) in asking.items():
            # an answer missing now is the last one, read again: the names it had to reuse may
            # have been given since (the entities of a relation refused before they passed)
            raw = given.get(name, last.get(name))
            last[name] = raw
            created = created_names(slots, values, name)
            answer = reuse_names(raw, schema, created)
            value, why = _checked(answer, name, cluster, path, slots, folders, tables, world)
            if value is not None:
                value, why = known_records(value, schema, {*created, *_strings(cluster)})
            if value is not None:
                values[name], sources[name] = value, "llm"
                refused.pop(name, None)
            else:
                refused[name] = f"{tool_name}.{param} = {_short(answer)}: {why}"
        # asked again: a slot whose value was refused and that has no other value yet
        asking = {
            n: s for n, s in asking.items()
            if sources.get(n) != "llm" and n in refused and values.get(n) is None
        }  # fmt: skip
        if not asking:
            break
        log.debug("values refused (draw %d): %s", draw + 1, refused)
    blank = [n for n in refused if values.get(n) is None]
    if blank:
        detail = (
            f"{' -> '.join(path.tools)}: no value a user would give after {DRAWS} draws; "
            + "; ".join(refused[n] for n in blank)
        )
        return Refusal(REFUSED_REASON, detail, slots[blank[0]][0]), usage
    if values == path.slots:
        log.debug("no LLM value fits its schema for %s", list(slots))
        return None, usage
    return path.model_copy(update={"slots": values, "slot_sources": sources}), usage


_NAME_OF = re.compile(r"\bname of the\b", re.I)


def _refers_to_name(key: str, schema: Any) -> bool:
    """A field of an object that names a record made elsewhere (``from``/``to`` of a relation:
    "The name of the entity where the relation starts", ``entityName``), not its own name."""
    if key == "name" or not isinstance(schema, Mapping) or "string" not in schema_kinds(schema):
        return False
    tokens = name_tokens(key)
    return bool(_NAME_OF.search(str(schema.get("description") or ""))) or (
        len(tokens) >= 2 and tokens[-1] == "name"
    )


def created_names(
    slots: Mapping[str, tuple[str, str, dict]], values: Mapping[str, Any], before: str
) -> list[str]:
    """The names the objects of the slots before ``before`` (in the path's order) give their
    records (their ``name`` fields: the entities a ``create_entities`` makes)."""
    out: list[str] = []
    for name in slots:
        if name == before:
            break
        value = values.get(name)
        for item in value if isinstance(value, list) else []:
            if isinstance(item, Mapping) and isinstance(item.get("name"), str):
                out.append(item["name"])
    return list(dict.fromkeys(out))


def reuse_names(value: Any, schema: Mapping[str, Any], names: list[str]) -> Any:
    """``value`` (a list of objects) with its fields that name another record (``from``,
    ``to``, ``entityName``) set to the names the path created before it, when it created any:
    a relation is drawn between entities the same task made, not between names the model
    made up. The first name not already taken by the object is used, so ``from`` and ``to``
    differ when two names exist."""
    items = schema.get("items")
    props = items.get("properties") if isinstance(items, Mapping) else None
    if not names or not isinstance(value, list) or not isinstance(props, Mapping):
        return value
    out: list[Any] = []
    for k, item in enumerate(value):
        if not isinstance(item, Mapping):
            out.append(item)
            continue
        fixed = dict(item)
        refs = [key for key in props if _refers_to_name(key, props[key])]
        for j, key in enumerate(refs):
            if fixed.get(key) in names and fixed[key] not in [fixed.get(r) for r in refs[:j]]:
                continue
            taken = {fixed.get(r) for r in refs[:j]}
            free = [n for n in names if n not in taken] or names
            fixed[key] = free[(k + j) % len(free)] if len(free) > 1 else free[0]
        out.append(fixed)
    return out


def known_records(value: Any, schema: Mapping[str, Any], known: set[str]) -> tuple[Any, str | None]:
    """``value`` (a list of objects) without the objects whose fields that name another record
    (``from``, ``to``, ``entityName``) name one that neither an earlier step of the path created
    nor the server's reads returned (a relation from "people" to "location" on an empty
    graph); (None, why) when none is left."""
    items = schema.get("items")
    props = items.get("properties") if isinstance(items, Mapping) else None
    if not isinstance(value, list) or not isinstance(props, Mapping):
        return value, None
    refs = [key for key in props if _refers_to_name(key, props[key])]
    kept, why = [], None
    for item in value:
        unknown = [k for k in refs if isinstance(item, Mapping) and item.get(k) not in known]
        if unknown:
            why = why or f"{unknown[0]}: names a record neither the path nor the server has"
        else:
            kept.append(item)
    return (kept, None) if kept else (None, why)


def _strings(cluster: ToolCluster) -> set[str]:
    """The strings the server's own reads returned (discovery's ``arg_values``)."""
    out: set[str] = set()
    for params in cluster.arg_values.values():
        for found in params.values():
            for v in found:
                if isinstance(v, str):
                    out.add(v)
                elif isinstance(v, list):
                    out.update(x for x in v if isinstance(x, str))
    return out


def _checked(
    value: Any,
    name: str,
    cluster: ToolCluster,
    path: PlannedPath,
    slots: Mapping[str, tuple[str, str, dict]],
    folders: Mapping[str, str],
    tables: set[str],
    world: frozenset[str],
) -> tuple[Any, str | None]:
    """The value a slot takes from the LLM's answer, or (None, why it is refused)."""
    tool, param, schema = slots[name]
    if value in (None, "", [], {}):
        return None, "is empty"
    if name in folders or name in tables:
        # a file the task creates: a new name in a folder the server lists; a table: the
        # tool's statement around the names given; or nothing
        made = (
            new_file_path(value, folders[name], cluster)
            if name in folders
            else new_table_sql(value, cluster)
        )
        if made is None or not fits_schema(made, schema):
            return None, "no usable name"
        return made, None
    value, why = _usable_items(value, schema, cluster)
    if value is None:
        return None, why
    if not fits_schema(value, schema) or not fits_items(value, schema):
        return None, "does not fit the parameter's schema"
    return real_part(value, schema, _said(cluster, path, tool, schema), world, param)


def _usable_items(
    value: Any, schema: Mapping[str, Any], cluster: ToolCluster
) -> tuple[Any, str | None]:
    """``value`` with the items of a list that ``_unusable`` refuses left out (an entity
    named John kept, the one beside it named ``example`` dropped), and the first reason;
    ``(None, why)`` when nothing usable is left."""
    if isinstance(value, list) and "array" in schema_kinds(schema):
        reasons = [_unusable(item, cluster) for item in value]
        kept = [item for item, why in zip(value, reasons, strict=True) if why is None]
        first = next((why for why in reasons if why is not None), None)
        return (kept, first) if kept else (None, first or "is empty")
    why = _unusable(value, cluster)
    return (None, why) if why else (value, None)


def world_values(cluster: ToolCluster) -> frozenset[str]:
    """Canonical JSON of the values the server's own reads returned (discovery's
    ``arg_values``) and the user's ``--arg`` values: never refused as placeholders."""
    out: set[str] = set()
    for params in cluster.arg_values.values():
        for found in params.values():
            out.update(canonical_json(v) for v in found)
    out.update(canonical_json(v) for v in cluster.server.args.values())
    return frozenset(out)


def fits_items(value: Any, schema: Mapping[str, Any]) -> bool:
    """Whether a list's items and an object's declared fields fit their own schemas (the
    required fields present): ``fits_schema`` reads only the top level."""
    if isinstance(value, list):
        items = schema.get("items")
        if isinstance(items, Mapping):
            return all(fits_schema(v, items) and fits_items(v, items) for v in value)
        return True
    if isinstance(value, Mapping):
        props = schema.get("properties")
        props = props if isinstance(props, Mapping) else {}
        required = schema.get("required")
        if isinstance(required, list) and any(r not in value for r in required):
            return False
        for key, item in value.items():
            sub = props.get(key)
            if isinstance(sub, Mapping) and not (fits_schema(item, sub) and fits_items(item, sub)):
                return False
    return True


def _usable(value: Any, cluster: ToolCluster | None = None) -> bool:
    """A value a task may take: ``_unusable`` finds nothing wrong with it."""
    return _unusable(value, cluster) is None


def _unusable(value: Any, cluster: ToolCluster | None = None) -> str | None:
    """Why a value is no task's (empty, a made-up record copied from the request such as
    ``example``, a text with no word in it: a small model's grammar-bound answer can be
    ``");;;;"``, or a text naming one of the cluster's tools: the request lists them, a model
    copied ``write_file`` into a file's content, and the goal then named it); None if none."""
    if value in (None, "", [], {}):
        return "is empty"
    if is_placeholder(value):
        return "is a made-up record"
    texts = _texts(value)
    if cluster is not None and any(_names_tool(t, cluster) for t in texts):
        return "names a tool"
    if not all(re.search(r"[A-Za-z0-9]{2}", t) for t in texts):
        return "has no word in it"
    return None


def _names_tool(text: str, cluster: ToolCluster) -> bool:
    """Whether ``text`` writes a tool's identifier (``write_file``, ``readFile``); a one-word
    name (``search``) is an ordinary word."""
    for name in cluster.tool_names:
        if len(name_tokens(name)) >= 2 and re.search(
            rf"(?<![A-Za-z0-9]){re.escape(name)}(?![A-Za-z0-9])", text, re.I
        ):
            return True
    return False


def _texts(value: Any) -> list[str]:
    if isinstance(value, Mapping):
        return [t for v in value.values() for t in _texts(v)]
    if isinstance(value, list):
        return [t for v in value for t in _texts(v)]
    return [value] if isinstance(value, str) else []


def unfilled(path: PlannedPath) -> list[str]:
    """The slots left empty: no value from the server's world, ``--arg``, the schema or the
    LLM (a task is never run with a made-up one)."""
    return [name for name, value in path.slots.items() if value is None]
