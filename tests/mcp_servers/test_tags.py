"""Read/write tags: annotations first, then the tool's name, then the safe default."""

from __future__ import annotations

import doctest

import pytest
from mcp.types import ToolAnnotations

from trajsynth.mcp_servers import tags
from trajsynth.mcp_servers.tags import name_tokens, tag_from_name, tag_tool
from trajsynth.schemas import ToolAccess

READ, WRITE = ToolAccess.READ, ToolAccess.WRITE


@pytest.mark.parametrize(
    ("name", "access"),
    [
        ("get_user", READ), ("list_orders", READ), ("search_products", READ),
        ("find_user_by_email", READ), ("getFlightStatus", READ), ("product_search", READ),
        ("create_event", WRITE), ("book_flight", WRITE), ("cancel_order", WRITE),
        ("delete_file", WRITE), ("update_profile", WRITE), ("add_to_cart", WRITE),
        ("send_email", WRITE), ("cart_remove_item", WRITE), ("sendMessage", WRITE),
    ],
)  # fmt: skip
def test_tags_from_names(name: str, access: ToolAccess) -> None:
    assert tag_from_name(name) == access
    assert tag_tool(name) == (access, "name")


def test_unknown_name_defaults_to_write() -> None:
    assert tag_from_name("frobnicate") is None
    assert tag_tool("frobnicate") == (WRITE, "default")


def test_read_only_hint_overrides_the_name() -> None:
    assert tag_tool("delete_everything", ToolAnnotations(read_only_hint=True)) == (
        READ,
        "annotation",
    )
    assert tag_tool("get_and_reset", {"readOnlyHint": False}) == (WRITE, "annotation")
    assert tag_tool("get_thing", {"read_only_hint": True}) == (READ, "annotation")


def test_destructive_hint_means_write_when_read_only_is_absent() -> None:
    assert tag_tool("lookup", ToolAnnotations(destructive_hint=True)) == (WRITE, "annotation")
    # destructive=False says nothing about read-only: the name decides
    assert tag_tool("lookup", ToolAnnotations(destructive_hint=False)) == (READ, "name")
    # hints that are absent fall through to the name
    assert tag_tool("list_files", ToolAnnotations(title="Files")) == (READ, "name")


def test_name_tokens_fold_case_styles() -> None:
    assert name_tokens("HTTPRequestSend") == ["http", "request", "send"]
    assert name_tokens("files.read-all") == ["files", "read", "all"]


def test_docstring_examples() -> None:
    result = doctest.testmod(tags)
    assert result.attempted >= 4
    assert result.failed == 0
