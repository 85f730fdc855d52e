"""Scheduled deployments: read, check, register, serve.

The definitions ship with the package (``trajsynth/data/deployments.yaml``, ``packaged()``),
so ``synth deploy`` and ``synth serve`` work from any folder; ``--project FILE`` reads a
user's own ``prefect.yaml`` instead (the repo root keeps one for ``prefect deploy`` users).
Each entry has the keys of a ``prefect.yaml`` deployment: a ``name``, an ``entrypoint``
(a module path ``pkg.mod.flow``, or ``path/to/file.py:flow`` relative to the file's
folder), ``schedules`` (``cron`` and ``timezone``), ``parameters``, ``tags``,
``concurrency_limit`` and an optional ``work_pool: {name: ...}``. Only those keys are read
(no ``build``/``pull`` steps); the deployment itself is made by Prefect's
``Flow.to_deployment``, registered with ``RunnerDeployment.apply`` and served with
``prefect.serve``. Everything is checked before anything reaches the Prefect API: a schedule
that does not parse or an entrypoint that names no flow is an ``InputError`` naming the
file, the deployment and the field.

Parameters the flow takes and the file leaves out come from the user's settings
(``synth.toml``): ``config`` (the RunConfig; a ``config`` mapping in the file overrides its
fields), ``store_path``, ``cache_dir``, ``clusters_dir``, ``concurrency`` and the task runner
(``task_runner``, ``task_runner_address``, ``task_runner_workers``). Secrets never become
parameters: flows read the API key from the environment of the process that runs them. A
relative ``*_dir`` or ``*_path`` parameter in the file is taken relative to the folder
``synth deploy`` runs in (where ``synth.toml`` is), like the settings' paths.
"""

from __future__ import annotations

import contextlib
import importlib.util
import inspect
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from trajsynth.schemas import InputError, RunConfig

__all__ = [
    "PROJECT_FILE",
    "DeploymentSpec",
    "ScheduleSpec",
    "build_deployments",
    "flow_parameters",
    "load_flow",
    "load_project",
    "module_entrypoint",
    "packaged",
    "register",
    "serve",
]

log = logging.getLogger(__name__)

PROJECT_FILE = "prefect.yaml"
PACKAGED_FILE = "deployments.yaml"


def packaged() -> Path:
    """The deployment definitions shipped in the package (``trajsynth/data``)."""
    from importlib.resources import files

    return Path(str(files("trajsynth") / "data" / PACKAGED_FILE))


class ScheduleSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    cron: str
    timezone: str = "UTC"
    active: bool = True


class WorkPoolSpec(BaseModel):
    model_config = ConfigDict(extra="allow")  # job_variables, work_queue_name: Prefect's keys

    name: str


class DeploymentSpec(BaseModel):
    """One entry of ``deployments:`` in ``prefect.yaml``."""

    model_config = ConfigDict(extra="ignore")  # Prefect's own keys we do not use (build, pull)

    name: str
    entrypoint: str
    description: str | None = None
    schedules: list[ScheduleSpec] = Field(default_factory=list)
    parameters: dict[str, Any] = Field(default_factory=dict)
    tags: list[str] = Field(default_factory=list)
    concurrency_limit: int | None = Field(default=None, ge=1)
    work_pool: WorkPoolSpec | None = None


def _check_schedule(path: Path, name: str, index: int, schedule: ScheduleSpec) -> None:
    from prefect.client.schemas.schedules import CronSchedule

    try:
        CronSchedule(cron=schedule.cron, timezone=schedule.timezone)
    except ValidationError as exc:
        msg = exc.errors()[0]["msg"].removeprefix("Value error, ")
        raise InputError(
            f"{path}: deployment {name!r}: schedules[{index}]: {msg} "
            "(cron has five fields: minute hour day-of-month month day-of-week, e.g. '0 3 * * *')"
        ) from None


