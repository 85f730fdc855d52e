"""Supervised fine-tuning on an SFT export with TRL's SFTTrainer (docs/design.md §12).

``sft(config)`` reads the export (``load_sft_dataset``: Parquet or OpenAI JSONL, the dataset
root or its ``sft/`` folder), loads the base model (``load_base``: the embedded SmolLM2-135M
GGUF, dequantized to float32, or a local HF model folder), and trains with the loss on the
assistant's tokens only (``assistant_only_loss``: the tool-aware template's
``{% generation %}`` marks). LoRA through peft by default; ``lora.enabled = false`` trains
every weight. The result is a plain HF model folder ``<output_dir>/model`` (adapter merged,
tokenizer and chat template beside it) that ``training.serve`` turns into a GGUF and that
``sft`` itself accepts as a base for the next round.

Peak resident memory is measured (``ru_maxrss`` of this process) and returned.
"""

from __future__ import annotations

import json
import logging
import resource
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from trajsynth.schemas import InputError, LoraSettings, Record, stable_hash
from trajsynth.training.config_file import load_config_file
from trajsynth.training.models_io import (
    load_base_model,
    load_base_tokenizer,
    peft_config,
    tune_fused_lm_head,
    use_bf16,
)

__all__ = ["SFTConfig", "SFTResult", "load_sft_config", "load_sft_dataset", "sft", "smoke_sft"]

log = logging.getLogger(__name__)

_UPSTREAM_RENAME = r".*gradient_checkpointing.* is deprecated"


class SFTConfig(Record):
    """Everything ``synth sft`` needs; names follow TRL's SFTConfig where they map to it."""

    model: str = Field(
        default="embedded",
        description="'embedded' (the bundled SmolLM2-135M GGUF), a local HF model folder, "
        "or a .gguf file",
    )
    data: str = Field(default="", description="SFT export: dataset root, sft/ folder or file")
    output_dir: str = "runs/sft"
    lora: LoraSettings = Field(
        default_factory=lambda: LoraSettings(
            r=16,
            alpha=32,
            target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj"],
        )
    )
    num_train_epochs: float = Field(default=1.0, gt=0)
    max_steps: int = Field(default=-1, description="> 0 overrides the epochs")
    per_device_train_batch_size: int = Field(default=1, ge=1)
    gradient_accumulation_steps: int = Field(default=4, ge=1)
    learning_rate: float = Field(default=2e-4, gt=0)
    max_length: int = Field(
        default=4096, ge=16, description="tokens per row (tool schemas alone are ~2,000)"
    )
    packing: bool = False
    use_cpu: bool = True
    bf16: bool | Literal["auto"] = Field(
        default="auto", description="bf16 autocast; auto: a GPU with bf16, or avx512_bf16/AMX"
    )
    gradient_checkpointing: bool = Field(
        default=True, description="recompute activations: 4.9 GB vs 6.7 GB peak on CPU rows"
    )
    logging_steps: int = Field(default=1, ge=1)
    seed: int = 0
    max_rows: int | None = Field(default=None, ge=1, description="first N rows of the export")

    def config_hash(self) -> str:
        return stable_hash(self.model_dump(mode="json"), length=16)


class SFTResult(Record):
    """What a training run produced and what it cost."""

    model_dir: str
    adapter_dir: str | None
    n_rows: int
    n_tokens: int
    steps: int
    train_loss: float
    losses: list[float]
    seconds: float
    peak_rss_mb: float
    config_hash: str
    bf16: bool = Field(description="whether bf16 autocast ran (the config's auto, resolved)")


