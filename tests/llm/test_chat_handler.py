"""The embedded server's chat handler, driven by a scripted stand-in for ``llama_cpp.Llama``.

The real model runs in ``test_embedded.py`` (llm tier); here the handler's control flow
(decision, grammar-constrained arguments, usage, logprobs) is checked in milliseconds.
"""

from __future__ import annotations

import doctest
import json
import math
from typing import Any

import numpy as np
import pytest

pytest.importorskip("llama_cpp")

from trajsynth.llm import chat_handler  # noqa: E402
from trajsynth.llm.chat_handler import (  # noqa: E402
    call_probability,
    chatml_tools_handler,
    render_prompt,
)

VOCAB = ["<eot>", "functions", "The", " weather", " is", " sunny", "{", "}", "x"]
FUNCTIONS = VOCAB.index("functions")
THE = VOCAB.index("The")
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather for a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]
ASK = [{"role": "user", "content": "Weather in Paris?"}]


class FakeLlama:
    """Answers each create_completion with the next scripted text, one 'token' per char
    group, calling the logits processors with logits that favour ``first_token``."""

    def __init__(self, texts: list[str], *, p_functions: float) -> None:
        self.texts = list(texts)
        self.calls: list[dict[str, Any]] = []
        self.p_functions = p_functions

    def n_vocab(self) -> int:
        return len(VOCAB)

    def detokenize(self, tokens: list[int], prev_tokens: Any = None) -> bytes:
        return "".join(VOCAB[t] for t in tokens).encode()

    def _logits(self) -> np.ndarray:
        rest = 1.0 - self.p_functions
        probs = np.full(len(VOCAB), rest * 0.4 / (len(VOCAB) - 2))
        probs[FUNCTIONS] = self.p_functions
        probs[THE] = rest * 0.6
        return np.log(probs).astype(np.float32)

    def create_completion(self, prompt: str, **kw: Any) -> dict[str, Any]:
        self.calls.append({"prompt": prompt, **kw})
        processors = kw.get("logits_processor") or []
        if kw.get("max_tokens") == 1:  # the decision probe
            for proc in processors:
                proc(np.array([0]), self._logits())
            text = ""
        else:
            text = self.texts.pop(0)
            fed: list[int] = [0]
            for step in range(3):  # three sampled tokens, each fed back but the last
                for proc in processors:
                    proc(np.array(fed), self._logits())
                fed.append(THE if step == 0 else 4)
        return {
            "id": f"cmpl-{len(self.calls)}",
            "created": 0,
            "model": "fake",
            "choices": [{"text": text, "finish_reason": "stop", "logprobs": None}],
            "usage": {"prompt_tokens": len(prompt.split()), "completion_tokens": 3},
        }


def test_own_options_leave_the_servers_argv_in_order() -> None:
    """``--max_parallel_calls`` and ``--call_bias`` (ours, argparse) come out of the argv the
    embedded server is started with; llama_cpp.server gets the rest unchanged, in order."""
    argv = ["--model", "m.gguf", "--max_parallel_calls", "1", "--chat_format", "x",
            "--call_bias", "-1.5", "--port", "8080"]  # fmt: skip
    ours, rest = chat_handler.own_options(argv)
    assert (ours.max_parallel_calls, ours.call_bias) == (1, -1.5)  # a negative value too
    assert rest == ["--model", "m.gguf", "--chat_format", "x", "--port", "8080"]
    ours, rest = chat_handler.own_options(["--max_parallel_calls=3", "--max_parallel", "2"])
    assert ours.max_parallel_calls == 3 and ours.call_bias is None
    assert rest == ["--max_parallel", "2"]  # a prefix of ours is not taken for ours
    with pytest.raises(SystemExit):  # argparse's own error for a value that is no number
        chat_handler.own_options(["--call_bias", "high"])


def test_module_doctests() -> None:
    failures, tried = doctest.testmod(chat_handler)
    assert tried >= 8 and failures == 0


