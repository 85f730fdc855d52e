"""TrainConfig: the GRPO stage's settings (docs/methods.md §13), read from a TOML file."""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import Field

from trajsynth.schemas._base import Record, stable_hash
from trajsynth.schemas.sandbox import SandboxKind, SandboxLimits

__all__ = ["AdvantageKind", "EarlyStopConfig", "LoraSettings", "TrainConfig"]


class AdvantageKind(StrEnum):
    """The advantage estimator (docs/methods.md §13); ``grpo`` is TRL's own."""

    GRPO = "grpo"
    TREE_SUBGROUP = "tree_subgroup"
    TREE_GL = "tree_gl"
    FORK = "fork"
    GIGPO = "gigpo"
    HGPO = "hgpo"


class LoraSettings(Record):
    """LoRA through peft; ``enabled = false`` trains every weight."""

    enabled: bool = True
    r: int = Field(default=8, ge=1)
    alpha: int = Field(default=16, ge=1)
    dropout: float = Field(default=0.0, ge=0.0, lt=1.0)
    target_modules: list[str] = Field(default_factory=lambda: ["q_proj", "v_proj"])


class EarlyStopConfig(Record):
    """ESPO's critic-free turn rule during GRPO rollouts (docs/methods.md §11)."""

    enabled: bool = False
    margin: float = Field(default=0.2, ge=0.0, description="m: stop above (1 + m)·q(j)")
    patience: int = Field(default=2, ge=1, description="P consecutive turns above")
    j_min: int = Field(default=2, ge=1)
    min_successes: int = Field(default=30, ge=1, description="per cluster, else off there")
    percentile: float = Field(default=95.0, gt=0.0, le=100.0)
    rounds: int = Field(default=2, ge=1, description="reference from the last N steps' successes")
    r_fail: float = 0.0


class TrainConfig(Record):
    """Everything ``synth train`` needs; names follow TRL's GRPOConfig where they map to it."""

    model: str = Field(
        default="embedded",
        description="'embedded' (the bundled SmolLM2-135M GGUF), a folder or a hub id",
    )
    gguf_file: str | None = Field(default=None, description="GGUF file inside `model`'s folder")
    tasks: str | None = Field(default=None, description="RL export folder/file; None: plan tasks")
    n_tasks: int = Field(default=4, ge=1, description="tasks to plan when `tasks` is None")
    clusters: list[str] = Field(
        default_factory=list, description="clusters to plan tasks from; empty: every cluster"
    )
    seed: int = 0
    output_dir: str = "runs/train"
    lora: LoraSettings = Field(default_factory=LoraSettings)
    # batch and generation
    per_device_train_batch_size: int = Field(default=4, ge=1)
    gradient_accumulation_steps: int = Field(default=1, ge=1)
    num_generations: int = Field(default=4, ge=2, description="G: completions per task")
    max_completion_length: int = Field(default=256, ge=1, description="all turns, tool results in")
    max_tool_calling_iterations: int | None = Field(default=4, ge=0)
    temperature: float = Field(default=1.0, gt=0.0)
    learning_rate: float = Field(default=1e-5, gt=0.0)
    max_steps: int = Field(default=100, ge=1)
    logging_steps: int = Field(default=1, ge=1)
    # the GRPO objective (set explicitly: TRL's defaults move between releases)
    beta: float = Field(default=0.0, ge=0.0)
    epsilon: float = Field(default=0.2, gt=0.0)
    epsilon_high: float | None = None
    loss_type: Literal["grpo", "bnpo", "dr_grpo", "dapo", "cispo", "sapo", "luspo", "vespo"] = (
        "dapo"
    )
    scale_rewards: Literal["group", "batch", "none"] = "group"
    importance_sampling_level: Literal["token", "sequence", "sequence_token"] = "token"
    mask_truncated_completions: bool = False
    # generation backend
    use_vllm: bool = False
    vllm_mode: Literal["colocate", "server"] = "colocate"
    vllm_gpu_memory_utilization: float = Field(default=0.3, gt=0.0, le=1.0)
    vllm_server_base_url: str | None = None
    bf16: bool = False
    gradient_checkpointing: bool = Field(
        default=True, description="TRL's default; off on CPU where memory is not the limit"
    )
    use_cpu: bool = False
    # step-level credit (docs/methods.md §9-§10, §13)
    advantage: AdvantageKind = AdvantageKind.GRPO
    tree_variant: Literal["average", "group_size"] = "average"
    tree_whiten: bool = True
    gigpo_gamma: float = Field(default=0.95, gt=0.0, le=1.0)
    gigpo_omega: float = Field(default=1.0, ge=0.0)
    gigpo_norm: Literal["mean_norm", "mean_std_norm"] = "mean_norm"
    hgpo_depth: int = Field(default=2, ge=0)
    hgpo_alpha: float = 1.0
    fork_lambda_e: float = 0.1
    fork_eta: float = 1.0
    early_stop: EarlyStopConfig = Field(default_factory=EarlyStopConfig)
    # reward and environments
    reward_shaped: bool = Field(default=True, description="reward = verdict score, else 1/0")
    sandbox: SandboxKind = SandboxKind.AUTO
    sandbox_limits: SandboxLimits = Field(default_factory=SandboxLimits)
    tool_timeout_s: float = Field(default=20.0, gt=0.0)

    def config_hash(self) -> str:
        return stable_hash(self.model_dump(mode="json"), length=16)
