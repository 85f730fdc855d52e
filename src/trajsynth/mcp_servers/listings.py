"""Folder listings: the paths an outside server's own reads name, and the folders it lists.

A file server answers ``list_directory(path="docs")`` with entry names (``[FILE] a.txt``), and
``directory_tree(path=".")`` with a tree of ``{"name", "type", "children"}``; neither returns
the path a later call needs (``docs/a.txt``). Joined with the folder the call listed, an
entry is a path of the server's world: the folder is one it accepted, the name one it
returned. Discovery keeps those paths as the server's own values and tries each listed
folder with the tool that listed it, so the folders the server lists end up among the values
its listing tools accepted (``listed_dirs``): where a task may create a new file, under a
name the user gives.
"""

from __future__ import annotations

import contextlib
import json
import posixpath
import re
from collections.abc import Mapping
from typing import Any

from trajsynth.mcp_servers.tags import name_tokens
from trajsynth.schemas import JsonValue, ToolAccess, ToolCluster

__all__ = ["is_path_param", "listed_dirs", "listed_entries", "under_listed_dir"]

_PATH_WORDS = frozenset({"path", "dir", "directory", "folder", "file", "filename", "destination"})
_DIR_WORDS = frozenset({"dir", "directory", "directories", "folder", "folders", "tree"})
# one entry per line, as file servers print them: "[DIR] docs", "[FILE] a.txt", with a size
# after two or more spaces ("[FILE] a.txt          16 B")
_LINE = re.compile(r"^\s*\[(DIR|FILE)\]\s+(\S+(?: \S+)*?)(?:\s{2,}.*)?\s*$", re.M)
_NAME = re.compile(r"^[\w][\w.\- ]{0,127}$")


def is_path_param(param: str) -> bool:
    """Whether a parameter names a file or folder (``path``, ``destination``, ``dir_path``)."""
    return bool(set(name_tokens(param)) & _PATH_WORDS)


def _join(folder: str, name: str) -> str | None:
    if not _NAME.match(name) or name in (".", ".."):
        return None
    folder = folder.rstrip("/") or "/"
    return name if folder in (".", "") else posixpath.join(folder, name)


def _tree(node: Any, folder: str, out: list[tuple[str, bool]], depth: int = 0) -> None:
    if depth > 4 or len(out) >= 40:
        return
    if isinstance(node, list):
        for item in node[:40]:
            _tree(item, folder, out, depth)
        return
    if not isinstance(node, Mapping) or not isinstance(node.get("name"), str):
        return
    kind = node.get("type")
    children = node.get("children")
    is_dir = kind == "directory" or isinstance(children, list)
    if kind not in (None, "file", "directory") or (kind is None and children is None):
        return  # a record with a name is not a file entry unless it says so
    path = _join(folder, node["name"])
    if path is None:
        return
    out.append((path, is_dir))
    if isinstance(children, list):
        _tree(children, path, out, depth + 1)


def _texts(observed: JsonValue) -> list[str]:
    if isinstance(observed, str):
        return [observed]
    if isinstance(observed, Mapping):
        return [v for v in observed.values() if isinstance(v, str)]
    return []


def listed_entries(args: Mapping[str, JsonValue], observed: JsonValue) -> list[tuple[str, bool]]:
    """(path, is a folder) of the entries a listing answered, joined with the folder the call
    named (its one path parameter); empty when the call named no folder or the answer is
    no listing.

    >>> listed_entries({"path": "docs"}, "[FILE] a.txt\\n[DIR] old")
    [('docs/a.txt', False), ('docs/old', True)]
    >>> listed_entries({"path": "."}, '[{"name": "docs", "type": "directory", "children": '
    ...     '[{"name": "a.txt", "type": "file"}]}]')
    [('docs', True), ('docs/a.txt', False)]
    >>> listed_entries({"path": "docs"}, "[FILE] a b.txt      16 B\\n\\nTotal: 1 file")
    [('docs/a b.txt', False)]
    >>> listed_entries({"path": "."}, "Echo: [FILE] a.txt is here")
    []
    """
    folders = [v for k, v in args.items() if is_path_param(k) and isinstance(v, str) and v]
    if len(folders) != 1 or ".." in folders[0].split("/"):
        return []
    folder = folders[0]
    out: list[tuple[str, bool]] = []
    for text in _texts(observed):
        lines = list(_LINE.finditer(text))
        bracketed = [ln for ln in text.splitlines() if ln.lstrip().startswith("[")]
        if lines and len(lines) == len(bracketed):  # a summary line after them may follow
            for m in lines[:40]:
                path = _join(folder, m.group(2))
                if path is not None:
                    out.append((path, m.group(1) == "DIR"))
            continue
        if text[:1] in "[{":
            with contextlib.suppress(ValueError):
                _tree(json.loads(text), folder, out)
    if isinstance(observed, list | Mapping) and not out:
        _tree(observed, folder, out)
    return out


def _lists_dirs(cluster: ToolCluster, tool: str) -> bool:
    spec = next((t for t in cluster.tools if t.name == tool), None)
    return (
        spec is not None
        and spec.access is ToolAccess.READ
        and bool(set(name_tokens(tool)) & _DIR_WORDS)
    )


def listed_dirs(cluster: ToolCluster) -> list[str]:
    """The folders the server's own listing reads accepted (``list_directory(path=...)``
    succeeded with them in discovery), the work dir (``.``) last."""
    out: list[str] = []
    for tool, params in cluster.arg_values.items():
        if not _lists_dirs(cluster, tool):
            continue
        for param, values in params.items():
            if not is_path_param(param):
                continue
            for v in values:
                if isinstance(v, str) and v and ".." not in v.split("/") and v not in out:
                    out.append(v.rstrip("/") or v)
    return sorted(out, key=lambda d: (d in (".", "./"), d))


def under_listed_dir(value: str, dirs: list[str]) -> bool:
    """Whether ``value`` is a plain name directly in one of ``dirs`` (``docs/a.txt`` under
    ``docs``; ``a.txt`` under ``.``); no ``..``, no other folder.

    >>> [under_listed_dir(v, ["docs", ".", "/srv/data"]) for v in ("docs/a.txt", "a.txt",
    ...     "/srv/data/a.txt", "/etc/a.txt", "docs/../a.txt", "private/a.txt", "docs/")]
    [True, True, True, False, False, False, False]
    """
    if not value or "\\" in value or value.endswith("/"):
        return False
    norm = posixpath.normpath(value)
    if norm != value or ".." in norm.split("/"):
        return False
    parent, name = posixpath.split(norm)
    return bool(_NAME.match(name)) and (parent or ".") in {d.rstrip("/") or d for d in dirs}
