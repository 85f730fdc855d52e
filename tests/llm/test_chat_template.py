"""The tool-aware chat template on SmolLM2's tokenizer (read from its GGUF)."""

from __future__ import annotations

import pytest

from trajsynth.llm.chat_template import (
    TOOL_CHAT_TEMPLATE,
    RenderError,
    add_response_parser,
    load_tokenizer,
    render,
)

# each loads transformers (and torch) for the tokenizer: the slow tier's
pytestmark = [pytest.mark.slow, pytest.mark.alone]  # transformers: every core

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "search",
            "description": "find products",
            "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
        },
    }
]
CALL = {"id": "c1", "type": "function", "function": {"name": "search", "arguments": '{"q": "mug"}'}}
MESSAGES = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Find a red mug"},
    {"role": "assistant", "content": None, "tool_calls": [CALL]},
    {"role": "tool", "tool_call_id": "c1", "content": '[{"sku": "M1"}]'},
    {"role": "assistant", "content": "Found M1."},
    {"role": "user", "content": "Thanks"},
    {"role": "assistant", "content": "You're welcome."},
]
ASSISTANT_TEXT = [
    '<tool_call>\n{"name": "search", "arguments": {"q": "mug"}}\n</tool_call><|im_end|>',
    "Found M1.<|im_end|>",
    "You're welcome.<|im_end|>",
]


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer()


def test_text_shows_tools_calls_and_results(tokenizer) -> None:
    text = tokenizer.apply_chat_template(MESSAGES, tools=TOOLS, tokenize=False)
    assert text.startswith("<|im_start|>system\nBe brief.\n\n# Tools\n")
    assert '"name": "search", "description": "find products"' in text
    assert '<|im_start|>tool\n<tool_response>\n[{"sku": "M1"}]\n</tool_response>' in text
    for part in ASSISTANT_TEXT:
        assert f"<|im_start|>assistant\n{part}\n" in text
    plain = tokenizer.apply_chat_template(MESSAGES[1:2], tokenize=False)
    assert plain.startswith("<|im_start|>system\nYou are a helpful AI assistant named SmolLM")
    assert "# Tools" not in plain


def test_mask_covers_exactly_the_assistant_tokens(tokenizer) -> None:
    ids, mask = render(MESSAGES, TOOLS, tokenizer, row_id="r1")
    assert len(ids) == len(mask)
    # the masked spans, decoded, are the assistant outputs and nothing else
    spans, current = [], []
    for token, m in zip(ids, mask, strict=True):
        if m:
            current.append(token)
        elif current:
            spans.append(tokenizer.decode(current))
            current = []
    if current:
        spans.append(tokenizer.decode(current))
    assert spans == ASSISTANT_TEXT
    # dict arguments render the same tokens as the canonical JSON string
    as_dict = [dict(m) for m in MESSAGES]
    dict_call = {**CALL, "function": {"name": "search", "arguments": {"q": "mug"}}}
    as_dict[2] = {**as_dict[2], "tool_calls": [dict_call]}
    assert render(as_dict, TOOLS, tokenizer) == (ids, mask)


def test_trl_accepts_the_template_for_training(tokenizer) -> None:
    from trl.chat_template_utils import (
        has_generation_markers,
        is_chat_template_prefix_preserving,
        is_chat_template_stop_token_trained,
        supports_tool_calling,
    )

    assert tokenizer.chat_template == TOOL_CHAT_TEMPLATE
    assert has_generation_markers(tokenizer.chat_template)
    assert supports_tool_calling(tokenizer)
    assert is_chat_template_prefix_preserving(tokenizer)
    assert is_chat_template_stop_token_trained(tokenizer)
    parsed = add_response_parser(tokenizer).parse_response(ASSISTANT_TEXT[0], prefix="")
    assert parsed["tool_calls"] == [
        {"type": "function", "function": {"name": "search", "arguments": {"q": "mug"}}}
    ]


@pytest.mark.parametrize(
    ("messages", "tools", "match"),
    [
        (
            [{"role": "user", "content": "x"}, {"role": "assistant", "tool_calls": [
                {"id": "c", "function": {"name": "search", "arguments": "{bad"}}]}],
            TOOLS,
            r"row r9: message 1, call 'search': arguments are not valid JSON",
        ),
        (MESSAGES, [{"type": "function", "function": {"description": "x"}}], r"row r9: .*tool 0"),
        ([{"role": "critic", "content": "x"}, {"role": "assistant", "content": "y"}], None,
         r"row r9: .*unknown message role critic"),
        ([{"role": "user", "content": "only a question"}], None, r"row r9: no assistant tokens"),
    ],
)  # fmt: skip
def test_bad_rows_raise_naming_the_row(tokenizer, messages, tools, match) -> None:
    with pytest.raises(RenderError, match=match):
        render(messages, tools, tokenizer, row_id="r9")


def test_the_server_renders_the_template_as_transformers_does(tokenizer) -> None:
    """``llm.tool_template.render_tool_template`` (what the embedded server prompts a tuned
    policy with) and transformers' rendering (what SFT trained it on) agree on every prefix."""
    from trajsynth.llm.tool_template import render_tool_template

    messages = [dict(m) for m in MESSAGES]
    for cut in range(1, len(messages) + 1):
        for generation_prompt in (True, False):
            expected = tokenizer.apply_chat_template(
                messages[:cut], tools=TOOLS, tokenize=False,
                add_generation_prompt=generation_prompt,
            )  # fmt: skip
            got = render_tool_template(
                messages[:cut], TOOLS, add_generation_prompt=generation_prompt
            )
            assert got == expected, cut
    assert render_tool_template(messages[1:2], None) == tokenizer.apply_chat_template(
        messages[1:2], tokenize=False, add_generation_prompt=True
    )


def test_the_tokenizer_cache_is_keyed_by_the_ggufs_content_not_its_path(tmp_path) -> None:
    """A fresh venv (a CI clone) installs the same GGUF at another path with another mtime:
    it must find the tokenizer the last one saved, and a changed file must not."""
    import os

    from trajsynth.llm.chat_template import _cache_key

    a, b = tmp_path / "a" / "m.gguf", tmp_path / "b" / "m.gguf"
    for path in (a, b):
        path.parent.mkdir()
        path.write_bytes(b"GGUF" + bytes(range(256)) * 64)
    os.utime(b, ns=(1, 1))
    assert _cache_key(a) == _cache_key(b)
    b.write_bytes(b"GGUF" + bytes(range(255)) * 64)
    assert _cache_key(a) != _cache_key(b)
