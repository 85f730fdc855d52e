"""`synth show trajectory ID`: the transcript drawn in the terminal (``--json`` keeps the raw
record). The reading itself is ``curation.transcript``; this only colours it."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.text import Text

from trajsynth.cli.tables import Table
from trajsynth.curation.transcript import Transcript

__all__ = ["render_transcript"]


_ROLE_STYLE = {"system": "dim", "user": "green", "assistant": "bold"}


def _header(t: Transcript) -> Text:
    text = Text(f"{t.trajectory_id}  ", style="bold")
    text.append(f"cluster {t.cluster_id}  termination {t.termination}  ")
    if t.passed is None:
        text.append("not verified", style="yellow")
    elif t.excluded:
        text.append(f"excluded ({t.failure_class})", style="yellow")
    else:
        text.append("PASSED" if t.passed else "FAILED", style="green" if t.passed else "red")
        text.append(f"  score {t.score:.2f}")
        if t.failed_checks:
            held = "constraints held, " if t.constraints_passed else ""
            text.append(f"  ({held}not clean: {', '.join(t.failed_checks)})", style="red")
        elif t.recovered:
            text.append("  (a recovery: every failed call corrected)")
    if t.failure_class:
        text.append(f"\nfailure: {t.failure_class}", style="red")
        if t.failure_detail:
            text.append(f" — {t.failure_detail[:300]}")
    return text


def _dialogue(t: Transcript) -> list[RenderableType]:
    out: list[RenderableType] = []
    for e in t.entries:
        if e.kind == "call":
            out.append(Text(f"  → {e.name}({e.arguments})", style="cyan"))
        elif e.kind == "result":
            style = "red" if e.error else "dim cyan"
            body = Text(f"  ← {e.name or 'result'}: ", style=style)
            body.append(e.text)
            if e.folded_lines:
                body.append(f"\n    … {e.folded_lines} more lines folded", style="dim")
            out.append(body)
        else:
            label = Text(f"{e.kind}: ", style=_ROLE_STYLE.get(e.kind, ""))
            label.append(e.text)
            out.append(label)
    return out


def _verdict(t: Transcript) -> Table:
    table = Table(title="verdict", show_lines=False, expand=False)
    table.add_column("constraint")
    table.add_column("hard")
    table.add_column("result")
    table.add_column("why", overflow="fold")
    for c in t.constraints:
        table.add_row(
            c.kind,
            "hard" if c.hard else "soft",
            Text("pass", style="green") if c.passed else Text("FAIL", style="red"),
            c.why,
        )
    return table


def render_transcript(t: Transcript) -> RenderableType:
    parts: list[RenderableType] = [_header(t), Panel(Group(*_dialogue(t)), title="dialogue")]
    if t.constraints:
        parts.append(_verdict(t))
    parts.append(Text("signals: " + (", ".join(t.signals_fired) or "none fired"), style="dim"))
    return Group(*parts)