def smoke_sft(**overrides: Any) -> SFTConfig:
    """A few LoRA steps on CPU: what ``synth sft --smoke`` and the slow tests run."""
    # rows with every tool schema are ~2,400 tokens: recomputing activations keeps one step
    # under 4 GB resident (measured: 6.7 GB without, 4.9 GB with; bf16 autocast, where the CPU
    # has it, 4.2 GB; 2-core box, 4 rows)
    base: dict[str, Any] = {
        "gradient_checkpointing": True,
        "bf16": "auto",
        "max_steps": 2,
        "per_device_train_batch_size": 1,
        "gradient_accumulation_steps": 1,
        "max_rows": 4,
        "output_dir": "runs/sft-smoke",
        "lora": {"r": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj"]},
    }
    base.update(overrides)
    return SFTConfig.model_validate(base)


def load_sft_config(path: Path, **overrides: Any) -> SFTConfig:
    """An SFTConfig from a TOML file (top-level keys, or an ``[sft]`` table)."""
    return load_config_file(path, SFTConfig, table="sft", **overrides)


def _data_files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    folder = path / "sft" if (path / "sft").is_dir() else path
    files = sorted(folder.glob("*.parquet")) or sorted(
        p for p in folder.glob("*.jsonl") if p.name != "metadata.jsonl"
    )
    return files


def load_sft_dataset(
    path: str | Path,
    *,
    max_rows: int | None = None,
    extra_columns: Sequence[str] = (),
) -> Any:
    """The SFT rows of an export as a ``datasets.Dataset`` with ``messages`` and ``tools``.

    Raises ``InputError`` with one line when the path holds no SFT files, no rows, or rows
    without ``messages``/``tools`` (an RL export or another layout).
    """
    import datasets
    from datasets.exceptions import DatasetGenerationError

    path = Path(path)
    if not path.exists():
        raise InputError(f"SFT export {path} does not exist")
    files = _data_files(path)
    if not files:
        raise InputError(f"SFT export {path}: no *.parquet or *.jsonl files (run `synth export`)")
    if all(f.stat().st_size == 0 for f in files):
        raise InputError(f"SFT export {path} has no rows: nothing to train on")
    kind = "parquet" if files[0].suffix == ".parquet" else "json"
    try:
        ds = datasets.load_dataset(kind, data_files=[str(f) for f in files], split="train")
    except (StopIteration, ValueError, OSError, DatasetGenerationError) as exc:
        raise InputError(f"SFT export {path}: cannot read it as {kind} ({exc})") from exc
    missing = {"messages", "tools"} - set(ds.column_names)
    if missing:
        raise InputError(
            f"SFT export {path}: not SFT rows (columns {sorted(ds.column_names)}; "
            f"need messages and tools, missing {sorted(missing)})"
        )
    if len(ds) == 0:
        raise InputError(f"SFT export {path} has no rows: nothing to train on")
    if kind == "json":  # OpenAI JSONL: arguments may be objects; the template takes both
        ds = ds.map(lambda r: {"tools": [json.loads(json.dumps(t)) for t in r["tools"]]})
    if max_rows is not None:
        ds = ds.select(range(min(max_rows, len(ds))))
    # ``extra_columns`` (where the files have them): what the caller records of each row,
    # e.g. its task_id and run_id for the model's lineage; the trainer reads only the two
    extra = [c for c in extra_columns if c in ds.column_names]
    return ds.select_columns(["messages", "tools", *extra])


def _trl_args(config: SFTConfig, *, bf16: bool) -> Any:
    from trl.trainer.sft_config import SFTConfig as TRLSFTConfig

    return TRLSFTConfig(
        output_dir=config.output_dir,
        num_train_epochs=config.num_train_epochs,
        max_steps=config.max_steps,
        per_device_train_batch_size=config.per_device_train_batch_size,
        gradient_accumulation_steps=config.gradient_accumulation_steps,
        learning_rate=config.learning_rate,
        max_length=config.max_length,
        packing=config.packing,
        assistant_only_loss=True,
        use_cpu=config.use_cpu,
        bf16=bf16,
        gradient_checkpointing=config.gradient_checkpointing,
        logging_steps=config.logging_steps,
        seed=config.seed,
        report_to="none",
        save_strategy="no",
        dataset_num_proc=None,
    )


def peak_rss_mb() -> float:
    """This process's peak resident set so far, in MiB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def sft(config: SFTConfig, *, dataset: Any | None = None) -> SFTResult:
    """Train (see the module doc); writes ``<output_dir>/model`` and returns the figures."""
    import datasets
    import torch
    from transformers import PreTrainedModel

    start = time.perf_counter()
    torch.manual_seed(config.seed)
    train = (
        dataset
        if dataset is not None
        else load_sft_dataset(config.data, max_rows=config.max_rows)
        if config.data
        else None
    )
    if train is None:
        raise InputError("synth sft needs an SFT export: pass --data PATH")
    if len(train) == 0:
        raise InputError("the SFT dataset has no rows: nothing to train on")
    tokenizer = load_base_tokenizer(config.model)
    model = load_base_model(config.model)
    tune_fused_lm_head()  # logits in 512-token chunks, labelled positions only
    bf16 = use_bf16(config.bf16, use_cpu=config.use_cpu)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=_UPSTREAM_RENAME, category=FutureWarning)
        from trl.trainer.sft_trainer import SFTTrainer

        trainer = SFTTrainer(
            model=model,
            args=_trl_args(config, bf16=bf16),
            train_dataset=train,
            processing_class=tokenizer,
            peft_config=peft_config(config.lora),
        )
        prepared = trainer.train_dataset
        # SFTTrainer tokenizes the Dataset it is given into a Dataset (rows kept in memory)
        assert isinstance(prepared, datasets.Dataset)
        if len(prepared) == 0:
            raise InputError(
                f"no row of {config.data or 'the dataset'} keeps an assistant token within "
                f"max_length={config.max_length}: raise max_length"
            )
        n_tokens = sum(len(ids) for ids in prepared["input_ids"])
        output = trainer.train()
    losses = [float(h["loss"]) for h in trainer.state.log_history if "loss" in h]
    out = Path(config.output_dir)
    adapter_dir: str | None = None
    trained = trainer.model
    if config.lora.enabled:
        from peft import PeftModel

        assert isinstance(trained, PeftModel)  # a peft_config makes SFTTrainer wrap the model
        adapter_dir = str(out / "adapter")
        trained.save_pretrained(adapter_dir)
        trained = trained.merge_and_unload()
    # the base model again (AutoModelForCausalLM, from a folder or a GGUF), LoRA merged in
    assert isinstance(trained, PreTrainedModel)
    model_dir = out / "model"
    trained.save_pretrained(str(model_dir))
    tokenizer.save_pretrained(str(model_dir))
    (out / "sft_config.json").write_text(config.model_dump_json(indent=2))
    log.info(
        "SFT: %d rows, %d steps, loss %.4f", len(train), output.global_step, output.training_loss
    )
    return SFTResult(
        model_dir=str(model_dir),
        adapter_dir=adapter_dir,
        n_rows=len(train),
        n_tokens=n_tokens,
        steps=output.global_step,
        train_loss=float(output.training_loss),
        losses=losses,
        seconds=time.perf_counter() - start,
        peak_rss_mb=peak_rss_mb(),
        config_hash=config.config_hash(),
        bf16=bf16,
    )
