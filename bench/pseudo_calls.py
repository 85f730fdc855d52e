"""Pseudo-calls the embedded model makes right after a tool result, per 100 turns.

    HF_HUB_OFFLINE=1 python bench/pseudo_calls.py [--seeds 8] [--json out.json]

The turn where the issue's junk came from: on the embedded defaults the assistant is asked
for words right after a tool result (``tool_choice="none"``), and SmolLM2 imitates the
prompt's tool turn, writing ``functions.<tool> returned: {...}`` as its answer, which the
client used to parse into a call to a tool named "<tool> returned". This replays three such
conversations (a delete, a booking, an order lookup; each: system, the user's goal, the
assistant's call, the tool's result) with ``--seeds`` seeds each against the embedded
llama.cpp server, through the real client, and counts per 100 turns:

* ``made_up``: answers whose server text writes a tool result (``functions.x returned``);
* ``pseudo_calls``: calls the client parsed that name no offered tool;
* ``empty``: answers left with neither words nor a call.

Only APIs that exist before and after the parser fix are used, so the same file measures
both (``PYTHONPATH=<the old src>`` for the before). The control that could show the "after"
figure false: the raw server text is counted too, so a server that still writes results but a
client that hides them would show ``made_up > 0``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from trajsynth.llm.client import OpenAILLMClient  # noqa: E402
from trajsynth.llm.embedded import EmbeddedLLMServer  # noqa: E402
from trajsynth.schemas import (  # noqa: E402
    AgentRole,
    FunctionCall,
    LLMConfig,
    Message,
    MessageRole,
    ToolCall,
)

_MADE_UP = re.compile(r"(?m)^[ \t]*functions\.[^\s:]*[ \t]+returned")


def _tool(name: str, props: dict[str, str]) -> dict:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": name.replace("_", " "),
            "parameters": {
                "type": "object",
                "properties": {k: {"type": v} for k, v in props.items()},
                "required": list(props),
            },
        },
    }


CASES = [
    (
        [_tool("delete_file", {"path": "string"}), _tool("read_file", {"path": "string"})],
        "Please delete README.md from the project.",
        ("delete_file", {"path": "README.md"}),
        '{"deleted": "README.md", "ok": true}',
    ),
    (
        [_tool("book_room", {"room": "string", "nights": "integer"}), _tool("list_rooms", {})],
        "Book the sea-view room for two nights and tell me the booking id.",
        ("book_room", {"room": "sea-view", "nights": 2}),
        '{"booking_id": "BK-1042", "room": "sea-view", "nights": 2}',
    ),
    (
        [_tool("get_order", {"order_id": "string"}), _tool("cancel_order", {"order_id": "string"})],
        "What is the status of my order W1?",
        ("get_order", {"order_id": "W1"}),
        '{"order_id": "W1", "status": "delivered", "total": 54.2}',
    ),
]


def _conversation(goal: str, call: tuple[str, dict], result: str) -> list[Message]:
    name, args = call
    tc = ToolCall(id="call_0_bench", function=FunctionCall(name=name, arguments=json.dumps(args)))
    return [
        Message(role=MessageRole.SYSTEM, content="You are a helpful assistant. Use the tools."),
        Message(role=MessageRole.USER, content=goal),
        Message(role=MessageRole.ASSISTANT, tool_calls=[tc]),
        Message(role=MessageRole.TOOL, content=result, tool_call_id=tc.id, name=name),
    ]


async def measure(base_url: str, seeds: int) -> dict[str, float]:
    config = LLMConfig(base_url=base_url, max_tokens=96, timeout_s=600, max_retries=1)
    counts = {"turns": 0, "made_up": 0, "pseudo_calls": 0, "calls": 0, "empty": 0}
    async with OpenAILLMClient(config) as client:
        for tools, goal, call, result in CASES:
            offered = {t["function"]["name"] for t in tools}
            for seed in range(seeds):
                answer = await client.chat(
                    _conversation(goal, call, result),
                    role=AgentRole.ASSISTANT,
                    tools=tools,
                    tool_choice="none",
                    temperature=0.3,
                    seed=seed,
                )
                raw = answer.raw.get("choices", [{}])[0]  # type: ignore[index]
                text = str((raw.get("message") or {}).get("content") or "")  # type: ignore[union-attr]
                calls = answer.message.tool_calls or []
                counts["turns"] += 1
                counts["made_up"] += bool(_MADE_UP.search(text))
                counts["calls"] += len(calls)
                counts["pseudo_calls"] += sum(c.function.name not in offered for c in calls)
                counts["empty"] += not calls and not (answer.message.content or "").strip()
    per100 = {
        f"{k}_per_100_turns": 100 * v / counts["turns"] for k, v in counts.items() if k != "turns"
    }
    return {**counts, **per100}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=8)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    with EmbeddedLLMServer(startup_timeout_s=600) as server:
        figures = asyncio.run(measure(server.base_url, args.seeds))
    print(json.dumps(figures, indent=2))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
