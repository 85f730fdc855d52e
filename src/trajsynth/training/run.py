"""Run the GRPO stage: TrainConfig -> tokenizer, model, environments, trainer (docs/methods.md §13).

``train(config, rows=...)`` takes the RL rows (or loads ``config.tasks``), loads the model
(the bundled SmolLM2-135M GGUF through transformers by default), builds one TRL environment
class per cluster (``tool_env.environment_class``: every completion gets its own live
sandboxed environment), and trains ``TrajsynthGRPOTrainer`` with the verifier reward.
``grpo_args`` maps TrainConfig onto TRL's GRPOConfig; ``smoke_config`` is the tiny CPU
setting of ``synth train --smoke``.
"""

from __future__ import annotations

import logging
import os
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trajsynth.schemas import InputError, RLRow, SandboxKind, TrainConfig
from trajsynth.training.models_io import load_gguf_model, peft_config, tune_fused_lm_head
from trajsynth.training.rewards import VerifierReward
from trajsynth.training.tasks import export_rows, trl_dataset
from trajsynth.training.tool_env import environment_class, sandbox_opener

__all__ = [
    "StepLog",
    "TrainResult",
    "grpo_args",
    "load_model",
    "load_tokenizer",
    "smoke_config",
    "train",
]

log = logging.getLogger(__name__)

# transformers 5.23 renamed gradient checkpointing ("activation checkpointing") and warns on the
# old names, which TRL 1.16 itself still uses: upstream noise, silenced where TRL is called.
_UPSTREAM_RENAME = r".*gradient_checkpointing.* is deprecated"


def smoke_config(**overrides: Any) -> TrainConfig:
    """2 GRPO steps on CPU, 4 tasks, G = 2, short completions: minutes on 2 cores.

    Tasks come from the ``code`` cluster: its 6 tool schemas make a ~900-token prompt, where
    the others' 11-13 tools make ~2,000 (the step's cost is the prompt's forward/backward).

    Memory (bench/training_memory.py, target 3 GB for the whole process tree): the policy's
    loss pass keeps every layer's activations for the backward (the MLP's and attention's
    intermediates, ~30 layers deep), so 4 sequences of ~1,000 tokens at once without
    recomputation passed 11.4 GB in the first step (measured; 8.5 GB once, OOM-killed).
    Activations are recomputed (gradient checkpointing) and the loss runs 2 sequences at a
    time (accumulated over 2 micro-steps): the same 4-completion generation batch per
    optimizer step, the same two steps. beta = 0 keeps TRL from running a reference pass,
    and the logits are never materialized over the vocabulary (TRL scores completions
    through transformers' fused LM head).
    """
    base: dict[str, Any] = {
        "n_tasks": 4,
        "clusters": ["code"],
        "max_steps": 2,
        "per_device_train_batch_size": 2,
        "gradient_accumulation_steps": 2,
        "num_generations": 2,
        "max_completion_length": 48,
        "max_tool_calling_iterations": 1,
        "use_cpu": True,
        "gradient_checkpointing": True,
        "beta": 0.0,
        "sandbox": SandboxKind.LOCAL,
        "output_dir": "runs/train-smoke",
        "lora": {"enabled": True, "r": 4, "alpha": 8},
    }
    base.update(overrides)
    return TrainConfig.model_validate(base)


def _model_location(config: TrainConfig) -> tuple[str, str | None]:
    if config.model == "embedded":
        from trajsynth.llm.chat_template import default_gguf_path

        path = default_gguf_path()
        return str(path.parent), path.name
    return config.model, config.gguf_file


def load_tokenizer(config: TrainConfig) -> Any:
    """The tokenizer with a tool-aware chat template that marks assistant turns.

    The embedded model gets the export's template (``llm.chat_template``) and TRL's Qwen
    response parser for its ``<tool_call>`` blocks; another model keeps its own template (TRL
    checks that it supports tools and sets the parser of a template it knows).
    """
    from transformers import AutoTokenizer

    where, gguf = _model_location(config)
    if config.model == "embedded":
        from trajsynth.llm.chat_template import add_response_parser
        from trajsynth.llm.chat_template import load_tokenizer as tool_tokenizer

        return add_response_parser(tool_tokenizer(Path(where) / gguf if gguf else None))
    return (
        AutoTokenizer.from_pretrained(where, gguf_file=gguf)
        if gguf
        else AutoTokenizer.from_pretrained(where)
    )


def load_model(config: TrainConfig) -> Any:
    """The policy: from a GGUF file (dequantized to float32, ``models_io.load_gguf_model``)
    or a folder/id."""
    from transformers import AutoModelForCausalLM

    where, gguf = _model_location(config)
    if not gguf:
        return AutoModelForCausalLM.from_pretrained(where)
    return load_gguf_model(Path(where) / gguf)