def test_prompt_lists_tools_in_the_system_message_and_shows_results() -> None:
    prompt = render_prompt(
        [
            {"role": "system", "content": "Be brief."},
            *ASK,
            {
                "role": "assistant",
                "tool_calls": [
                    {"id": "c9", "function": {"name": "get_weather", "arguments": '{"city":"P"}'}}
                ],
            },
            {"role": "tool", "tool_call_id": "c9", "content": '{"sky": "sunny"}'},
        ],
        TOOLS,
    )
    assert prompt.startswith("<|im_start|>system\nBe brief.\n\nYou have access")
    assert "functions.get_weather: Weather for a city" in prompt
    assert 'functions.get_weather:\n{"city":"P"}<|im_end|>' in prompt
    # the tool's name is recovered from the call id when the server drops `name`
    assert '<|im_start|>tool\nfunctions.get_weather returned:\n{"sky": "sunny"}' in prompt
    assert prompt.endswith("<|im_start|>assistant\n")


def test_call_probability_shifts_the_log_odds() -> None:
    logits = np.log(np.array([0.1, 0.9]))
    assert call_probability(logits, np.array([0]), 1.0, 0.0) == pytest.approx(0.1)
    shifted = call_probability(logits, np.array([0]), 1.0, math.log(9))
    assert shifted == pytest.approx(0.5)
    # temperature sharpens: at T = 0.5 the odds are squared
    assert call_probability(logits, np.array([0]), 0.5, 0.0) == pytest.approx(0.01 / 0.82)


def test_auto_answers_in_words_when_a_call_is_unlikely() -> None:
    llama = FakeLlama(["The weather is sunny."], p_functions=1e-6)
    out = chatml_tools_handler(
        llama, ASK, tools=TOOLS, tool_choice="auto", seed=1, logprobs=True, top_logprobs=2
    )
    choice = out["choices"][0]
    assert choice["message"] == {"role": "assistant", "content": "The weather is sunny."}
    assert choice["finish_reason"] == "stop"
    # the probe is not counted; the answer's fed-back tokens carry logprobs
    assert out["usage"]["completion_tokens"] == 3
    entries = choice["logprobs"]["content"]
    assert [e["token"] for e in entries] == ["The", " is"]
    assert entries[0]["logprob"] == pytest.approx(math.log(0.6), abs=1e-5)
    assert entries[1]["logprob"] == pytest.approx(math.log(0.4 / 7), abs=1e-5)
    assert entries[0]["top_logprobs"][0]["token"] == "The"
    assert len(entries[0]["top_logprobs"]) == 2


def test_auto_calls_when_the_model_leans_to_a_call() -> None:
    # p(call) = 0.95 and the seed's draw is 0.84: a call; then the follow-up ends the turn
    llama = FakeLlama(["functions.get_weather", '{"city": "Paris"}', ""], p_functions=0.95)
    out = chatml_tools_handler(
        llama, ASK, tools=TOOLS, tool_choice="auto", seed=0, temperature=1.0, logprobs=False
    )
    choice = out["choices"][0]
    (call,) = choice["message"]["tool_calls"]
    assert call["function"] == {"name": "get_weather", "arguments": '{"city": "Paris"}'}
    assert choice["finish_reason"] == "tool_calls"
    assert choice["logprobs"] is None
    # the arguments were generated under the JSON-schema grammar, after the call header
    args_call = llama.calls[-2]
    assert args_call["prompt"].endswith("functions.get_weather:\n")
    assert args_call["grammar"] is not None


