"""One registration mechanism for everything composable (docs/style.md §1, inspect-ai style).

A ``Registry`` holds named objects of one kind (constraint checkers, signal detectors,
selection policies, export formats). Each is added by decorating it where it is defined,
with the arguments it was registered with kept beside it, so a manifest can name exactly
which objects, with which settings, a run used::

    FORMATS = Registry[ExportFormat]("export format")

    @FORMATS.register("parquet")
    class Parquet: ...

An unknown name is an ``InputError`` that lists the names allowed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

from trajsynth.schemas.failures import InputError

__all__ = ["Registry"]

T = TypeVar("T")


class Registry(Generic[T]):
    """Named objects of one kind, in the order they were registered."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._items: dict[str, T] = {}
        self._params: dict[str, dict[str, Any]] = {}

    def register(self, name: str, **params: Any) -> Callable[[T], T]:
        """A decorator that adds its target under ``name``; a second ``name`` is an error."""

        def add(obj: T) -> T:
            if name in self._items:
                raise ValueError(f"a {self.kind} named {name!r} is already registered")
            self._items[name] = obj
            self._params[name] = dict(params)
            return obj

        return add

    def get(self, name: str) -> T:
        try:
            return self._items[name]
        except KeyError:
            raise InputError(
                f"unknown {self.kind} {name!r}; one of: {', '.join(self.names())}"
            ) from None

    def find(self, name: str) -> T | None:
        return self._items.get(name)

    def params(self, name: str) -> dict[str, Any]:
        """The arguments ``name`` was registered with."""
        self.get(name)
        return dict(self._params[name])

    def names(self) -> list[str]:
        """The registered names, sorted."""
        return sorted(self._items)

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self._items)
