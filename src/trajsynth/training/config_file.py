"""A training config (SFT or GRPO) read from a TOML file, with command-line overrides."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from trajsynth.schemas import InputError

__all__ = ["load_config_file"]

M = TypeVar("M", bound=BaseModel)


def load_config_file(path: Path | str, schema: type[M], /, *, table: str, **overrides: Any) -> M:
    """``schema`` from ``path``'s top-level keys, or its ``[table]`` table when it has one;
    overrides that are not ``None`` win (any field name, ``model`` and ``path`` included:
    the first two parameters are positional-only). ``InputError`` naming the file when it
    cannot be read or does not validate."""
    try:
        data = tomllib.loads(Path(path).read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise InputError(f"{path}: cannot read the {table} config: {exc}") from exc
    data = data.get(table, data)
    data.update({k: v for k, v in overrides.items() if v is not None})
    try:
        return schema.model_validate(data)
    except ValidationError as exc:
        raise InputError(f"{path}: {exc}") from exc
