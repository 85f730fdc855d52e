"""The scripted user turn: written from the blueprint when every simulator draw
failed its checks, and never a hidden fact the assistant did not ask for by name."""

from __future__ import annotations

import asyncio

import pytest
from fakes.shop import plan_shop_task

from trajsynth.agents.user_sim import (
    STOP_MARKER,
    UserSimulator,
    asked_slots,
    check_user_reply,
    scripted_user_turn,
)
from trajsynth.schemas import Blueprint

HIDDEN = {"email": "mia.k@example.com", "order_id": "#W1234", "departure_date": "2026-03-04"}


@pytest.fixture(scope="module")
def task(tmp_path_factory: pytest.TempPathFactory) -> Blueprint:
    bp = asyncio.run(plan_shop_task(tmp_path_factory.mktemp("shop")))
    return bp.model_copy(
        update={"hidden_info": HIDDEN, "goal": "I'd like to know where my last order is."}
    )


def _leaks(text: str, allowed: set[str]) -> set[str]:
    return {k for k, v in HIDDEN.items() if k not in allowed and v.lower() in text.lower()}


def test_a_numbered_slot_is_asked_for_by_its_name(task: Blueprint) -> None:
    numbered = task.model_copy(update={"hidden_info": {"path_3": "docs/meeting.txt"}})
    assert asked_slots(numbered, "Which path should I write to?") == ["path_3"]
    assert asked_slots(numbered, "Which file should I write to?") == []


@pytest.mark.parametrize(
    ("question", "asked"),
    [
        ("Could you tell me your email address?", {"email"}),
        ("What is the order number?", {"order_id"}),
        ("What's your email, and which order is it?", {"email", "order_id"}),
        ("When is the departure date?", {"departure_date"}),
        ("Which date works for you?", set()),  # "departure" not named
        ("Please send me your email.", set()),  # not a question: the leak check says unasked
        ("How can I help you today?", set()),
    ],
)
def test_the_fallback_reveals_only_what_was_asked(
    task: Blueprint, question: str, asked: set[str]
) -> None:
    assert set(asked_slots(task, question)) == asked
    made = scripted_user_turn(task, question, set())
    assert made is not None
    reply, shown = made
    assert set(shown) == asked and reply.role_break is None and not reply.stop
    assert not _leaks(reply.text, asked)
    for slot in asked:
        assert HIDDEN[slot] in reply.text


def test_a_goal_holding_a_hidden_fact_is_not_restated(task: Blueprint) -> None:
    bp = task.model_copy(update={"goal": "Where is order #W1234? It has been a week."})
    reply, shown = scripted_user_turn(bp, "How can I help you?", set()) or (None, None)
    assert reply is not None and shown == []
    assert not _leaks(reply.text, set())
    # once revealed, restating the goal is fine
    reply, _ = scripted_user_turn(bp, "How can I help you?", {"order_id"}) or (None, None)
    assert reply is not None and "#W1234" in reply.text


def test_the_fallback_stops_when_the_goal_looks_met(task: Blueprint) -> None:
    reply, shown = scripted_user_turn(task, "Your order ships today.", set(), goal_met=True) or (
        None,
        None,
    )
    assert reply is not None and reply.stop and shown == []
    assert STOP_MARKER not in reply.text


def test_every_scripted_turn_passes_the_checks(task: Blueprint) -> None:
    # an assistant that parrots the goal: restating it would echo, so the nudge is used
    parrot = "You would like to know where your last order is, I will check where it is."
    reply, _ = scripted_user_turn(task, parrot, set()) or (None, None)
    assert reply is not None
    assert check_user_reply(reply.text, task, parrot, set()).role_break is None
    assert "repeat" not in reply.text


def test_each_resample_draws_with_another_seed_and_a_higher_temperature() -> None:
    sim = UserSimulator(temperature=0.3)
    draws = [sim.draw(11, k) for k in range(4)]
    assert draws[0] == (11, 0.3)
    assert len({seed for seed, _ in draws}) == 4
    temps = [t for _, t in draws]
    assert temps == sorted(temps) and temps[-1] == 1.0


@pytest.mark.parametrize(
    "reply",
    [
        # the 135M user model after an answer, on the outside-server bench
        "I hope you're doing well!\nHello, I'm Alex. What can I do for you today?",
        "I'm ready to help. What's your request?",
        "Sure! How can I assist you further?",
        "Is there anything else I can help with?",
    ],
)
def test_a_user_who_offers_help_speaks_as_the_assistant(reply: str) -> None:
    checked = check_user_reply(reply, None, "It is 09:15 in Tokyo.", set())
    assert checked.role_break == "offered help (spoke as the assistant)"


@pytest.mark.parametrize(
    "reply",
    [
        "Can you help me move the meeting to Friday?",
        "I need help with my order, it is 1042.",
        "Thanks, that is all I needed. ###STOP###",
        "What can I do if the flight is cancelled?",
    ],
)
def test_a_user_asking_for_help_stays_in_role(reply: str) -> None:
    checked = check_user_reply(reply, None, "It is 09:15 in Tokyo.", set())
    assert checked.role_break is None