def test_required_and_named_skip_the_probe() -> None:
    llama = FakeLlama(["functions.get_weather", "{}", ""], p_functions=0.0)
    out = chatml_tools_handler(llama, ASK, tools=TOOLS, tool_choice="required", seed=3)
    assert out["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "get_weather"
    assert all(c.get("max_tokens") != 1 for c in llama.calls)

    llama = FakeLlama(['{"city": "Rome"}'], p_functions=0.0)
    named = {"type": "function", "function": {"name": "get_weather"}}
    out = chatml_tools_handler(llama, ASK, tools=TOOLS, tool_choice=named, seed=3)
    args = out["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"]
    assert json.loads(args) == {"city": "Rome"}
    assert len(llama.calls) == 1

    with pytest.raises(ValueError, match="not in tools"):
        bad = {"type": "function", "function": {"name": "nope"}}
        chatml_tools_handler(FakeLlama([], p_functions=0.0), ASK, tools=TOOLS, tool_choice=bad)


def test_no_tools_or_none_is_plain_chat() -> None:
    llama = FakeLlama(["Hello there."], p_functions=0.9)
    out = chatml_tools_handler(llama, ASK, tools=TOOLS, tool_choice="none", seed=2)
    assert out["choices"][0]["message"]["content"] == "Hello there."
    assert "You have access" not in llama.calls[0]["prompt"]


def test_a_model_trained_here_is_served_in_its_own_layout() -> None:
    """A GGUF naming ``tool-call-json`` (what ``export_gguf`` writes) is prompted with the
    training template and writes ``<tool_call>`` blocks; the decision, the name grammar and
    the argument grammar work as for the base layout."""
    from trajsynth.llm.tool_template import TOOL_CALL_JSON, TOOL_FORMAT_KEY

    VOCAB[FUNCTIONS] = "<tool_call>"  # the first token of a call in this layout
    try:
        opening = '<tool_call>\n{"name": "get_weather", "arguments": '
        llama = FakeLlama([opening, '{"city": "Paris"}', ""], p_functions=0.95)
        llama.metadata = {TOOL_FORMAT_KEY: TOOL_CALL_JSON}
        result = [{"role": "tool", "tool_call_id": "c1", "content": '{"sky": "sunny"}'}]
        called = {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function",
             "function": {"name": "get_weather", "arguments": '{"city": "Rome"}'}}]}  # fmt: skip
        out = chatml_tools_handler(
            llama, [*ASK, called, *result], tools=TOOLS, tool_choice="auto", seed=0,
            temperature=1.0,
        )  # fmt: skip
    finally:
        VOCAB[FUNCTIONS] = "functions"
        chat_handler._call_tokens.clear()  # scanned with the changed vocabulary
    (call,) = out["choices"][0]["message"]["tool_calls"]
    assert call["function"] == {"name": "get_weather", "arguments": '{"city": "Paris"}'}
    prompt = llama.calls[0]["prompt"]
    assert "<tools>" in prompt and "functions.get_weather" not in prompt
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome"}}\n</tool_call>' in (
        prompt
    )
    assert '<|im_start|>tool\n<tool_response>\n{"sky": "sunny"}\n</tool_response>' in prompt
    args_call = llama.calls[-2]
    assert args_call["prompt"].endswith(opening)
    # a second call would follow the first's closing, on a new line
    assert llama.calls[-1]["prompt"].endswith('{"city": "Paris"}}\n</tool_call>')


def test_the_base_model_keeps_the_functions_layout() -> None:
    llama = FakeLlama(["functions.get_weather", "{}", ""], p_functions=0.0)
    llama.metadata = {"tokenizer.chat_template": "{{ messages }}"}
    chatml_tools_handler(llama, ASK, tools=TOOLS, tool_choice="required", seed=3)
    assert "functions.get_weather:" in llama.calls[0]["prompt"]
    assert chat_handler.tool_format(llama) is chat_handler.FUNCTIONS_FORMAT


