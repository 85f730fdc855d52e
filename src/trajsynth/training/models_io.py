"""Loading a base model for training: the embedded GGUF, any .gguf file, or a HF folder.

A GGUF is dequantized to float32 by transformers on load. transformers keeps the GGUF
quantizer attached to the model and its Trainer then refuses to train a "quantized" model;
the weights are plain float32 tensors, so the marks are dropped (``detach_gguf_quantizer``).
This is the supported way to train the embedded SmolLM2-135M (tested in
tests/training/test_sft.py, the slow smoke).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Literal

from trajsynth.schemas import InputError, LoraSettings

__all__ = [
    "ModelLocation",
    "bound_logprob_chunks",
    "detach_gguf_quantizer",
    "load_base_model",
    "load_base_tokenizer",
    "resolve_model",
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
        from trajsynth.training.chat_template import default_gguf_path

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


def load_base_model(model: str | Path) -> Any:
    """The model in float32, ready for a Trainer."""
    from transformers import AutoModelForCausalLM

    where = resolve_model(model)
    if not where.is_gguf:
        return AutoModelForCausalLM.from_pretrained(str(where.folder))
    loaded = AutoModelForCausalLM.from_pretrained(str(where.folder), gguf_file=where.gguf_file)
    return detach_gguf_quantizer(loaded)


def use_bf16(setting: bool | Literal["auto"], *, use_cpu: bool) -> bool:
    """Whether to train with bf16 autocast: ``auto`` means where the hardware multiplies bf16.

    On a CPU without AVX512-BF16 or AMX torch emulates bf16: two SFT smoke steps took 101 s in
    float32 and over ten times that with bf16 on a 2-core AVX2 EPYC, so ``auto`` keeps float32
    there (issue 18: "bf16 where the CPU has it").
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
        from trajsynth.training.chat_template import load_tokenizer

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


def bound_logprob_chunks(tokens: int = LOGPROB_CHUNK_TOKENS) -> None:
    """Cap TRL's fused LM-head chunk at ``tokens`` positions (see ``LOGPROB_CHUNK_TOKENS``)."""
    import trl.trainer.utils as trl_utils

    if hasattr(trl_utils, "_CHUNKED_LOGPROB_CHUNK_SIZE"):
        trl_utils._CHUNKED_LOGPROB_CHUNK_SIZE = min(trl_utils._CHUNKED_LOGPROB_CHUNK_SIZE, tokens)


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
