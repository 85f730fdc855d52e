"""The embedder's precision and worker choice, bf16's agreement with float32, and workers
embedding side by side."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from trajsynth.curation import embeddings
from trajsynth.curation.embeddings import (
    EmbedCandidate,
    calibrated_setting,
    cpu_has_bf16,
    embed_in_workers,
    load_embedder,
    onnx_model,
    pick_fastest,
    resolve_backend,
    resolve_dtype,
    resolve_threads,
)

pytestmark = pytest.mark.alone  # torch or transformers: every core

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def _cpuinfo(tmp_path: Path, flags: str) -> str:
    path = tmp_path / "cpuinfo"
    path.write_text(f"processor\t: 0\nmodel name\t: test\nflags\t\t: fpu sse2 {flags}\n")
    return str(path)


def test_bf16_is_detected_from_the_cpu_flags(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    assert cpu_has_bf16(_cpuinfo(tmp_path / "a", "avx2 avx512f avx512_bf16")) is True
    (tmp_path / "b").mkdir()
    assert cpu_has_bf16(_cpuinfo(tmp_path / "b", "avx2 amx_bf16 amx_tile")) is True
    (tmp_path / "c").mkdir()
    assert cpu_has_bf16(_cpuinfo(tmp_path / "c", "avx2 avx512f")) is False
    assert cpu_has_bf16(str(tmp_path / "missing")) is False


def test_explicit_dtypes_backends_and_threads_win_without_measuring(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert resolve_dtype("float32") == "float32"
    assert resolve_dtype("bfloat16") == "bfloat16"
    assert resolve_dtype("auto", device="cuda") == "bfloat16"
    assert resolve_threads(3) == 3
    assert resolve_backend("torch", "float32") == "torch"
    # the ONNX graph is float32 on a CPU: bf16 and a GPU keep torch without measuring
    assert resolve_backend("auto", "bfloat16") == "torch"
    assert resolve_backend("auto", "float32", device="cuda") == "torch"
    monkeypatch.setattr(embeddings, "onnx_available", lambda: False)
    with pytest.raises(ImportError, match="onnxruntime"):
        resolve_backend("onnx", "float32")
    with pytest.raises(ValueError, match="float32 on the CPU"):
        load_embedder.__wrapped__(dtype="bfloat16", backend="onnx")


def test_the_fastest_candidate_wins_and_ties_prefer_float32_torch_and_few_threads() -> None:
    rates = {EmbedCandidate("torch", "float32", 1): 60.0,
             EmbedCandidate("torch", "float32", 2): 55.0,
             EmbedCandidate("torch", "bfloat16", 1): 30.0,
             EmbedCandidate("torch", "bfloat16", 2): 61.0,
             EmbedCandidate("onnx", "float32", 2): 58.0}  # fmt: skip
    best = pick_fastest(lambda c: rates[c], list(rates))
    assert (best.backend, best.dtype, best.threads) == ("torch", "bfloat16", 2)
    assert best.texts_per_s["float32x1"] == 60.0 and best.texts_per_s["onnx-float32x2"] == 58.0
    rates[EmbedCandidate("onnx", "float32", 2)] = 90.0
    best = pick_fastest(lambda c: rates[c], list(rates))
    assert (best.backend, best.dtype, best.threads) == ("onnx", "float32", 2)
    tie = pick_fastest(lambda c: 50.0, list(rates))
    assert (tie.backend, tie.dtype, tie.threads) == ("torch", "float32", 1)


def test_a_few_texts_go_to_the_backend_that_loads_first_many_to_the_fastest(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    setting = embeddings.EmbedSetting(
        backend="torch", dtype="bfloat16", threads=2,
        texts_per_s={"bfloat16x2": 300.0, "float32x2": 150.0, "onnx-float32x1": 120.0,
                     "onnx-float32x2": 200.0, "a-label-of-another-version": 1e9},
        load_s={"torch": 6.0, "onnx": 0.3},
    )  # fmt: skip
    monkeypatch.delitem(os.sys.modules, "sentence_transformers", raising=False)
    monkeypatch.delitem(os.sys.modules, "onnxruntime", raising=False)
    assert setting.soonest(40) == EmbedCandidate("onnx", "float32", 2)
    assert setting.soonest(10_000) == EmbedCandidate("torch", "bfloat16", 2)
    # a backend this process loaded already costs no load: torch's rate wins at once
    monkeypatch.setitem(os.sys.modules, "sentence_transformers", os)
    assert setting.soonest(40) == EmbedCandidate("torch", "bfloat16", 2)


def test_candidates_hold_onnx_only_where_it_is_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(embeddings, "onnx_available", lambda: False)
    assert {c.backend for c in embeddings._candidates()} == {"torch"}
    monkeypatch.setattr(embeddings, "onnx_available", lambda: True)
    onnx = [c for c in embeddings._candidates() if c.backend == "onnx"]
    assert onnx and all(c.dtype == "float32" for c in onnx)


def test_calibration_is_measured_once_then_read_from_its_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    measured: list[tuple[str, int]] = []

    def fake_measure(max_seq_length: int, batch_size: int, load_s=None):  # timing, no model
        def rate(c: EmbedCandidate) -> float:
            measured.append((c.dtype, c.threads))
            return 100.0 if (c.backend, c.dtype, c.threads) == ("torch", "float32", 1) else 10.0

        return rate

    monkeypatch.setattr(embeddings, "_measure", fake_measure)
    path = tmp_path / "calibration.json"
    first = calibrated_setting.__wrapped__(max_seq_length=33, path=path)
    assert (first.dtype, first.threads) == ("float32", 1) and measured
    n = len(measured)
    again = calibrated_setting.__wrapped__(max_seq_length=33, path=path)
    assert again == first and len(measured) == n  # read back, not measured again
    other = calibrated_setting.__wrapped__(max_seq_length=34, path=path)
    assert other == first and len(measured) == 2 * n  # another sequence cap is measured anew
    path.write_text("{not json")
    assert calibrated_setting.__wrapped__(max_seq_length=33, path=path) == first


def test_a_calibration_made_under_load_has_its_workers_measured_again_when_quiet(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    measured: list[tuple[str, int]] = []
    busy = {"float32": 1.0, "bfloat16": 50.0}
    monkeypatch.setattr(embeddings, "onnx_available", lambda: False)

    def fake_measure(max_seq_length: int, batch_size: int, load_s=None):
        def rate(c: EmbedCandidate) -> float:
            measured.append((c.dtype, c.threads))
            # busy: a second worker only slows things; quiet: it doubles the rate
            return busy[c.dtype] * (c.threads if quiet["now"] else 1 / c.threads)

        return rate

    quiet = {"now": False}
    monkeypatch.setattr(embeddings, "_measure", fake_measure)
    monkeypatch.setattr(embeddings, "load_per_core", lambda: 3.0)
    path = tmp_path / "calibration.json"
    first = calibrated_setting.__wrapped__(max_seq_length=33, path=path)
    assert (first.dtype, first.threads, first.load_per_core) == ("bfloat16", 1, 3.0)

    busy["float32"] = 500.0  # would win now, but the kept dtype stays
    quiet["now"] = True
    monkeypatch.setattr(embeddings, "load_per_core", lambda: 0.2)
    measured.clear()
    second = calibrated_setting.__wrapped__(max_seq_length=33, path=path)
    assert (second.dtype, second.threads, second.load_per_core) == ("bfloat16", 2, 0.2)
    assert {d for d, _ in measured} == {"bfloat16"}  # only the workers were measured

    measured.clear()
    monkeypatch.setattr(embeddings, "load_per_core", lambda: 1.9)  # busier than at 0.2: kept
    assert calibrated_setting.__wrapped__(max_seq_length=33, path=path) == second
    assert not measured


@pytest.mark.slow
def test_calibration_measures_the_real_model(tmp_path: Path) -> None:
    setting = calibrated_setting.__wrapped__(max_seq_length=64, path=tmp_path / "c.json")
    assert setting.dtype in ("float32", "bfloat16") and setting.threads >= 1
    assert all(rate > 0 for rate in setting.texts_per_s.values())
    assert any(label.startswith("onnx-") for label in setting.texts_per_s)  # both measured
    assert set(setting.load_s) == {"torch", "onnx"} and all(v > 0 for v in setting.load_s.values())
    chosen = EmbedCandidate(setting.backend, setting.dtype, setting.threads).label
    assert max(setting.texts_per_s.values()) == setting.texts_per_s[chosen]


@pytest.mark.slow
def test_onnx_vectors_equal_torch_vectors_and_the_export_is_kept(tmp_path: Path) -> None:
    texts = [
        "Let me look up order W9 first. Order W9 was delivered yesterday.\nR:get_order ANS",
        "Which order do you mean? I cancelled it.\nASK R:get_order W:cancel_order ANS",
        " ".join(["a long digest that runs past the word-piece cap"] * 20),  # truncated alike
        "x",
    ]
    torch_rows = load_embedder(max_seq_length=64, dtype="float32")(texts)
    onnx_rows = load_embedder(max_seq_length=64, dtype="float32", threads=2, backend="onnx")(texts)
    assert onnx_rows.dtype == np.float32 and onnx_rows.shape == torch_rows.shape == (4, 384)
    assert np.allclose(np.linalg.norm(onnx_rows, axis=1), 1.0, atol=1e-5)
    assert float((torch_rows * onnx_rows).sum(axis=1).min()) > 0.9999
    path = onnx_model(tmp_path)
    stamp = path.stat().st_mtime_ns
    assert onnx_model(tmp_path) == path and path.stat().st_mtime_ns == stamp  # not again
    assert not list(tmp_path.glob("*.tmp"))


@pytest.mark.slow
def test_bf16_vectors_stay_close_to_float32() -> None:
    texts = [
        "Let me look up order W9 first. Order W9 was delivered yesterday.\nR:get_order ANS",
        "Which order do you mean? I cancelled it.\nASK R:get_order W:cancel_order ANS",
        "I computed the total with python.\nW:run_python ANS",
        "x",
    ]
    full = load_embedder(max_seq_length=64, dtype="float32")(texts)
    half = load_embedder(max_seq_length=64, dtype="bfloat16")(texts)
    assert half.dtype == np.float32 and half.shape == full.shape == (4, 384)
    assert np.allclose(np.linalg.norm(half, axis=1), 1.0, atol=1e-5)
    assert float((full * half).sum(axis=1).min()) > 0.99


def test_workers_share_the_batches_and_rows_keep_the_order_of_the_texts() -> None:
    texts = [f"text {'x' * (i * 7 % 23)} {i}" for i in range(50)]
    seen: dict[str, list[list[str]]] = {"a": [], "b": []}
    busy: set[str] = set()

    def worker(name: str):
        def encode(batch: list[str]) -> np.ndarray:
            assert name not in busy  # one model copy is never used by two threads at once
            busy.add(name)
            time.sleep(0.01)  # hold the batch so the other worker takes the next one
            seen[name].append(batch)
            busy.discard(name)
            return np.array([[float(t.rsplit(" ", 1)[1]), len(t)] for t in batch])

        return encode

    out = embed_in_workers([worker("a"), worker("b")], texts, batch_size=8)
    assert out[:, 0].tolist() == list(range(50))  # row i is text i
    batches = seen["a"] + seen["b"]
    assert seen["a"] and seen["b"] and all(len(b) <= 8 for b in batches)
    assert sorted(t for b in batches for t in b) == sorted(texts)  # each text once
    # batches hold texts of similar length: sorted first, so little padding
    assert all(max(map(len, b)) - min(map(len, b)) <= 8 for b in batches)
    threads_before = threading.active_count()
    assert embed_in_workers([worker("a")], texts[:3], batch_size=8).shape == (3, 2)
    assert threading.active_count() == threads_before
    assert embed_in_workers([worker("a"), worker("b")], [], batch_size=8).size == 0


@pytest.mark.slow
def test_two_workers_embed_as_one() -> None:
    texts = [f"Order W{i}: I looked it up and cancelled it.\nR:get_order W:cancel_order ANS"
             for i in range(40)] + ["x", "Which order do you mean?\nASK ANS"]  # fmt: skip
    one = load_embedder(max_seq_length=64, dtype="float32")(texts)
    two = load_embedder(max_seq_length=64, dtype="float32", threads=2)(texts)
    assert two.shape == one.shape == (42, 384)
    assert float((one * two).sum(axis=1).min()) > 0.9999