def grpo_args(config: TrainConfig) -> Any:
    """TRL's GRPOConfig from TrainConfig (every GRPO knob of docs/methods.md §13 set explicitly)."""
    from trl.trainer.grpo_config import GRPOConfig

    kwargs: dict[str, Any] = {
        "output_dir": config.output_dir,
        "per_device_train_batch_size": config.per_device_train_batch_size,
        "gradient_accumulation_steps": config.gradient_accumulation_steps,
        "num_generations": config.num_generations,
        "max_completion_length": config.max_completion_length,
        "max_tool_calling_iterations": config.max_tool_calling_iterations,
        "temperature": config.temperature,
        "learning_rate": config.learning_rate,
        "max_steps": config.max_steps,
        "logging_steps": config.logging_steps,
        "beta": config.beta,
        "epsilon": config.epsilon,
        "epsilon_high": config.epsilon_high,
        "loss_type": config.loss_type,
        "scale_rewards": config.scale_rewards,
        "importance_sampling_level": config.importance_sampling_level,
        "mask_truncated_completions": config.mask_truncated_completions,
        "use_vllm": config.use_vllm,
        "bf16": config.bf16,
        "gradient_checkpointing": config.gradient_checkpointing,
        "use_cpu": config.use_cpu,
        "seed": config.seed,
        "report_to": "none",
        "save_strategy": "no",
        "remove_unused_columns": False,
    }
    if config.use_vllm:
        kwargs["vllm_mode"] = config.vllm_mode
        kwargs["vllm_gpu_memory_utilization"] = config.vllm_gpu_memory_utilization
        if config.vllm_server_base_url:
            kwargs["vllm_server_base_url"] = config.vllm_server_base_url
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=_UPSTREAM_RENAME, category=FutureWarning)
        return GRPOConfig(**kwargs)


@dataclass
class StepLog:
    step: int
    seconds: float
    reward: float | None
    logs: dict[str, float] = field(default_factory=dict)


@dataclass
class TrainResult:
    steps: list[StepLog]
    n_tasks: int
    load_s: float
    tokens_saved: int = 0
    output_dir: str = ""

    @property
    def seconds_per_step(self) -> float:
        return sum(s.seconds for s in self.steps) / max(len(self.steps), 1)


def train(
    config: TrainConfig,
    *,
    rows: Sequence[RLRow] | None = None,
    on_step: Callable[[StepLog], None] | None = None,
) -> TrainResult:
    """Train with GRPO on the RL tasks (see the module doc); per-step seconds and rewards."""
    from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

    from trajsynth.mcp_servers.registry import get_cluster

    # TRL warns that environment_factory is experimental on every trainer; we pin the version.
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    t0 = time.perf_counter()
    rows = list(rows) if rows is not None else export_rows(config)
    if not rows:
        raise InputError("no RL tasks to train on")
    clusters = {r.env.cluster_id: get_cluster(r.env.cluster_id) for r in rows}
    tokenizer = load_tokenizer(config)
    model = load_model(config)
    tune_fused_lm_head()  # logits in 512-token chunks, labelled positions only
    load_s = time.perf_counter() - t0
    steps: list[StepLog] = []

    class _Timer(TrainerCallback):
        def __init__(self) -> None:
            self.start = time.perf_counter()

        def on_step_begin(
            self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
        ) -> None:
            self.start = time.perf_counter()

        def on_log(
            self,
            args: TrainingArguments,
            state: TrainerState,
            control: TrainerControl,
            logs: dict[str, float] | None = None,
            **kw: Any,
        ) -> None:
            logs = dict(logs or {})
            if "reward" not in logs and "loss" not in logs:
                return
            entry = StepLog(
                step=state.global_step,
                seconds=time.perf_counter() - self.start,
                reward=logs.get("reward"),
                logs={k: float(v) for k, v in logs.items() if isinstance(v, int | float)},
            )
            steps.append(entry)
            log.info(
                "step %d: %.1f s, reward %s, pass rate %s",
                entry.step,
                entry.seconds,
                entry.reward,
                logs.get("reward/pass_rate"),
            )
            if on_step is not None:
                on_step(entry)

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=_UPSTREAM_RENAME, category=FutureWarning)
        return _fit(config, rows, clusters, tokenizer, model, load_s, steps, _Timer())


def _fit(
    config: TrainConfig,
    rows: Sequence[RLRow],
    clusters: dict[str, Any],
    tokenizer: Any,
    model: Any,
    load_s: float,
    steps: list[StepLog],
    timer: Any,
) -> TrainResult:
    from trajsynth.training.trainer import trainer_class

    opener = sandbox_opener(config.sandbox, config.sandbox_limits, config.tool_timeout_s)
    # every environment TRL creates (it pools and resets them) is kept here, so that the
    # ones a failed step left open are closed without reading TRL's private pool
    created: list[Any] = []

    def tracked(cls: type) -> Callable[[], Any]:
        def make() -> Any:
            created.append(cls())
            return created[-1]

        return make

    factories = {cid: tracked(environment_class(c, opener)) for cid, c in clusters.items()}
    schemas = {cid: [t.to_openai() for t in c.tools] for cid, c in clusters.items()}
    trainer = trainer_class()(
        model=model,
        reward_funcs=[VerifierReward(shaped=config.reward_shaped)],
        args=grpo_args(config),
        train_dataset=trl_dataset(rows),
        processing_class=tokenizer,
        peft_config=peft_config(config.lora),
        environment_factory=factories,
        callbacks=[timer],
        train_config=config,
        tool_schemas=schemas,
    )
    try:
        trainer.train()
    finally:
        for env in created:
            env._close()  # noqa: SLF001
    return TrainResult(
        steps=steps,
        n_tasks=len(rows),
        load_s=load_s,
        tokens_saved=trainer.tokens_saved_total,
        output_dir=config.output_dir,
    )
