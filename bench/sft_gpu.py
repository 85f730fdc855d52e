"""`synth sft` with the bundled GPU config on one CUDA device.

    python bench/sft_gpu.py --data EXPORT [--model embedded] [--max-steps 20] [--json PATH]

Runs ``training.sft`` with ``data/train/sft-gpu.toml`` (bf16, batch 8 x 2, LoRA r=32 on every
projection, gradient checkpointing) on the SFT export ``--data``; ``--repeat N`` concatenates
the export N times when it has fewer rows than a batch (a throughput check, not a learning
one). Then writes the merged model as a GGUF with ``training.serve.export_gguf`` and reads it
back with the ``gguf`` package. Prints one table: the device, rows and tokens, steps,
seconds per step, trained tokens per second, peak GPU memory (``torch.cuda``), peak resident
memory, first and last logged loss, and the GGUF's size and tensor count. Needs CUDA; a
machine without it gets one line and exit code 2.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from trajsynth.training.serve import export_gguf
from trajsynth.training.sft import load_sft_config, load_sft_dataset, sft

GPU_CONFIG = Path(__file__).resolve().parents[1] / "src/trajsynth/data/train/sft-gpu.toml"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True, help="SFT export: dataset root or sft/ folder")
    parser.add_argument("--model", default="embedded", help="'embedded', a .gguf or HF folder")
    parser.add_argument("--max-steps", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=1, help="concatenate the rows N times")
    parser.add_argument("--output-dir", default="runs/sft-gpu-bench")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()

    import datasets
    import gguf
    import torch

    if not torch.cuda.is_available():
        print("bench/sft_gpu.py needs a CUDA device: none is visible here", file=sys.stderr)
        return 2
    rows = load_sft_dataset(args.data)
    if args.repeat > 1:
        rows = datasets.concatenate_datasets([rows] * args.repeat)
    config = load_sft_config(
        GPU_CONFIG,
        model=args.model,
        data=args.data,
        output_dir=args.output_dir,
        max_steps=args.max_steps,
    )
    torch.cuda.reset_peak_memory_stats()
    result = sft(config, dataset=rows)
    peak_gpu_mb = torch.cuda.max_memory_allocated() / 2**20
    t0 = time.perf_counter()
    base = args.model if args.model.endswith(".gguf") else None  # its metadata and tokenizer
    out = export_gguf(result.model_dir, Path(args.output_dir) / "model.f16.gguf", base_gguf=base)
    gguf_s = time.perf_counter() - t0
    reader = gguf.GGUFReader(str(out))
    figures = {
        "device": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "rows": result.n_rows,
        "tokens": result.n_tokens,
        "steps": result.steps,
        "rows_per_step": config.per_device_train_batch_size * config.gradient_accumulation_steps,
        "seconds_load_and_train": round(result.seconds, 1),
        "seconds_per_step": round(result.seconds / max(result.steps, 1), 3),
        "peak_gpu_mb": round(peak_gpu_mb),
        "peak_rss_mb": round(result.peak_rss_mb),
        "first_loss": result.losses[0] if result.losses else None,
        "last_loss": result.losses[-1] if result.losses else None,
        "gguf_mb": round(out.stat().st_size / 2**20, 1),
        "gguf_tensors": len(reader.tensors),
        "gguf_seconds": round(gguf_s, 1),
    }
    table = Table(title=f"synth sft, {GPU_CONFIG.name}, on {figures['device']}")
    table.add_column("figure")
    table.add_column("value", justify="right")
    for key, value in figures.items():
        table.add_row(key, str(value))
    Console().print(table)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
