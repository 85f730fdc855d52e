"""`synth show trajectory`: the transcript as the terminal shows it."""

from __future__ import annotations

from fakes.transcripts import failed_verdict, shop_trajectory
from rich.console import Console

from trajsynth.cli.commands.transcript import render_transcript
from trajsynth.curation.transcript import transcript


def test_the_terminal_shows_roles_calls_results_and_why_a_constraint_failed() -> None:
    console = Console(width=120, record=True, color_system=None)
    console.print(render_transcript(transcript(shop_trajectory(), failed_verdict())))
    text = console.export_text()
    expected = [
        "FAILED", "user: Please check my order W1.", "→ get_order(", "← cancel_order: Error",
        "more lines folded", "final_state", "expected cancelled, got shipped",
        "assistant: Which order do you mean?",
    ]  # fmt: skip
    assert [e for e in expected if e not in text] == []
