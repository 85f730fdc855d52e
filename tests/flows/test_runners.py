"""`task_runner_for`: the setting picks threads, Dask or Ray; the choice is not in the run id."""

from __future__ import annotations

import importlib.util

import pytest
from prefect.task_runners import ThreadPoolTaskRunner
from prefect_dask import DaskTaskRunner

from trajsynth.cli.settings import Settings
from trajsynth.flows.runners import task_runner_for
from trajsynth.schemas import InputError


def test_thread_pool_is_the_default() -> None:
    runner = task_runner_for("thread", workers=3)
    assert isinstance(runner, ThreadPoolTaskRunner)
    assert runner._max_workers == 3
    assert Settings().runner.kind == "thread"


def test_dask_local_cluster_or_address() -> None:
    local = task_runner_for("dask", workers=4)
    assert isinstance(local, DaskTaskRunner)
    assert local.address is None
    assert local.cluster_kwargs["n_workers"] == 4 and local.cluster_kwargs["processes"]
    remote = task_runner_for("Dask", address="tcp://10.0.0.5:8786")
    assert remote.address == "tcp://10.0.0.5:8786"


@pytest.mark.skipif(importlib.util.find_spec("prefect_ray") is not None, reason="ray installed")
def test_ray_without_prefect_ray_is_a_clear_error() -> None:
    with pytest.raises(InputError, match=r"pip install 'trajsynth\[ray\]'"):
        task_runner_for("ray")


def test_unknown_kind_and_bad_workers() -> None:
    with pytest.raises(InputError, match="unknown task runner 'spark'; one of: thread, dask, ray"):
        task_runner_for("spark")
    with pytest.raises(InputError, match="at least 1"):
        task_runner_for("thread", workers=0)


def test_the_runner_choice_does_not_change_the_run_id() -> None:
    threads = Settings()
    dask = Settings(run={"task_runner": "dask", "task_runner_address": "tcp://h:8786"})
    assert dask.runner.kind == "dask"
    assert threads.run_config().config_hash() == dask.run_config().config_hash()
