"""The DuckDB store (design.md, "Packages"): every record the pipeline makes, queryable in SQL."""

from trajsynth.store.store import (
    SCHEMA_VERSION,
    TABLES,
    Store,
    StoreCorruptError,
    StoreLockedError,
    work_unit_row,
)

__all__ = [
    "SCHEMA_VERSION",
    "TABLES",
    "Store",
    "StoreCorruptError",
    "StoreLockedError",
    "work_unit_row",
]
