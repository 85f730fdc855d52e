"""TRL's SFTTrainer takes one step on the exported SFT data, training only the assistant."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from fakes.export_store import export_store

from trajsynth.export import export_sft
from trajsynth.llm.chat_template import load_tokenizer, render
from trajsynth.training.models_io import load_base_model

pytestmark = pytest.mark.alone  # torch or transformers: every core


@pytest.mark.slow
# TRL 1.16 still sets transformers' old ``gradient_checkpointing`` name: upstream noise
@pytest.mark.filterwarnings("ignore:.*gradient_checkpointing.* is deprecated:FutureWarning")
def test_sft_trainer_runs_one_step_on_the_export(tmp_path: Path) -> None:
    import datasets
    import torch
    from trl import SFTConfig, SFTTrainer

    tokenizer = load_tokenizer()
    store = export_store(tmp_path / "s.duckdb")
    export_sft(store, tmp_path / "sft", tokenizer=tokenizer)
    train = datasets.load_dataset(
        "parquet", data_files=str(tmp_path / "sft" / "*.parquet"), split="train"
    )
    # the embedded GGUF dequantized to float32 (read once, then from the cache's copy)
    model = load_base_model("embedded")
    assert all(p.dtype == torch.float32 for p in model.parameters())
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    args = SFTConfig(
        output_dir=str(tmp_path / "run"),
        max_steps=1,
        per_device_train_batch_size=1,  # one row: a step over three took 290 s on an AVX2 CPU
        learning_rate=1e-3,
        assistant_only_loss=True,
        use_cpu=True,
        bf16=False,  # TRL's default is true, which a CPU without bf16 units emulates slowly
        report_to="none",
        save_strategy="no",
        logging_steps=1,
        max_length=1024,
        dataset_num_proc=None,
    )
    trainer = SFTTrainer(model=model, args=args, train_dataset=train, processing_class=tokenizer)
    # the trainer's own tokenisation trains exactly the tokens our template masks
    for row, prepared in zip(train, trainer.train_dataset, strict=True):
        ids, mask = render(row["messages"], row["tools"], tokenizer)
        assert prepared["input_ids"] == ids
        assert prepared["labels"] == [t if m else -100 for t, m in zip(ids, mask, strict=True)]
        assert 0 < sum(mask) < len(ids)
    result = trainer.train()
    assert result.global_step == 1
    assert math.isfinite(result.training_loss) and result.training_loss > 0
    changed = [n for n, p in model.named_parameters() if not torch.equal(p, before[n])]
    assert changed, "no parameter moved after one step"
