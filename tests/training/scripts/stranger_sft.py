"""A stranger's minimal SFT script: TRL + transformers + datasets on a trajsynth export.

It imports nothing of trajsynth: the export's Parquet rows, the tokenizer folder it ships
(with the tool-aware chat template) and the base model `synth model export` writes are all it
needs. It prints the steps, the loss, whether the loss is finite, how many parameter tensors
the steps changed, and any trajsynth module it loaded. Usage:
    python stranger_sft.py EXPORT_DIR MODEL_DIR OUT_DIR [STEPS]
"""

import math
import sys

import datasets
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import SFTConfig, SFTTrainer

export, model_dir, out = sys.argv[1:4]
steps = int(sys.argv[4]) if len(sys.argv) > 4 else 1
train = datasets.load_dataset("parquet", data_files=f"{export}/*.parquet", split="train")
tokenizer = AutoTokenizer.from_pretrained(f"{export}/tokenizer")
model = AutoModelForCausalLM.from_pretrained(model_dir)
before = {name: p.detach().clone() for name, p in model.named_parameters()}
args = SFTConfig(
    output_dir=out,
    max_steps=steps,
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
changed = sum(
    1 for name, p in trainer.model.named_parameters() if not p.detach().equal(before[name])
)
finite = math.isfinite(result.training_loss)
print(
    f"steps={result.global_step} loss={result.training_loss:.4f} finite={finite} "
    f"changed={changed}/{len(before)} trajsynth_modules={leaked}"
)
