"""Serve back: a merged HF model written as a GGUF that transformers and llama.cpp load."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from trajsynth.schemas import AgentRole, InputError, LLMConfig, Message, MessageRole

pytestmark = pytest.mark.alone  # torch or transformers: every core


@pytest.fixture(scope="module")
def hf_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from trajsynth.training.models_io import load_base_model, load_base_tokenizer

    folder = tmp_path_factory.mktemp("hf") / "model"
    load_base_model("embedded").save_pretrained(str(folder))
    load_base_tokenizer("embedded").save_pretrained(str(folder))
    return folder


@pytest.mark.slow
def test_gguf_round_trip_gives_back_the_same_weights(hf_model: Path, tmp_path: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    from trajsynth.training.serve import export_gguf

    out = export_gguf(hf_model, tmp_path / "m.f32.gguf", dtype="f32")
    back = AutoModelForCausalLM.from_pretrained(str(tmp_path), gguf_file=out.name)
    ref = AutoModelForCausalLM.from_pretrained(str(hf_model))
    # attn_q / attn_k go through llama.cpp's rotary permutation and back: equal bit for bit
    a, b = ref.state_dict(), back.state_dict()
    assert set(a) == set(b)
    assert all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.slow
def test_gguf_export_refuses_a_non_model_folder(tmp_path: Path) -> None:
    from trajsynth.training.serve import export_gguf

    with pytest.raises(InputError, match="not a model|config"):
        from trajsynth.training.serve import policy_gguf

        policy_gguf(tmp_path)
    with pytest.raises(InputError, match="dtype 'q8'"):
        export_gguf(tmp_path, tmp_path / "x.gguf", dtype="q8")


@pytest.mark.slow
@pytest.mark.llm
def test_the_embedded_server_serves_the_exported_policy(hf_model: Path) -> None:
    from trajsynth.agents.policy import serve_policy
    from trajsynth.training.serve import policy_gguf

    async def ask() -> str:
        async with serve_policy(
            policy_gguf(hf_model), LLMConfig(temperature=0.0, max_tokens=16)
        ) as client:
            result = await client.chat(
                [Message(role=MessageRole.USER, content="What is the capital of France?")],
                role=AgentRole.ASSISTANT,
            )
            return result.message.content or ""

    assert "Paris" in asyncio.run(ask())
    assert (hf_model / "model.f16.gguf").is_file()  # written once, reused next time


@pytest.mark.slow
@pytest.mark.llm
def test_an_exported_policy_is_served_in_the_layout_it_was_trained_in(hf_model: Path) -> None:
    """The GGUF carries the training template and names its tool layout; the embedded server
    then prompts it with that template and reads its ``<tool_call>`` back as a call."""
    import json

    from gguf import GGUFReader

    from trajsynth.agents.policy import serve_policy
    from trajsynth.llm.tool_template import TOOL_CALL_JSON, TOOL_CHAT_TEMPLATE, TOOL_FORMAT_KEY
    from trajsynth.training.serve import policy_gguf

    gguf = policy_gguf(hf_model)
    fields = GGUFReader(str(gguf)).fields
    assert fields[TOOL_FORMAT_KEY].contents() == TOOL_CALL_JSON
    assert fields["tokenizer.chat_template"].contents() == TOOL_CHAT_TEMPLATE
    tool = {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }

    async def ask() -> object:
        async with serve_policy(gguf, LLMConfig(temperature=0.0, max_tokens=32)) as client:
            return await client.chat(
                [Message(role=MessageRole.USER, content="What is the weather in Paris?")],
                role=AgentRole.ASSISTANT,
                tools=[tool],
                tool_choice="required",
            )

    result = asyncio.run(ask())
    (call,) = result.message.tool_calls  # type: ignore[attr-defined]
    assert call.function.name == "get_weather"
    assert set(json.loads(call.function.arguments)) == {"city"}
