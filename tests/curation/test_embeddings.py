"""The embedder's precision choice and bf16's agreement with float32."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from trajsynth.curation.embeddings import cpu_has_bf16, load_embedder, resolve_dtype

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


def test_explicit_dtypes_win_and_auto_follows_the_hardware() -> None:
    assert resolve_dtype("float32") == "float32"
    assert resolve_dtype("bfloat16") == "bfloat16"
    assert resolve_dtype("auto", device="cuda") == "bfloat16"
    assert resolve_dtype("auto") == ("bfloat16" if cpu_has_bf16() else "float32")


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
