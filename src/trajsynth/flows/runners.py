"""Which Prefect task runner spreads a round's rollouts: threads, a Dask cluster or Ray.

The choice lives in the settings (``[runner] kind``, ``address``, ``workers``), not in
``RunConfig``: where the work runs does not change what the data is, so it must not change the
run id, and a run started on threads resumes on Dask. The flow applies it with
``build_dataset.with_options(task_runner=task_runner_for(...))``.

A rollout task takes plain pydantic records and returns its rows; the flow writes them, so a
worker on another machine needs the LLM endpoint and the sandbox, never the store.
"""

from __future__ import annotations

from typing import Any

from prefect.task_runners import TaskRunner, ThreadPoolTaskRunner

from trajsynth.schemas import InputError

__all__ = ["TASK_RUNNERS", "task_runner_for"]

TASK_RUNNERS = ("thread", "dask", "ray")


def task_runner_for(kind: str, address: str | None = None, workers: int = 2) -> TaskRunner[Any]:
    """The task runner for ``kind``.

    * ``thread``: a thread pool of ``workers`` threads in the flow's process (the default);
    * ``dask``: the Dask scheduler at ``address`` (``tcp://host:8786``), or without one a
      local cluster of ``workers`` worker processes, one thread each, started with the flow;
    * ``ray``: the Ray cluster at ``address`` (``ray://host:10001``), or a local Ray.

    Raises ``InputError`` for an unknown kind or a missing optional package.
    """
    if workers < 1:
        raise InputError(f"task_runner_workers must be at least 1, not {workers}")
    kind = kind.strip().lower()
    if kind == "thread":
        return ThreadPoolTaskRunner(max_workers=workers)
    if kind == "dask":
        try:
            from prefect_dask.task_runners import DaskTaskRunner
        except ImportError:
            raise InputError(
                "task_runner = 'dask' needs prefect-dask: pip install 'trajsynth[dask]'"
            ) from None
        if address:
            return DaskTaskRunner(address=address)
        return DaskTaskRunner(
            cluster_class="distributed.LocalCluster",
            cluster_kwargs={
                "n_workers": workers,
                "threads_per_worker": 1,
                "processes": True,
                "dashboard_address": None,
            },
        )
    if kind == "ray":
        try:
            from prefect_ray import RayTaskRunner  # type: ignore[import-not-found]
        except ImportError:
            raise InputError(
                "task_runner = 'ray' needs prefect-ray: pip install 'trajsynth[ray]'"
            ) from None
        return RayTaskRunner(address=address) if address else RayTaskRunner()
    raise InputError(f"unknown task runner {kind!r}; one of: {', '.join(TASK_RUNNERS)}")
