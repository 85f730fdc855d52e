"""A stranger's minimal SFT script: TRL + transformers + datasets on a trajsynth export.

It imports nothing of trajsynth: the export's Parquet rows and the tokenizer folder it ships
(with the tool-aware chat template) are all it needs. Usage:
    python stranger_sft.py EXPORT_DIR MODEL_DIR OUT_DIR
"""

import sys

import datasets
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import SFTConfig, SFTTrainer

export, model_dir, out = sys.argv[1:4]
train = datasets.load_dataset("parquet", data_files=f"{export}/*.parquet", split="train")
tokenizer = AutoTokenizer.from_pretrained(f"{export}/tokenizer")
model = AutoModelForCausalLM.from_pretrained(model_dir)
args = SFTConfig(
    output_dir=out,
    max_steps=1,
    per_device_train_batch_size=1,
    assistant_only_loss=True,
    use_cpu=True,
    bf16=False,  # TRL defaults to bf16, which a CPU without bf16 units emulates, slowly
    report_to="none",
    save_strategy="no",
    max_length=4096,
)
trainer = SFTTrainer(model=model, args=args, train_dataset=train, processing_class=tokenizer)
result = trainer.train()
leaked = sorted(m for m in sys.modules if m.split(".")[0] == "trajsynth")
print(f"steps={result.global_step} loss={result.training_loss:.4f} trajsynth_modules={leaked}")
