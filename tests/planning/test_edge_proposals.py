"""Edges the LLM reads into tool descriptions: the request, what of a reply
is kept, and (llm tier) the embedded model answering it. Whether a proposal becomes an edge is
decided by a probe: tests/mcp_servers/test_outside.py."""

from __future__ import annotations

import pytest
from fakes.llm import ScriptedLLM, say, tool_call

from trajsynth.planning.edge_proposals import PROPOSE_TOOL, propose_edges
from trajsynth.schemas import EdgeProposal, LLMConfig, ToolSpec


def _tool(name: str, description: str, **params: str) -> ToolSpec:
    return ToolSpec(
        name=name,
        description=description,
        input_schema={
            "type": "object",
            "properties": {p: {"type": t} for p, t in params.items()},
            "required": list(params),
        },
    )


# `ref` is what `open_ticket` returns and `close_ticket` calls `ticket_number`: value flow,
# which links equal key names, cannot see it; the descriptions say it.
TICKETS = [
    _tool("open_ticket", "Open a support ticket; returns its reference `ref`.", subject="string"),
    _tool(
        "close_ticket", "Close a ticket given the ref open_ticket returned.", ticket_number="string"
    ),
    _tool("status", "The help desk's status.", verbose="boolean"),
]


async def test_the_request_constrains_names_to_the_servers_own() -> None:
    good = {"source": "open_ticket", "output_field": "ref", "target": "close_ticket",
            "param": "ticket_number", "why": "the ref is the ticket number"}  # fmt: skip
    fake = ScriptedLLM([tool_call(PROPOSE_TOOL, {"edges": [good]})])
    got = await propose_edges(fake.client(), TICKETS, {"open_ticket": ["ref", "subject"]})
    fake.assert_consumed()
    request = fake.requests[0]
    assert request["tool_choice"] == "required"
    [tool] = request["tools"]
    item = tool["function"]["parameters"]["properties"]["edges"]["items"]
    # one branch per target: a target can only be named with a parameter of its own
    pairs = {b["properties"]["target"]["const"]: b["properties"]["param"]["enum"]
             for b in item["anyOf"]}  # fmt: skip
    assert pairs == {"open_ticket": ["subject"], "close_ticket": ["ticket_number"],
                     "status": ["verbose"]}  # fmt: skip
    source = item["anyOf"][0]["properties"]["source"]["enum"]
    assert source == ["open_ticket", "close_ticket", "status"]
    prompt = request["messages"][-1]["content"]
    assert "returns its reference `ref`" in prompt
    assert "returned fields: ref, subject" in prompt  # what discovery saw it return
    assert got == [
        EdgeProposal(source="open_ticket", out_field="ref", target="close_ticket",
                     in_param="ticket_number", why="the ref is the ticket number")
    ]  # fmt: skip


async def test_malformed_proposals_are_dropped_not_trusted() -> None:
    edges = [
        {"source": "open_ticket", "output_field": "ref", "target": "open_ticket",
         "param": "subject"},  # a tool feeding itself
        {"source": "open_ticket", "output_field": "ref", "target": "close_ticket",
         "param": "subject"},  # close_ticket has no `subject`
        {"source": "nope", "output_field": "x", "target": "close_ticket",
         "param": "ticket_number"},  # no such tool
        {"source": "status", "output_field": "", "target": "close_ticket",
         "param": "ticket_number"},  # no field named
        "open_ticket -> close_ticket",
        {"source": "open_ticket", "output_field": "ref", "target": "close_ticket",
         "param": "ticket_number"},
        {"source": "open_ticket", "output_field": "ref", "target": "close_ticket",
         "param": "ticket_number"},  # the same twice: once
    ]  # fmt: skip
    fake = ScriptedLLM([tool_call(PROPOSE_TOOL, {"edges": edges})])
    got = await propose_edges(fake.client(), TICKETS)
    assert [(p.source, p.target, p.in_param) for p in got] == [
        ("open_ticket", "close_ticket", "ticket_number")
    ]


async def test_a_reply_without_the_call_or_with_broken_json_proposes_nothing() -> None:
    fake = ScriptedLLM([say("I think open_ticket feeds close_ticket."),
                        tool_call(PROPOSE_TOOL, '{"edges": [{"source": ', raw=True)])  # fmt: skip
    assert await propose_edges(fake.client(), TICKETS) == []
    assert await propose_edges(fake.client(), TICKETS) == []
    assert await propose_edges(fake.client(), TICKETS[:1]) == []  # one tool: no request
    fake.assert_consumed()


@pytest.mark.llm
@pytest.mark.slow
async def test_the_embedded_model_answers_under_the_schema() -> None:
    """SmolLM2-135M under llama.cpp's grammar: the reply calls the function with arguments
    that fit its schema (names from the enums), so what it proposes reaches the probe."""
    import json

    from trajsynth.llm.client import open_llm_client
    from trajsynth.planning.edge_proposals import parse_proposals, proposal_request
    from trajsynth.schemas import AgentRole

    messages, tool = proposal_request(TICKETS)
    async with open_llm_client(LLMConfig(max_tokens=256)) as llm:
        result = await llm.chat(
            messages, role=AgentRole.PLANNER, tools=[tool], tool_choice="required",
            temperature=0.2, max_tokens=256, seed=0,
        )  # fmt: skip
    [call] = result.message.tool_calls or []
    assert call.function.name == PROPOSE_TOOL
    arguments = json.loads(call.function.arguments)
    edges = arguments["edges"]
    assert isinstance(edges, list)
    names = {t.name for t in TICKETS}
    for edge in edges:
        assert edge["source"] in names and edge["target"] in names
        # each target named with a parameter of its own (the schema's anyOf branches)
        params = {t.name: set(t.input_schema["properties"]) for t in TICKETS}
        assert edge["param"] in params[edge["target"]]
    kept = parse_proposals(arguments, TICKETS)
    assert len(kept) <= len(edges)
