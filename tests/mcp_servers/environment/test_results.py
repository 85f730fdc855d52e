"""What a server answered, as the policy sees it (``environment.results``): which results are
failures, and the text of each kind of content block."""

from __future__ import annotations

from mcp.types import (
    CallToolResult,
    EmbeddedResource,
    ImageContent,
    TextContent,
    TextResourceContents,
)

from trajsynth.mcp_servers.environment.results import ToolResult, probe_value, tool_result


def _text(text: str, *, is_error: bool = False) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=text)], is_error=is_error)


def test_a_flagged_result_is_a_tool_error_whoever_reads_it() -> None:
    raw = _text("Error executing tool get_user: user 'ghost' not found", is_error=True)
    for read_errors in (True, False):
        got = tool_result(raw, read_errors=read_errors)
        assert (got.is_error, got.error_type) == (True, "tool_error")
        assert got.text == "Error executing tool get_user: user 'ghost' not found"


def test_an_error_said_only_in_the_text_counts_when_errors_are_read() -> None:
    raw = _text('{"error": "no such repository"}')
    outside = tool_result(raw)  # an outside server: may say "error" only in its result
    assert (outside.is_error, outside.error_type) == (True, "error_result")
    bundled = tool_result(raw, read_errors=False)  # a bundled server flags its errors
    assert (bundled.is_error, bundled.error_type) == (False, None)


def test_each_content_block_reads_as_text() -> None:
    raw = CallToolResult(
        content=[
            TextContent(type="text", text="two files"),
            EmbeddedResource(
                type="resource",
                resource=TextResourceContents(uri="file:///w/a.txt", text="alpha"),
            ),
            ImageContent(type="image", data="aGk=", mime_type="image/png"),
        ]
    )
    assert tool_result(raw).text == "two files\nalpha\n[image image/png]"


def test_structured_content_alone_reads_as_its_canonical_json() -> None:
    raw = CallToolResult(content=[], structured_content={"b": 1, "a": [2]})
    got = tool_result(raw)
    assert got == ToolResult(text='{"a":[2],"b":1}', structured={"b": 1, "a": [2]})


def test_a_probe_value_names_the_work_dir_and_hashes_long_text() -> None:
    at = ToolResult(text='{"path": "/tmp/sbx-1/notes.md"}')
    assert probe_value(at, "/tmp/sbx-1") == {"path": "<workdir>/notes.md"}
    long = probe_value(ToolResult(text="x" * 5000))
    assert isinstance(long, dict) and len(str(long["sha256"])) == 64
