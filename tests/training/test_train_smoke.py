"""`synth train --smoke` end to end, and the GPU path (marked, not run without CUDA)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from trajsynth.cli.main import app
from trajsynth.training.grpo import load_train_config

pytestmark = pytest.mark.alone  # torch or transformers: every core

DATA = Path(__file__).resolve().parents[2] / "src" / "trajsynth" / "data" / "train"


def test_bundled_train_configs_parse():
    gpu = load_train_config(DATA / "gpu.toml")
    assert gpu.use_vllm and gpu.vllm_mode == "colocate" and gpu.advantage == "gigpo"
    assert not gpu.mask_truncated_completions  # early-stopped rollouts stay in the group
    smoke = load_train_config(DATA / "smoke.toml", max_steps=3)
    assert smoke.max_steps == 3 and smoke.use_cpu and not smoke.use_vllm


@pytest.mark.slow
def test_grpo_args_map_every_knob():
    pytest.importorskip("trl")
    from trajsynth.training.run import grpo_args

    cfg = load_train_config(DATA / "gpu.toml", bf16=False)  # bf16 needs a GPU to validate
    args = grpo_args(cfg)
    assert (args.num_generations, args.beta, args.epsilon, args.epsilon_high) == (8, 0.0, 0.2, 0.28)
    assert (args.loss_type, args.scale_rewards, args.importance_sampling_level) == (
        "dapo",
        "group",
        "token",
    )
    assert args.use_vllm and args.vllm_mode == "colocate"
    assert args.vllm_gpu_memory_utilization == 0.35


@pytest.mark.slow
def test_synth_train_smoke_runs_grpo_steps_on_cpu(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app,
        ["train", "--smoke", "--advantage", "gigpo", "--output-dir", str(tmp_path / "out")],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    assert "GRPO (gigpo) on 4 tasks" in result.output
    rows = re.findall(r"│\s+(\d+)\s+│\s+([\d.]+)\s+│\s+([\d.-]+)\s+│", result.output)
    assert [int(step) for step, _, _ in rows] == [1, 2]
    assert all(float(seconds) > 0 for _, seconds, _ in rows)
    assert re.search(r"[\d.]+ s per step \(CPU\)", result.output)


@pytest.mark.gpu
@pytest.mark.slow
def test_grpo_on_gpu_with_vllm_colocate(tmp_path: Path) -> None:
    """The GPU path: vLLM colocate generation, a small model, 3 steps (needs CUDA + vllm)."""
    pytest.importorskip("vllm")
    from trajsynth.training.grpo import run_grpo

    cfg = load_train_config(
        DATA / "gpu.toml",
        tasks=None,
        n_tasks=8,
        max_steps=3,
        per_device_train_batch_size=8,
        gradient_accumulation_steps=1,
        max_completion_length=256,
        output_dir=str(tmp_path),
    )
    result = run_grpo(cfg)
    assert len(result.steps) == 3
    assert all(s.reward is not None for s in result.steps)
