"""`grow-dataset`: the flow a cron schedule fires to keep a dataset growing.

A run's id is the hash of its config, seeds included, so firing ``build_dataset`` with the
same config again would only resume (and add nothing). Each firing here builds with the next
seed instead: ``config.seed + k``, where ``k`` counts the completed runs in the store that have
this config apart from the seed. A firing that crashed leaves its run unfinished, so the next
firing picks the same seed and resumes it; a finished one moves the next firing on.

The API key is read from the serving process's environment (settings) when the flow runs;
it is never a deployment parameter, so it never reaches the Prefect server.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from prefect import flow
from pydantic import SecretStr, ValidationError

from trajsynth.flows.build import build_dataset
from trajsynth.flows.runners import task_runner_for
from trajsynth.schemas import InputError, RunConfig
from trajsynth.store import Store
from trajsynth.store.rows import RunRow

__all__ = ["grow_dataset", "next_seed"]

log = logging.getLogger(__name__)


def _without_seed(config: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in config.items() if k != "seed"}


def next_seed(store: Store, base: RunConfig) -> int:
    """``base.seed`` plus the number of completed runs of ``base`` (any seed) in ``store``."""
    if not store.path.exists():
        return base.seed
    mine = _without_seed(base.model_dump(mode="json"))
    done = store.read(RunRow, state="completed")
    return base.seed + sum(
        1 for r in done if isinstance(r.config, dict) and _without_seed(r.config) == mine
    )


def _api_key() -> SecretStr | None:
    """The key from the environment only (``SYNTH_LLM__API_KEY``, the variable the CLI's
    settings read): flows sit beside the CLI, so they read the one variable themselves."""
    value = os.environ.get("SYNTH_LLM__API_KEY")
    return SecretStr(value) if value else None


@flow(name="grow-dataset", log_prints=False, validate_parameters=False)
async def grow_dataset(
    config: dict[str, Any],
    store_path: str,
    cache_dir: str | None = None,
    clusters_dir: str | None = None,
    concurrency: int = 2,
    task_runner: str = "thread",
    task_runner_address: str | None = None,
    task_runner_workers: int = 2,
) -> dict[str, Any]:
    """Build the next seed's dataset into ``store_path`` (``config`` is a RunConfig as JSON)
    on the task runner named (``flows/runners.py``); returns the run's summary as JSON."""
    try:
        base = RunConfig.model_validate(config)
    except ValidationError as exc:
        raise InputError(f"grow-dataset: invalid config parameter: {exc.errors()[0]}") from None
    seed = next_seed(Store(Path(store_path)), base)
    log.info("growing %s with seed %d", store_path, seed)
    runner = task_runner_for(task_runner, task_runner_address, task_runner_workers)
    build = build_dataset.with_options(task_runner=runner)
    summary = await build(
        base.model_copy(update={"seed": seed}),
        store_path=store_path,
        cache_dir=cache_dir,
        clusters_dir=clusters_dir,
        api_key=_api_key(),
        concurrency=concurrency,
    )
    return summary.model_dump(mode="json")
