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
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping
from typing import Any

from trajsynth.llm.client import LLMClient
from trajsynth.mcp_servers.arguments import fits_schema, is_placeholder, schema_kinds
from trajsynth.mcp_servers.listings import is_path_param, listed_dirs, under_listed_dir
from trajsynth.mcp_servers.tags import name_tokens
from trajsynth.planning.function_call import call_function
from trajsynth.planning.paths import PlannedPath
from trajsynth.schemas import LLMUsage, Message, MessageRole, SlotArg, ToolAccess, ToolCluster

__all__ = [
    "FILL_TOOL",
    "fill_slots",
    "fillable_slots",
    "new_file_path",
    "new_file_slots",
    "new_table_slots",
    "new_table_sql",
    "unfilled",
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
                **schema,
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
            + (
                f", for example {json.dumps(path.slots[name])}"
                if path.slots.get(name) is not None
                else ""
            )
        )
        for name, (tool, param, _) in slots.items()
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


async def fill_slots(
    llm: LLMClient,
    cluster: ToolCluster,
    path: PlannedPath,
    *,
    seed: int,
    temperature: float = 0.7,
    max_tokens: int = 256,
) -> tuple[PlannedPath | None, list[LLMUsage]]:
    """``path`` with its schema-only slots written by the LLM (source ``"llm"``), or None when
    it has none or the LLM gave no value that fits its schema; and the LLM usage."""
    slots = fillable_slots(cluster, path)
    if not slots:
        return None, []
    folders = new_file_slots(cluster, slots, seed)
    tables = new_table_slots(cluster, slots) - set(folders)
    messages, tool = _request(cluster, path, slots, folders, tables)
    given, result = await call_function(
        llm, messages, tool, seed=seed, temperature=temperature, max_tokens=max_tokens
    )
    values = dict(path.slots)
    sources = dict(path.slot_sources)
    for name, (_, _, schema) in slots.items():
        value = given.get(name)
        if name in folders or name in tables:
            # a file the task creates: a new name in a folder the server lists; a table: the
            # tool's statement around the names given; or nothing
            value = (
                new_file_path(value, folders[name], cluster)
                if name in folders
                else new_table_sql(value, cluster)
            )
            if value is not None and fits_schema(value, schema):
                values[name], sources[name] = value, "llm"
            continue
        if _usable(value, cluster) and fits_schema(value, schema):
            values[name], sources[name] = value, "llm"
    if values == path.slots:
        log.debug("no LLM value fits its schema for %s", list(slots))
        return None, [result.usage]
    return path.model_copy(update={"slots": values, "slot_sources": sources}), [result.usage]


def _usable(value: Any, cluster: ToolCluster | None = None) -> bool:
    """A value a task may take: not empty, not a made-up record copied from the request
    (``example``), every text in it has a word in it (a small model's grammar-bound
    answer can be ``");;;;"``), and none names one of the cluster's tools (the request lists
    them: a model copied ``write_file`` into a file's content, and the goal then named it)."""
    if value in (None, "", [], {}) or is_placeholder(value):
        return False
    texts = _texts(value)
    if cluster is not None and any(_names_tool(t, cluster) for t in texts):
        return False
    return all(re.search(r"[A-Za-z0-9]{2}", t) for t in texts)


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