def test_a_text_answer_ends_where_the_model_starts_writing_a_tool_result() -> None:
    """After a tool result (tool_choice "none", as the embedded run sends it) SmolLM2
    imitates the prompt's tool turn; the handler stops there and cuts that start off, so
    neither a made-up result nor a call to "<name> returned" leaves the server."""
    history = [
        *ASK,
        {"role": "assistant", "tool_calls": [
            {"id": "c1", "function": {"name": "get_weather", "arguments": '{"city":"P"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": '{"sky": "sunny"}'},
    ]  # fmt: skip
    made_up = 'It is sunny.\nfunctions.get_weather returned:\n{"sky": "rain"}'
    for choice in ("none", "auto"):
        llama = FakeLlama([made_up], p_functions=1e-6)
        out = chatml_tools_handler(llama, history, tools=TOOLS, tool_choice=choice, seed=1)
        message = out["choices"][0]["message"]
        assert message == {"role": "assistant", "content": "It is sunny."}
        assert out["choices"][0]["finish_reason"] == "stop"
        (stop,) = llama.calls[-1]["stopping_criteria"]
        assert isinstance(stop, chat_handler.ResultStop)


def test_result_stop_fires_on_the_generated_text_only() -> None:
    """The prompt itself holds ``functions.x returned`` (the tool turns): only what the
    model generated after it counts."""
    vocab = ["<p>", "functions.get_weather", " returned", ":", "Sunny", "\n", "The"]

    class Detok:
        def detokenize(self, tokens: list[int], prev_tokens: object = None) -> bytes:
            return "".join(vocab[t] for t in tokens).encode()

    stop = chat_handler.ResultStop(Detok())
    prompt = [0, 1, 2, 3, 5]  # the prompt ends with a result header of its own
    assert not stop(np.array([*prompt, 4]), None)
    assert not stop(np.array([*prompt, 4, 5, 6]), None)
    assert stop(np.array([*prompt, 4, 5, 1, 2]), None)


def test_argument_strings_cannot_hold_a_raw_control_character() -> None:
    """The argument grammar's string characters exclude U+0000-U+001F (a raw newline in a
    JSON string is invalid JSON); escapes such as \\n stay allowed."""
    schema = {
        "type": "object",
        "properties": {"body": {"type": "string"}, "code": {"type": "string", "pattern": "^a.*$"}},
    }
    gbnf = chat_handler.args_gbnf(json.dumps(schema))
    rules = dict(line.split(" ::= ", 1) for line in gbnf.splitlines() if " ::= " in line)
    assert rules["char"].startswith('[^"\\\\\\x7F\\x00-\\x1F] | "\\\\" (["\\\\/bfnrt]')
    assert rules["dot"] == '[^"\\\\\\x7F\\x00-\\x1F]'
    assert '[^"\\\\]' not in gbnf
    from llama_cpp import llama_grammar

    llama_grammar.LlamaGrammar.from_string(gbnf, verbose=False)  # it still compiles


def test_a_text_answer_cannot_start_a_line_with_a_call_token() -> None:
    """Where a line of a text answer starts, the tokens that begin ``functions.`` are
    masked, so the model writes words instead of imitating a tool turn; mid-line they stay."""
    llama = FakeLlama([], p_functions=0.5)
    mask = chat_handler.MaskCallStart(llama, np.array([FUNCTIONS]))
    prompt = np.array([0, 0, 0])
    first = mask(prompt, np.zeros(len(VOCAB)))
    assert first[FUNCTIONS] == -np.inf and first[THE] == 0.0
    mid = mask(np.array([*prompt, THE]), np.zeros(len(VOCAB)))
    assert mid[FUNCTIONS] == 0.0  # "The" does not end a line
    history = [*ASK, {"role": "tool", "tool_call_id": "c1", "content": "{}"}]
    llama = FakeLlama(["It is sunny."], p_functions=1e-6)
    chatml_tools_handler(llama, history, tools=TOOLS, tool_choice="none", seed=1)
    assert any(
        isinstance(p, chat_handler.MaskCallStart) for p in llama.calls[-1]["logits_processor"]
    )
