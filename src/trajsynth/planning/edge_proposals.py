"""Edges the LLM reads into an outside server's tool descriptions (links value flow misses).

Value flow links a returned key to a parameter of the same name; a server whose search
returns ``ref`` for what its ``close`` calls ``ticket_number`` hides the edge from it. The
descriptions often say it in words. ``propose_edges`` asks the planner's model for such
edges in one request: the tool list as text, and one function to call whose parameters are
the proposals, tool names constrained to the server's own by ``enum`` and each target to its
own parameters by one ``anyOf`` branch per tool (servers that constrain tool calls by grammar,
llama.cpp and vLLM, can only answer with real names and real pairs). The fields each tool was
seen returning while discovery probed it are listed beside it.
Nothing proposed is trusted: ``mcp_servers.discovery`` keeps an edge only when a probe
confirms it, and notes why the others were rejected.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from trajsynth.llm.client import LLMClient
from trajsynth.planning.function_call import call_function
from trajsynth.schemas import EdgeProposal, Message, MessageRole, ToolSpec

__all__ = [
    "PROPOSE_TOOL",
    "parse_proposals",
    "propose_edges",
    "proposal_request",
]

log = logging.getLogger(__name__)

PROPOSE_TOOL = "propose_edges"
_MAX_TOOLS = 40  # beyond this the list alone would not fit a small model's context
_SYSTEM = (
    "You read the tools of one service and find where a value one tool returns is what "
    "another tool takes as a parameter (an id a search returns, passed to a get or an "
    "update). Answer by calling the function with every such pair you find."
)


def _params(tool: ToolSpec) -> list[str]:
    props = tool.input_schema.get("properties") or {}
    return [str(k) for k in props] if isinstance(props, Mapping) else []


def _tool_line(tool: ToolSpec, returned: Sequence[str]) -> str:
    props = tool.input_schema.get("properties") or {}
    params = []
    for name, sub in props.items() if isinstance(props, Mapping) else []:
        sub = sub if isinstance(sub, Mapping) else {}
        about = str(sub.get("description") or "").strip()[:60]
        params.append(f"{name} ({sub.get('type', 'any')}){': ' + about if about else ''}")
    line = f"- {tool.name}: {tool.description.strip()[:200]}"
    line += f"\n  takes {'; '.join(params)}" if params else "\n  takes nothing"
    if returned:
        line += f"\n  returned fields: {', '.join(returned[:8])}"
    return line


def proposal_request(
    tools: Sequence[ToolSpec], returned: Mapping[str, Sequence[str]] | None = None
) -> tuple[list[Message], dict[str, Any]]:
    """The messages and the one function tool of the request; ``returned``: the fields each
    tool was seen returning."""
    shown = list(tools)[:_MAX_TOOLS]
    names = [t.name for t in shown]
    returned = returned or {}

    def branch(target: ToolSpec) -> dict[str, Any]:
        return {
            "type": "object",
            "properties": {
                "source": {"type": "string", "enum": names, "description": "the tool returning"},
                "output_field": {"type": "string", "description": "the field it returns"},
                "target": {"type": "string", "const": target.name},
                "param": {"type": "string", "enum": _params(target)},
                "why": {"type": "string", "description": "a few words"},
            },
            "required": ["source", "output_field", "target", "param"],
        }

    item: dict[str, Any] = {"anyOf": [branch(t) for t in shown if _params(t)]}
    tool = {
        "type": "function",
        "function": {
            "name": PROPOSE_TOOL,
            "description": "Pairs where one tool's returned field feeds another's parameter.",
            "parameters": {
                "type": "object",
                "properties": {"edges": {"type": "array", "items": item, "maxItems": 12}},
                "required": ["edges"],
            },
        },
    }
    user = "Tools of the service:\n" + "\n".join(
        _tool_line(t, returned.get(t.name, ())) for t in shown
    )
    messages = [
        Message(role=MessageRole.SYSTEM, content=_SYSTEM),
        Message(role=MessageRole.USER, content=user),
    ]
    return messages, tool


def parse_proposals(arguments: Mapping[str, Any], tools: Sequence[ToolSpec]) -> list[EdgeProposal]:
    """The well-formed proposals in the arguments of a ``propose_edges`` call: two different
    tools of the server, a parameter the target has, a named field; anything else is dropped
    (the model's slip, not an edge)."""
    params = {t.name: set(_params(t)) for t in tools}
    out: list[EdgeProposal] = []
    edges = arguments.get("edges")
    for raw in edges if isinstance(edges, list) else []:
        if not isinstance(raw, dict):
            continue
        source, target = str(raw.get("source", "")), str(raw.get("target", ""))
        param, field = str(raw.get("param", "")), str(raw.get("output_field", "")).strip()
        if source == target or source not in params or param not in params.get(target, ()):
            continue
        if not field:
            continue
        proposal = EdgeProposal(
            source=source, out_field=field, target=target, in_param=param,
            why=str(raw.get("why", ""))[:200],
        )  # fmt: skip
        if proposal not in out:
            out.append(proposal)
    return out


async def propose_edges(
    llm: LLMClient,
    tools: Sequence[ToolSpec],
    returned: Mapping[str, Sequence[str]] | None = None,
    *,
    seed: int = 0,
    temperature: float = 0.2,
    max_tokens: int = 512,
) -> list[EdgeProposal]:
    """The edges the LLM reads into ``tools``' descriptions (unconfirmed; see the module);
    ``returned``: the fields each tool was seen returning (discovery's probes)."""
    if len(tools) < 2 or not any(_params(t) for t in tools):
        return []
    messages, tool = proposal_request(tools, returned)
    arguments, _ = await call_function(
        llm, messages, tool, seed=seed, temperature=temperature, max_tokens=max_tokens
    )
    proposals = parse_proposals(arguments, list(tools)[:_MAX_TOOLS])
    log.info("the LLM proposed %d edges over %d tools", len(proposals), len(tools))
    return proposals
