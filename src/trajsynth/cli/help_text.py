"""Help texts that render cleanly at any terminal width.

Typer takes a command's help from its docstring as written: the docstring's hard line breaks
(wrapped for the source, not the terminal) survive into ``--help`` and break its wrapping,
RST literals (````code````) show their backquotes, and every plain flag is labelled
``<bool>``. ``tidy`` fixes the built click command tree in place, once, before it runs:

* each paragraph of every help text is one line (rich wraps it to the terminal); a paragraph
  that starts with ``\\b`` (click's "keep as is") or whose lines start with ``-``/``*``
  (a list) keeps its breaks;
* ````x```` becomes ```x```;
* help is plain text (no rich markup: ``[run.llm]`` is a settings section, not a style);
* a flag (``--json``, ``--quick``) and a counter (``-v``) show no type label.
"""

from __future__ import annotations

import inspect
import re
from typing import Any

__all__ = ["reflow", "tidy"]

_RST_LITERAL = re.compile(r"``([^`]+)``")


def reflow(text: str | None) -> str | None:
    """``text`` with each paragraph on one line and RST literals as single backquotes.

    >>> reflow("Check every part;\\n    exit 0 when ``ok``.\\n\\n- one\\n- two")
    'Check every part; exit 0 when `ok`.\\n\\n- one\\n- two'
    """
    if not text:
        return text
    paragraphs = inspect.cleandoc(text).split("\n\n")
    out = []
    for paragraph in paragraphs:
        lines = paragraph.splitlines()
        keep = paragraph.startswith("\b") or all(
            line.lstrip().startswith(("-", "*")) for line in lines if line.strip()
        )
        joined = paragraph if keep else " ".join(line.strip() for line in lines)
        out.append(_RST_LITERAL.sub(r"`\1`", joined))
    return "\n\n".join(out)


def _no_type(ctx: Any) -> None:
    return None


def tidy(command: Any) -> Any:
    """Tidy ``command`` (a click command or group, as typer built it) and its subcommands."""
    command.help = reflow(command.help)
    command.short_help = reflow(command.short_help)
    if hasattr(command, "rich_markup_mode"):
        command.rich_markup_mode = None
    for param in command.params:
        if getattr(param, "help", None):
            param.help = reflow(param.help)
        if getattr(param, "is_flag", False) or getattr(param, "count", False):
            # an instance attribute shadows the method: only this flag loses its label
            param.display_type_rich = _no_type
    for sub in getattr(command, "commands", {}).values():
        tidy(sub)
    return command
