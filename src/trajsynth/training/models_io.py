"""Loading a base model for training: the embedded GGUF, any .gguf file, or a HF folder.

A GGUF is dequantized to float32 by transformers on load. transformers keeps the GGUF
quantizer attached to the model and its Trainer then refuses to train a "quantized" model;
the weights are plain float32 tensors, so the marks are dropped (``detach_gguf_quantizer``).
This is the supported way to train the embedded SmolLM2-135M (tested in
tests/training/test_sft.py, the slow smoke).

transformers' GGUF reader is slow: 28-38 s for the 94 MB SmolLM2 file on a 2-core AVX2 EPYC,
of which 3 s dequantizing (it parses the file twice, vocabulary included, and rebuilds its
tensor-name map for each of 397 tensors). So the float32 model is saved once as a HF folder
(safetensors) under the cache, keyed by the file's content and transformers' version, and
each later load reads that folder (``load_gguf_model``).
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Literal

from trajsynth.schemas import InputError, LoraSettings, paths

__all__ = [
    "DEFAULT_MODEL_CACHE",
    "ModelLocation",
    "detach_gguf_quantizer",
    "export_model",
    "load_base_model",
    "load_gguf_model",
    "load_base_tokenizer",
    "resolve_model",
    "tune_fused_lm_head",
    "use_bf16",
]

log = logging.getLogger(__name__)


class ModelLocation:
    """Where a model lives: a folder, and the GGUF file inside it (None: a HF folder)."""

    def __init__(self, folder: Path, gguf_file: str | None) -> None:
        self.folder = folder
        self.gguf_file = gguf_file

    @property
    def is_gguf(self) -> bool:
        return self.gguf_file is not None


def resolve_model(model: str | Path) -> ModelLocation:
    """``embedded``, a ``.gguf`` file or a HF model folder (with ``config.json``).

    Raises ``InputError`` naming the path when it is none of these.
    """
    if str(model) == "embedded":
        from trajsynth.llm.chat_template import default_gguf_path

        path = default_gguf_path()
        return ModelLocation(path.parent, path.name)
    path = Path(model)
    if path.is_file() and path.suffix == ".gguf":
        return ModelLocation(path.parent, path.name)
    if path.is_dir() and (path / "config.json").is_file():
        return ModelLocation(path, None)
    if path.is_dir():
        ggufs = sorted(path.glob("*.gguf"))
        if len(ggufs) == 1:
            return ModelLocation(path, ggufs[0].name)
    raise InputError(
        f"{model} is not a model: expected 'embedded', a .gguf file, or a folder with "
        "config.json (a HF model, e.g. the model/ folder `synth sft` writes)"
    )


def detach_gguf_quantizer(model: Any) -> Any:
    """Drop the GGUF quantization marks from a model transformers dequantized on load."""
    model.hf_quantizer = None
    model.is_quantized = False
    if getattr(model.config, "quantization_config", None) is not None:
        del model.config.quantization_config
    return model


DEFAULT_MODEL_CACHE = paths.cache_dir() / "models"
# dequantized copies kept (float32: 540 MB each for the 135M model); the least recently used
# goes first, so the base model and the last tuned policy or two stay
KEEP_DEQUANTIZED = 3


def _evict(cache_dir: Path, keep: int) -> None:
    entries = [p for p in cache_dir.iterdir() if p.is_dir() and not p.name.startswith(".")]
    entries.sort(key=lambda p: p.stat().st_mtime, reverse=True)
    for old in entries[keep:]:
        shutil.rmtree(old, ignore_errors=True)


def load_gguf_model(path: Path, *, cache_dir: Path | None = DEFAULT_MODEL_CACHE) -> Any:
    """A GGUF file's model, dequantized to float32, with the quantizer marks dropped.

    The first load goes through transformers' GGUF reader and saves the result under
    ``cache_dir`` (``None``: no cache); a later load of the same file reads the saved folder,
    the same float32 tensors. The cache is optional: a read-only or full disk only logs.
    """
    from transformers import AutoModelForCausalLM

    from trajsynth.llm.chat_template import gguf_cache_key

    key = f"{path.stem}-{gguf_cache_key(path)[:16]}"
    saved = cache_dir / key if cache_dir is not None else None
    if saved is not None and (saved / "config.json").is_file():
        os.utime(saved)  # recently used: evicted last
        return AutoModelForCausalLM.from_pretrained(str(saved))
    loaded = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name)
    model = detach_gguf_quantizer(loaded)
    if saved is not None:
        tmp: Path | None = None
        try:
            saved.parent.mkdir(parents=True, exist_ok=True)
            tmp = Path(tempfile.mkdtemp(prefix=".model-", dir=saved.parent))
            model.save_pretrained(str(tmp))
            os.replace(tmp, saved)  # whole or absent: a crash leaves only a dot-folder
            _evict(saved.parent, KEEP_DEQUANTIZED)
        except OSError as exc:  # a concurrent writer won the rename, or no room: optional
            log.debug("dequantized model not cached: %s", exc)
            if tmp is not None:
                shutil.rmtree(tmp, ignore_errors=True)
    return model


def load_base_model(model: str | Path) -> Any:
    """The model in float32, ready for a Trainer."""
    from transformers import AutoModelForCausalLM

    where = resolve_model(model)
    if where.gguf_file is None:
        return AutoModelForCausalLM.from_pretrained(str(where.folder))
    return load_gguf_model(where.folder / where.gguf_file)


def use_bf16(setting: bool | Literal["auto"], *, use_cpu: bool) -> bool:
    """Whether to train with bf16 autocast: ``auto`` means where the hardware multiplies bf16.

    On a CPU without AVX512-BF16 or AMX torch emulates bf16: two SFT smoke steps took 101 s in
    float32 and over ten times that with bf16 on a 2-core AVX2 EPYC, so ``auto`` keeps float32
    there: bf16 only where the CPU multiplies it natively.
    """
    # here, not at module level: `synth run --policy` imports this module for resolve_model
    # alone, and the embedder's module brings numpy with it
    from trajsynth.curation.embeddings import cpu_has_bf16

    if setting != "auto":
        if setting and use_cpu and not cpu_has_bf16():
            log.warning("bf16 on a CPU without avx512_bf16/amx_bf16 is emulated and slow")
        return setting
    if not use_cpu:
        import torch

        if torch.cuda.is_available():
            return bool(torch.cuda.is_bf16_supported())
    return cpu_has_bf16()


def load_base_tokenizer(model: str | Path) -> Any:
    """The tokenizer with a tool-aware chat template.

    A GGUF gets SmolLM2's tokenizer with the export's template (``chat_template``); a HF
    folder keeps its own files (the folder ``synth sft`` writes carries that template), and
    one without a chat template is refused, since SFT on tool rows needs one.
    """
    where = resolve_model(model)
    if where.is_gguf:
        from trajsynth.llm.chat_template import load_tokenizer

        assert where.gguf_file is not None
        return load_tokenizer(where.folder / where.gguf_file)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(where.folder))
    if not getattr(tokenizer, "chat_template", None):
        raise InputError(f"{where.folder}: the tokenizer has no chat template to render tools")
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


# Tokens per chunk of TRL's fused LM head. TRL 1.16 scores 32,768 positions per chunk, so on a
# CPU a 2,400-token row (or 2 GRPO sequences of ~1,000) is one chunk: its float32 logits over
# the 49k vocabulary and their softmax/grad buffers spike ~2 GB for a second per step
# (bench/training_memory.py trace). A private TRL constant: no public option sets it.
LOGPROB_CHUNK_TOKENS = 512


def tune_fused_lm_head(tokens: int = LOGPROB_CHUNK_TOKENS) -> None:
    """Fit TRL's fused LM head to a CPU: chunks of ``tokens`` positions, labelled ones only.

    The chunk cap is for memory (``LOGPROB_CHUNK_TOKENS``). The second change is for time: TRL
    1.16 projects only the positions with a label (the assistant's tokens in SFT, the
    completion in GRPO) through the head on Triton devices, and every position elsewhere,
    because on Neuron a changing count of positions recompiles the graph. Eager CPU has no
    graph to recompile, and on SmolLM2-135M the head is a fifth of the model's multiply-adds,
    while a gold demonstration's assistant tokens are 5% of its positions (the rest: schemas,
    user turns, tool results). Scoring every position took 2.2 of an SFT step's 13.3 s on a
    2-core AVX2 EPYC, and 0.2 s with the labelled positions alone (the step: 11.0 s).
    Both are private TRL names (``_CHUNKED_LOGPROB_CHUNK_SIZE``, and the ``_use_triton`` the
    fused forward asks to decide compaction); no public option sets either.
    """
    import trl.trainer.utils as trl_utils

    if hasattr(trl_utils, "_CHUNKED_LOGPROB_CHUNK_SIZE"):
        trl_utils._CHUNKED_LOGPROB_CHUNK_SIZE = min(trl_utils._CHUNKED_LOGPROB_CHUNK_SIZE, tokens)
    decide = getattr(trl_utils, "_use_triton", None)
    if decide is None or getattr(decide, "compacts_on_cpu", False):
        return

    def compact_on_cpu_too(device: Any) -> bool:
        return device.type == "cpu" or decide(device)

    compact_on_cpu_too.compacts_on_cpu = True
    # trl.trainer.utils imports _use_triton from trl.kernels without re-exporting it (py.typed);
    # the fused forward reads this module's global, so the patch goes here
    trl_utils._use_triton = compact_on_cpu_too  # pyright: ignore[reportPrivateImportUsage]


def peft_config(lora: LoraSettings) -> Any:
    """peft's ``LoraConfig`` for the LoRA settings (SFT and GRPO alike); None when off."""
    if not lora.enabled:
        return None
    from peft import LoraConfig

    return LoraConfig(
        r=lora.r,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        target_modules=list(lora.target_modules),
        task_type="CAUSAL_LM",
    )


def export_model(model: str | Path, out: Path, *, overwrite: bool = False) -> list[Path]:
    """Write ``model`` (``embedded``: the GGUF the runs use) as a plain transformers folder:
    float32 safetensors, ``config.json`` with no quantization marks, and the tokenizer with
    its tool-aware chat template, so a script that imports nothing of trajsynth loads it
    with ``AutoModelForCausalLM.from_pretrained(out)`` and trains it (transformers refuses
    to fine-tune a model it loaded from a GGUF itself). Returns the files written."""
    out = Path(out)
    if out.exists() and any(out.iterdir()) and not overwrite:
        raise InputError(f"{out} exists and is not empty; pass --overwrite to replace it")
    loaded = load_base_model(model)
    tokenizer = load_base_tokenizer(model)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        loaded.save_pretrained(str(tmp), safe_serialization=True)
        tokenizer.save_pretrained(str(tmp))
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return sorted(p for p in out.rglob("*") if p.is_file())
