"""`--policy PATH` of `synth run`: which tuned model plays the assistant.

``policy_ref`` checks the path is a model (one clear line when not), finds the GGUF the
embedded llama.cpp server loads (a HF folder ``synth sft`` wrote is converted once, beside
its weights) and the model's ``models`` row, so the run's config, manifest and id name it.
"""

from __future__ import annotations

from pathlib import Path

from trajsynth.schemas import PolicyRef
from trajsynth.store import Store

__all__ = ["model_id_for", "policy_ref"]


def _same(a: str | None, b: Path) -> bool:
    return a is not None and Path(a).resolve() == b


def model_id_for(store: Store, *paths: Path) -> str | None:
    """The newest ``models`` row whose model folder or GGUF is one of ``paths``."""
    if not store.path.exists():
        return None
    store.migrate()  # a store from before the models table gains it (no row: no model id)
    wanted = [p.resolve() for p in paths]
    rows = store.query("SELECT model_id, path, gguf_path FROM models ORDER BY created_at DESC")
    for row in rows:
        if any(_same(row["path"], p) or _same(row["gguf_path"], p) for p in wanted):
            return row["model_id"]
    return None


def policy_ref(path: str, store: Store) -> PolicyRef:
    """The policy at ``path`` (``embedded``, a ``.gguf``, or a HF model folder); raises
    ``InputError`` naming the path when it is not a model."""
    from trajsynth.training.models_io import resolve_model
    from trajsynth.training.serve import policy_gguf

    where = resolve_model(path)  # the one-line InputError comes from here
    gguf = policy_gguf(path).resolve()
    given = Path(path) if path != "embedded" else gguf
    return PolicyRef(
        path=path if path == "embedded" else str(given.resolve()),
        gguf=str(gguf),
        model_id=model_id_for(store, given, gguf, where.folder),
    )