def load_project(path: Path | str) -> list[DeploymentSpec]:
    """The deployments of a ``prefect.yaml``, schedules checked. Raises ``InputError``."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"no {path} (a Prefect project file with `deployments:`)")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise InputError(f"{path}: not valid YAML: {exc}") from None
    items = data.get("deployments") if isinstance(data, dict) else None
    if not isinstance(items, list) or not items:
        raise InputError(f"{path}: no `deployments:` list")
    specs = []
    for i, item in enumerate(items):
        label = item.get("name", f"#{i}") if isinstance(item, dict) else f"#{i}"
        try:
            spec = DeploymentSpec.model_validate(item)
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(p) for p in err["loc"])
            raise InputError(f"{path}: deployment {label!r}: {where}: {err['msg']}") from None
        for k, schedule in enumerate(spec.schedules):
            _check_schedule(path, spec.name, k, schedule)
        specs.append(spec)
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise InputError(f"{path}: deployment names repeat: {names}")
    return specs


def _is_module_path(entrypoint: str) -> bool:
    return ":" not in entrypoint and "/" not in entrypoint and "." in entrypoint


def load_flow(root: Path, spec: DeploymentSpec, source: Path | None = None) -> Any:
    """The flow object an entrypoint names: a module path (``pkg.mod.flow``, imported from
    the installed package) or ``file.py:flow`` relative to ``root``."""
    from prefect.exceptions import MissingFlowError, ScriptError
    from prefect.flows import Flow, load_flow_from_entrypoint

    where = f"{source or root / PROJECT_FILE}: deployment {spec.name!r}: entrypoint"
    entry = spec.entrypoint
    if not _is_module_path(entry):
        file_part, sep, func = entry.rpartition(":")
        if not sep or not file_part.endswith(".py") or not func:
            raise InputError(
                f"{where} {entry!r} is not 'path/to/file.py:flow_function' or 'package.module.flow'"
            )
        if not (root / file_part).is_file():
            raise InputError(f"{where} {entry!r}: no file {root / file_part}")
        # a package file is imported as its module: the flow object (and the deployment's
        # entrypoint) is then the installed package's, not a copy loaded from a path
        entry = module_entrypoint(root, entry)
    with contextlib.chdir(root):
        try:
            obj = load_flow_from_entrypoint(entry, use_placeholder_flow=False)
        except (MissingFlowError, AttributeError, ModuleNotFoundError) as exc:
            raise InputError(f"{where} {spec.entrypoint!r}: {exc}".rstrip(". ")) from None
        except ScriptError as exc:
            cause = exc.user_exc if hasattr(exc, "user_exc") else exc
            raise InputError(
                f"{where} {spec.entrypoint!r}: the file does not import: {cause!r}"
            ) from None
    if not isinstance(obj, Flow):
        raise InputError(f"{where} {spec.entrypoint!r} is not a Prefect flow")
    return obj


def module_entrypoint(root: Path, entrypoint: str) -> str:
    """``pkg/mod.py:flow`` as ``pkg.mod.flow`` when that file is an importable module.

    Prefect's engine copies the folder of a file entrypoint into the flow run's working
    directory before it runs it (the whole project, virtual environment included); a module
    entrypoint is imported from the installed package instead, on the server's machine or a
    worker's. Files outside any package stay file entrypoints.
    """
    file_part, _, func = entrypoint.rpartition(":")
    path = (root / file_part).resolve()
    parts = [path.stem]
    folder = path.parent
    while (folder / "__init__.py").is_file():
        parts.insert(0, folder.name)
        folder = folder.parent
    if len(parts) < 2:
        return entrypoint
    module = ".".join(parts)
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None or Path(spec.origin).resolve() != path:
        return entrypoint
    return f"{module}.{func}"


def _settings_parameters(settings: Any, config_overrides: dict[str, Any]) -> dict[str, Any]:
    config = settings.run_config().model_dump(mode="json")
    merged = {**config, **config_overrides}
    try:
        config = RunConfig.model_validate(merged).model_dump(mode="json")
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        raise InputError(f"parameters.config.{where}: {err['msg']}") from None
    return {
        "config": config,
        "store_path": str(Path(settings.store_path).resolve()),
        "cache_dir": (
            str(Path(settings.cache_dir).resolve() / "llm") if settings.llm.cache else None
        ),
        "clusters_dir": str(Path(settings.clusters_dir).resolve()),
        "concurrency": settings.run.llm.max_concurrency,
        "task_runner": settings.runner.kind,
        "task_runner_address": settings.runner.address,
        "task_runner_workers": settings.runner.workers,
    }


def flow_parameters(flow: Any, spec: DeploymentSpec, settings: Any, source: Path) -> dict[str, Any]:
    """The parameters a deployment runs its flow with: the file's, then the settings'."""
    signature = inspect.signature(flow.fn)
    taken = set(signature.parameters)
    where = f"{source}: deployment {spec.name!r}"
    unknown = sorted(set(spec.parameters) - taken)
    if unknown:
        raise InputError(
            f"{where}: parameters {unknown} are not parameters of flow {flow.name!r} "
            f"(it takes: {', '.join(signature.parameters)})"
        )
    file_params = dict(spec.parameters)
    overrides = file_params.pop("config", None) or {}
    if not isinstance(overrides, dict):
        raise InputError(f"{where}: parameters.config must be a mapping of RunConfig fields")
    try:
        from_settings = _settings_parameters(settings, overrides)
    except InputError as exc:
        raise InputError(f"{where}: {exc}") from None
    out: dict[str, Any] = {}
    for name, param in signature.parameters.items():
        if name in file_params:
            value = file_params[name]
            if name.endswith(("_dir", "_path")) and isinstance(value, str):
                value = str(Path(value).resolve())  # relative to where `synth deploy` runs
            out[name] = value
        elif name == "api_key":
            continue  # a secret: read from the environment where the flow runs
        elif name in from_settings:
            out[name] = from_settings[name]
        elif param.default is inspect.Parameter.empty:
            raise InputError(
                f"{where}: flow {flow.name!r} needs parameter {name!r}; set it under "
                "`parameters:` in the file"
            )
    return out


def build_deployments(
    project: Path | str | None, settings: Any, names: Sequence[str] | None = None
) -> list[Any]:
    """``RunnerDeployment``s (Prefect's ``Flow.to_deployment``) for the deployments of
    ``project`` (default: the packaged definitions), all or those in ``names``."""
    from prefect.schedules import Schedule
    from prefect.types.entrypoint import EntrypointType

    project = Path(project).resolve() if project is not None else packaged()
    root = project.parent
    specs = load_project(project)
    if names:
        missing = sorted(set(names) - {s.name for s in specs})
        if missing:
            known = ", ".join(s.name for s in specs)
            raise InputError(f"{project}: no deployment named {missing}; it has: {known}")
        specs = [s for s in specs if s.name in names]
    out = []
    for spec in specs:
        flow = load_flow(root, spec, project)
        params = flow_parameters(flow, spec, settings, project)
        schedules = [
            Schedule(cron=s.cron, timezone=s.timezone, active=s.active) for s in spec.schedules
        ]
        # a flow of an importable module runs from the installed package (Prefect's engine
        # copies the folder of a file entrypoint into the flow run's working directory);
        # a flow in a loose file runs from that file, relative to the project's folder
        in_package = "." in flow.fn.__module__ and flow.fn.__module__ != "__main__"
        kind = EntrypointType.MODULE_PATH if in_package else EntrypointType.FILE_PATH
        with contextlib.chdir(root):
            deployment = flow.to_deployment(
                name=spec.name,
                description=spec.description,
                schedules=schedules or None,
                parameters=params,
                tags=spec.tags,
                concurrency_limit=spec.concurrency_limit,
                work_pool_name=spec.work_pool.name if spec.work_pool else None,
                entrypoint_type=kind,
            )
        out.append(deployment)
    return out


def register(deployments: Sequence[Any], work_pool: str | None = None) -> dict[str, str]:
    """Register deployments with the Prefect API (``PREFECT_API_URL``); their ids by name.

    Without a work pool a deployment runs where ``synth serve`` serves it; with one, a
    ``prefect worker start --pool NAME`` started in the project folder runs it.
    """
    from prefect.client.orchestration import get_client
    from prefect.exceptions import ObjectNotFound

    ids: dict[str, str] = {}
    for d in deployments:
        pool = work_pool or d.work_pool_name
        if pool:
            with get_client(sync_client=True) as client:
                try:
                    client.read_work_pool(pool)
                except ObjectNotFound:
                    from prefect.client.schemas.actions import WorkPoolCreate

                    client.create_work_pool(WorkPoolCreate(name=pool, type="process"))
                    log.info("created process work pool %s", pool)
        ids[d.full_name] = str(d.apply(work_pool_name=pool))
    return ids


def serve(deployments: Sequence[Any], *, limit: int | None = None) -> None:
    """Serve deployments from this process until interrupted (``prefect.serve``)."""
    from prefect import serve as prefect_serve

    prefect_serve(*deployments, limit=limit, print_starting_message=False)
