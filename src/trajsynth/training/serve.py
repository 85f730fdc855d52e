"""A tuned HF model written as a GGUF the embedded llama.cpp server loads.

llama-cpp-python ships no converter script, so ``export_gguf`` uses the ``gguf`` package
(llama.cpp's own Python writer) the way llama.cpp's ``gguf_new_metadata.py`` copies a file:
every metadata key of the base GGUF (architecture hyper-parameters, the tokenizer) is copied,
``general.file_type`` is set to the new type, and each tensor of the base file is replaced by
the tuned weight of the same name (names mapped with ``gguf.get_tensor_name_map``). The chat
template is the one the model was trained in (``llm.tool_template.TOOL_CHAT_TEMPLATE``),
and ``trajsynth.tool_format`` names its tool layout, so the embedded server prompts the
tuned model in it (``llm.chat_handler.tool_format``). Two details from
``convert_hf_to_gguf.py``'s ``LlamaModel``:

* ``attn_q``/``attn_k`` are stored with llama.cpp's rotary layout, a per-head permutation of
  HF's rows (``_permute``); transformers undoes it when it loads a GGUF, so a round trip
  through ``export_gguf`` and transformers gives back the same weights (tested).
* norms and other 1-D tensors stay float32; matrices are float16 (``dtype="f16"``, default)
  or float32.

Only the llama architecture (SmolLM2) is supported; another base is refused with one line.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from trajsynth.schemas import InputError

__all__ = ["export_gguf", "policy_gguf"]

log = logging.getLogger(__name__)


def _permute(weights: Any, n_head: int, n_head_kv: int | None) -> Any:
    """HF rotary-half rows -> llama.cpp interleaved rows (convert_hf_to_gguf's permute)."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return (
        weights.reshape(n_head, 2, weights.shape[0] // n_head // 2, *weights.shape[1:])
        .swapaxes(1, 2)
        .reshape(weights.shape)
    )


def _tuned_tensors(model_dir: Path) -> tuple[dict[str, Any], Any]:
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(str(model_dir))
    if getattr(config, "model_type", None) != "llama":
        raise InputError(
            f"{model_dir}: GGUF export supports the llama architecture (SmolLM2), "
            f"not {getattr(config, 'model_type', '?')!r}"
        )
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype="float32")
    tensors = {n: p.detach().cpu().numpy() for n, p in model.state_dict().items()}
    return tensors, config


def export_gguf(
    model_dir: str | Path,
    out_path: str | Path,
    *,
    base_gguf: str | Path | None = None,
    dtype: str = "f16",
) -> Path:
    """Write the HF model at ``model_dir`` as a GGUF at ``out_path`` (see the module doc).

    ``base_gguf`` supplies the metadata and tokenizer (default: the embedded SmolLM2 GGUF).
    Written to a temp file and renamed, so a failed export leaves nothing half-written.
    """
    import gguf
    import numpy as np

    from trajsynth.llm.chat_template import default_gguf_path
    from trajsynth.llm.tool_template import TOOL_CALL_JSON, TOOL_CHAT_TEMPLATE, TOOL_FORMAT_KEY

    if dtype not in ("f16", "f32"):
        raise InputError(f"GGUF dtype {dtype!r}: one of f16, f32")
    model_dir, out_path = Path(model_dir), Path(out_path)
    base = Path(base_gguf) if base_gguf else default_gguf_path()
    tensors, config = _tuned_tensors(model_dir)
    reader = gguf.GGUFReader(str(base))
    arch = reader.fields[gguf.Keys.General.ARCHITECTURE].contents()
    if arch != "llama":
        raise InputError(f"{base}: base GGUF architecture {arch!r}; only 'llama' is supported")
    n_layers = int(config.num_hidden_layers)
    name_map = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, n_layers)
    by_gguf: dict[str, str] = {}
    for hf_name in tensors:
        mapped = name_map.get_name(hf_name, try_suffixes=(".weight", ".bias"))
        if mapped is not None:
            by_gguf[mapped] = hf_name
    n_head = int(config.num_attention_heads)
    n_kv = int(getattr(config, "num_key_value_heads", n_head))
    file_type = gguf.LlamaFileType.MOSTLY_F16 if dtype == "f16" else gguf.LlamaFileType.ALL_F32

    out_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_path.with_name(f".{out_path.name}.tmp-{os.getpid()}")
    writer = gguf.GGUFWriter(str(tmp), arch=arch)
    try:
        for field in reader.fields.values():
            if field.name == gguf.Keys.General.ARCHITECTURE or field.name.startswith("GGUF."):
                continue
            if field.name in (
                gguf.Keys.General.FILE_TYPE,
                gguf.Keys.General.QUANTIZATION_VERSION,
                gguf.Keys.Tokenizer.CHAT_TEMPLATE,
                TOOL_FORMAT_KEY,
            ):
                continue
            val_type = field.types[0]
            sub_type = field.types[-1] if val_type == gguf.GGUFValueType.ARRAY else None
            writer.add_key_value(field.name, field.contents(), val_type, sub_type=sub_type)
        writer.add_file_type(file_type)
        # the layout the rows were rendered in: llama.cpp servers (ours, or `llama-server
        # --jinja`) then prompt the tuned model as it was trained
        writer.add_chat_template(TOOL_CHAT_TEMPLATE)
        writer.add_string(TOOL_FORMAT_KEY, TOOL_CALL_JSON)
        for tensor in reader.tensors:
            hf_name = by_gguf.get(tensor.name)
            if hf_name is None:
                raise InputError(f"{model_dir}: no tuned weight for GGUF tensor {tensor.name!r}")
            data = tensors[hf_name]
            if tensor.name.endswith("attn_q.weight"):
                data = _permute(data, n_head, n_head)
            elif tensor.name.endswith("attn_k.weight"):
                data = _permute(data, n_head, n_kv)
            if data.ndim >= 2 and dtype == "f16":
                data = data.astype(np.float16)
            else:
                data = data.astype(np.float32)
            writer.add_tensor(tensor.name, np.ascontiguousarray(data))
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
    except BaseException:
        writer.close()
        tmp.unlink(missing_ok=True)
        raise
    writer.close()
    os.replace(tmp, out_path)
    log.info("wrote %s (%s, %d tensors)", out_path, dtype, len(reader.tensors))
    return out_path


def policy_gguf(path: str | Path, *, work_dir: Path | None = None) -> Path:
    """The GGUF of a policy: the file itself, the one GGUF in a folder, or a HF model folder
    converted (``<folder>/model.f16.gguf``, reused while newer than the weights).

    Raises ``InputError`` naming the path when it is not a model."""
    from trajsynth.training.models_io import resolve_model

    where = resolve_model(path)
    if where.gguf_file is not None:
        return where.folder / where.gguf_file
    out = (work_dir or where.folder) / "model.f16.gguf"
    weights = sorted(where.folder.glob("*.safetensors"))
    if out.is_file() and weights and out.stat().st_mtime >= max(w.stat().st_mtime for w in weights):
        return out
    return export_gguf(where.folder, out)
