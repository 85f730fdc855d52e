"""``export_sft``, ``export_rl`` and ``export_dataset``: the store's selections as datasets.

docs/design.md §11. Every SFT row is rendered through the tool-aware chat template
(``llm.chat_template``) with SmolLM2's tokenizer before anything is written; a row
that does not render, or has no assistant token to train on, is an ``ExportError`` naming
it. Output is staged in a hidden folder next to ``out_dir`` and renamed into place at the
end, so a failed export leaves nothing behind and an existing folder is replaced whole
(only with ``overwrite``).

Layout of ``export_dataset(store, out)``::

    out/README.md                 dataset card (YAML front matter: configs sft and rl)
    out/sft/train-00000-of-00001.parquet
    out/rl/train-00000-of-00001.parquet
    out/plots/{domains,modes,cac}.png
    out/tokenizer/                tokenizer files + the tool-aware chat_template.jinja

``fmt="openai-jsonl"`` writes ``sft/train.jsonl`` (``messages`` + ``tools``, the OpenAI
fine-tuning layout) with ``sft/metadata.jsonl`` beside it; ``fmt="sharegpt"`` writes
``sft/train.jsonl`` in LLaMA-Factory's ShareGPT layout; both write ``rl/train.jsonl``.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from trajsynth.export import records
from trajsynth.export.formats import EXPORT_FORMATS
from trajsynth.export.report import EmptySelectionError, ExportError, ExportReport
from trajsynth.export.rows import resolve_run, rl_rows, sft_rows
from trajsynth.export.seen import selection_seen
from trajsynth.schemas import SFTRow
from trajsynth.store import Store

__all__ = ["export_dataset", "export_rl", "export_sft", "render_rows"]

log = logging.getLogger(__name__)


def _check_target(out_dir: Path, overwrite: bool, fmt: str) -> None:
    if fmt not in EXPORT_FORMATS:
        raise ExportError(f"unknown format {fmt!r}; one of: {', '.join(EXPORT_FORMATS)}")
    if out_dir.exists():
        if not out_dir.is_dir():
            raise ExportError(f"{out_dir} exists and is not a folder")
        if not overwrite:
            raise ExportError(f"{out_dir} exists; pass --overwrite to replace it")


@contextmanager
def _staged(out_dir: Path) -> Iterator[Path]:
    """A temp folder beside ``out_dir``, renamed onto it when the block succeeds."""
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.tmp-", dir=out_dir.parent))
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    tmp.chmod(0o755)
    old = None
    if out_dir.exists():
        old = out_dir.parent / f".{out_dir.name}.old-{uuid.uuid4().hex[:8]}"
        os.replace(out_dir, old)
    os.replace(tmp, out_dir)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def render_rows(rows: Sequence[SFTRow], tokenizer: Any | None = None) -> tuple[int, int]:
    """Render every row as TRL will (Parquet-shaped messages, ``tools=``); returns the total
    tokens and assistant tokens. Raises ``ExportError`` naming the first row that fails."""
    from trajsynth.llm.chat_template import RenderError, load_tokenizer, render

    tok = tokenizer if tokenizer is not None else load_tokenizer()
    n_tokens = n_assistant = 0
    for row in rows:
        messages = [records.message_dict(m) for m in row.messages]
        try:
            ids, mask = render(messages, row.tools, tok, row_id=row.id)
        except RenderError as exc:
            raise ExportError(f"trajectory {row.id}: does not render for training: {exc}") from exc
        n_tokens += len(ids)
        n_assistant += sum(mask)
    return n_tokens, n_assistant


def _ship_tokenizer(folder: Path, tokenizer: Any | None) -> list[Path]:
    """The tokenizer and tool-aware chat template, in ``folder/tokenizer``."""
    from trajsynth.llm.chat_template import TOKENIZER_DIR, save_tokenizer_files

    return save_tokenizer_files(folder / TOKENIZER_DIR, tokenizer)


def _relative(paths: Sequence[Path], root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in paths)


def export_sft(
    store: Store,
    out_dir: Path,
    *,
    run_id: str | None = None,
    round: int | None = None,
    fmt: str = "parquet",
    overwrite: bool = False,
    tokenizer: Any | None = None,
    check_render: bool = True,
) -> ExportReport:
    """Write the selected SFT trajectories of a run (default: the newest with selections)
    to ``out_dir`` (its files directly in it)."""
    start = time.perf_counter()
    out_dir = Path(out_dir)
    _check_target(out_dir, overwrite, fmt)
    run = resolve_run(store, run_id)
    refused: dict[str, int] = {}
    rows = sft_rows(store, run, round, refused)
    n_tok, n_asst = render_rows(rows, tokenizer) if check_render else (0, 0)
    with _staged(out_dir) as tmp:
        files = EXPORT_FORMATS.get(fmt).write_sft(rows, tmp)
        files += _ship_tokenizer(tmp, tokenizer)  # trainable without trajsynth
        names = _relative(files, tmp)
    log.info("wrote %d SFT rows to %s", len(rows), out_dir)
    return ExportReport(
        out_dir=str(out_dir),
        kind="sft",
        fmt=fmt,
        run_id=run,
        round=round,
        n_sft=len(rows),
        n_tokens=n_tok,
        n_assistant_tokens=n_asst,
        files=names,
        seconds=time.perf_counter() - start,
        refused=refused,
    )


def export_rl(
    store: Store,
    out_dir: Path,
    *,
    run_id: str | None = None,
    round: int | None = None,
    fmt: str = "parquet",
    overwrite: bool = False,
) -> ExportReport:
    """Write the selected RL tasks of a run to ``out_dir`` (its files directly in it)."""
    start = time.perf_counter()
    out_dir = Path(out_dir)
    _check_target(out_dir, overwrite, fmt)
    run = resolve_run(store, run_id)
    rows = rl_rows(store, run, round)
    with _staged(out_dir) as tmp:
        names = _relative(EXPORT_FORMATS.get(fmt).write_rl(rows, tmp), tmp)
    log.info("wrote %d RL rows to %s", len(rows), out_dir)
    return ExportReport(
        out_dir=str(out_dir),
        kind="rl",
        fmt=fmt,
        run_id=run,
        round=round,
        n_rl=len(rows),
        files=names,
        seconds=time.perf_counter() - start,
    )


def _optional(build: Any, store: Store, run: str, round: int | None, kind: str) -> list[Any]:
    try:
        return build(store, run, round)
    except EmptySelectionError as exc:
        log.warning("%s: the %s part is left out", exc, kind)
        return []


def export_dataset(
    store: Store,
    out_dir: Path,
    *,
    run_id: str | None = None,
    round: int | None = None,
    fmt: str = "parquet",
    overwrite: bool = False,
    tokenizer: Any | None = None,
    check_render: bool = True,
    plots: bool = True,
    license: str = "other",
    language: Sequence[str] = ("en",),
) -> ExportReport:
    """SFT (``out_dir/sft``), RL (``out_dir/rl``), the card (``README.md``) and its plots.

    One side may be empty (it is left out and the card says so); both empty is an error.
    ``license`` and ``language`` go into the card's front matter.
    """
    from trajsynth.export.card import write_card

    start = time.perf_counter()
    out_dir = Path(out_dir)
    _check_target(out_dir, overwrite, fmt)
    with store.session(read_only=True):  # the rows on one connection, closed before rendering
        run = resolve_run(store, run_id)
        refused: dict[str, int] = {}
        sft = _optional(lambda *a: sft_rows(*a, refused=refused), store, run, round, "SFT")
        rl = _optional(rl_rows, store, run, round, "RL")
        if not sft and not rl:
            at = "" if round is None else f" round {round}"
            seen = selection_seen(store, run, round)
            raise EmptySelectionError(
                f"empty selection: run {run!r}{at} has no selected SFT or RL items; {seen.line()}",
                seen,
            )
    n_tok, n_asst = render_rows(sft, tokenizer) if check_render and sft else (0, 0)
    with _staged(out_dir) as tmp:
        files: list[Path] = []
        if sft:
            files += EXPORT_FORMATS.get(fmt).write_sft(sft, tmp / "sft")
        if rl:
            files += EXPORT_FORMATS.get(fmt).write_rl(rl, tmp / "rl")
        report = ExportReport(
            out_dir=str(out_dir),
            kind="dataset",
            fmt=fmt,
            run_id=run,
            round=round,
            n_sft=len(sft),
            n_rl=len(rl),
            n_tokens=n_tok,
            n_assistant_tokens=n_asst,
            refused=refused,
        )
        if sft:
            files += _ship_tokenizer(tmp, tokenizer)  # trainable without trajsynth
        files += write_card(
            store, tmp, report, sft, rl, plots=plots, license=license, language=language
        )
        names = _relative(files, tmp)
    log.info("wrote %d SFT and %d RL rows with a card to %s", len(sft), len(rl), out_dir)
    return report.model_copy(update={"files": names, "seconds": time.perf_counter() - start})
