"""Settings: one TOML file plus ``SYNTH_...`` environment overrides.

This is the only module that reads the environment. ``Settings.run`` is the ``RunConfig`` (a
plain schema stored with the run) itself, so every knob of a run is settable from synth.toml
(``[run]``, ``[run.llm]``, ``[run.tree]``, ...) and from ``SYNTH_RUN__...`` variables; the CLI
passes typed values down.
"""

from __future__ import annotations

import json
import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from trajsynth.schemas import Budgets, InputError, RunConfig

__all__ = ["DEFAULT_CONFIG_FILE", "Settings", "default_toml", "load_settings"]

DEFAULT_CONFIG_FILE = Path("synth.toml")


class LLMSettings(BaseModel):
    """``[llm]``: the process's LLM settings; the run's LLM knobs are ``[run.llm]``."""

    model_config = ConfigDict(extra="forbid")

    # Read from SYNTH_LLM__API_KEY (or OPENAI_API_KEY through the CLI); never stored or logged.
    api_key: SecretStr | None = None
    cache: bool = True


class RunnerSettings(BaseModel):
    """``[runner]``: where a round's rollouts run (flows/runners.py); not in the run id."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["thread", "dask", "ray"] = "thread"
    address: str | None = None  # tcp://scheduler:8786 (dask), ray://head:10001
    workers: int = Field(default=2, ge=1)


# Keys of the earlier layout (``[llm] model``, ``[sandbox] kind``, ``[tree]``, ``[run]
# max_turns``, ...), still read: each source's keys are moved to where they live now before
# the sources are merged, so an old synth.toml and old SYNTH_... variables keep working.
_SECTIONS = {"tree": "tree", "curation": "curation", "llm": "llm", "sandbox": "sandbox_limits"}
_SANDBOX = {"kind": "sandbox", "pool": "sandbox_pool"}
_RUN_RENAMED = {"rollout": "rollout_mode"}
_RUNNER = {
    "task_runner": "kind",
    "task_runner_address": "address",
    "task_runner_workers": "workers",
}


def _merge_into(target: dict[str, Any], key: str, values: dict[str, Any]) -> None:
    # a key given in the new place wins over the same key given in the old one
    target[key] = {**values, **(target.get(key) or {})}


def _translate(data: dict[str, Any]) -> dict[str, Any]:
    """One source's settings with the old keys moved to the new layout."""
    out = dict(data)
    run = dict(out.get("run") or {})
    runner = {_RUNNER[k]: run.pop(k) for k in list(run) if k in _RUNNER}
    if runner:
        _merge_into(out, "runner", runner)
    for old, new in _RUN_RENAMED.items():
        if old in run:
            run.setdefault(new, run.pop(old))
    budgets = {k: run.pop(k) for k in list(run) if k in Budgets.model_fields}
    if budgets:
        _merge_into(run, "budgets", budgets)
    for section, field in _SECTIONS.items():
        old = out.get(section)
        if not isinstance(old, dict):
            continue
        old = dict(old)
        if section == "llm":
            keep = {k: old.pop(k) for k in list(old) if k in LLMSettings.model_fields}
            if keep:
                out["llm"] = keep
            else:
                out.pop("llm")
        else:
            out.pop(section)
        if section == "sandbox":
            for key, new in _SANDBOX.items():
                if key in old:
                    run.setdefault(new, old.pop(key))
        if old:
            _merge_into(run, field, old)
    if run or "run" in out:
        out["run"] = run
    return out


class _Translated(PydanticBaseSettingsSource):
    """A settings source whose old keys are moved to the new layout (``_translate``)."""

    def __init__(self, settings_cls: type[BaseSettings], inner: PydanticBaseSettingsSource):
        super().__init__(settings_cls)
        self.inner = inner

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return self.inner.get_field_value(field, field_name)

    def __call__(self) -> dict[str, Any]:
        return _translate(self.inner())


class _EnvSource(EnvSettingsSource):
    def __call__(self) -> dict[str, Any]:
        return _translate({**_legacy_env(os.environ), **super().__call__()})


class _TomlSource(TomlConfigSettingsSource):
    def __call__(self) -> dict[str, Any]:
        return _translate(super().__call__())


def _legacy_env(environ: Mapping[str, str]) -> dict[str, Any]:
    """``SYNTH_SANDBOX__...``, ``SYNTH_TREE__...``, ``SYNTH_CURATION__...``: sections that
    are no longer fields, so the environment source does not read them itself."""
    out: dict[str, Any] = {}
    for name, value in environ.items():
        parts = name.lower().split("__")
        if parts[0] not in ("synth_sandbox", "synth_tree", "synth_curation") or len(parts) < 2:
            continue
        node = out.setdefault(parts[0].removeprefix("synth_"), {})
        for part in parts[1:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = json.loads(value) if value[:1] in "[{" else value
    return out


class Settings(BaseSettings):
    """Every setting, with its default: the run's knobs are a ``RunConfig`` as it is
    (``[run]``, ``[run.llm]``, ``[run.tree]``, ...; one default per knob, RunConfig's), the
    rest belong to this process. ``synth init`` writes these as a commented TOML file."""

    model_config = SettingsConfigDict(
        env_prefix="SYNTH_", env_nested_delimiter="__", extra="forbid", toml_file=None
    )

    store_path: Path = Path("data/synth.duckdb")
    clusters_dir: Path = Path("data/clusters")
    cache_dir: Path = Path("data/cache")
    # the dataset card's `license` (a Hub license id: apache-2.0, cc-by-4.0, ...); "other"
    # until the owner of the run picks one, since the data's terms follow the LLM's
    dataset_license: str = "other"
    run: RunConfig = Field(default_factory=RunConfig)
    llm: LLMSettings = Field(default_factory=LLMSettings)
    runner: RunnerSettings = Field(default_factory=RunnerSettings)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (
            _Translated(settings_cls, init_settings),
            _EnvSource(settings_cls),
            _TomlSource(settings_cls),
        )

    def run_config(self, **overrides: Any) -> RunConfig:
        """The RunConfig for a run: ``run`` with command-line overrides (``None``: not given;
        a dict updates that part, ``llm={"model": ...}``)."""
        data = self.run.model_dump()
        for key, value in overrides.items():
            if isinstance(value, dict):
                data[key] = {**data[key], **{k: v for k, v in value.items() if v is not None}}
            elif value is not None:
                data[key] = value
        return RunConfig.model_validate(data)


def _describe_error(err: Mapping[str, Any], source: str) -> str:
    key = ".".join(str(p) for p in err["loc"])
    value = err.get("input")
    if err["type"] == "extra_forbidden":
        return f"{source}: unknown setting '{key}' (value {value!r}); see `synth init` for all keys"
    return f"{source}: invalid value {value!r} for '{key}': {err['msg']}"


def load_settings(config_path: Path | None = None, **init: Any) -> Settings:
    """Read ``config_path`` (or ``./synth.toml`` when present) and the environment.

    Raises ``InputError`` with one line naming the file, the key, the value and what is allowed.
    """
    path = config_path if config_path is not None else DEFAULT_CONFIG_FILE
    if config_path is not None and not path.is_file():
        raise InputError(f"config file {path} does not exist (write one with `synth init`)")
    source = str(path) if path.is_file() else "environment"
    if path.is_file():
        try:
            tomllib.loads(path.read_text())
        except tomllib.TOMLDecodeError as exc:
            raise InputError(f"{path}: not valid TOML: {exc}") from exc

    class _FileSettings(Settings):
        model_config = SettingsConfigDict(toml_file=path if path.is_file() else None)

    try:
        loaded = _FileSettings(**init)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise InputError(_describe_error(first, source)) from None
    return loaded


def default_toml() -> str:
    """The commented default ``synth.toml`` that ``synth init`` writes."""
    return """\
# trajsynth settings. Every key is optional; environment variables override them:
# SYNTH_STORE_PATH, SYNTH_RUN__TASKS, SYNTH_RUN__LLM__BASE_URL, SYNTH_RUN__SANDBOX, ...
# [run] and its tables are the RunConfig the run is built with (and hashed into its id);
# the rest belongs to this process. Keys of the older layout ([llm] model, [sandbox] kind,
# [tree], [curation], [run] max_turns, ...) are still read.
# Secrets (SYNTH_LLM__API_KEY) belong in the environment, never in this file.

store_path = "data/synth.duckdb"   # the DuckDB store
clusters_dir = "data/clusters"     # outside MCP servers added with `synth clusters add`
cache_dir = "data/cache"           # LLM response cache (a re-run costs nothing)
dataset_license = "other"          # `license` on the exported dataset card (a Hub license id)

[llm]
cache = true                 # answer repeated LLM requests from cache_dir

[runner]                     # where a round's rollouts run (not part of the run id)
kind = "thread"              # thread | dask | ray
# address = "tcp://10.0.0.5:8786"   # an existing Dask scheduler (or ray://head:10001);
                                    # unset: a local cluster started with the run
workers = 2                  # threads, or local Dask worker processes

[run]
tasks = 20                   # blueprints per round (about half pass the planner's checks)
clusters = []                # empty: every registered cluster
seed = 0
rounds = 1
samples = 4                  # rollouts per task: the leaves of its tree (or linear samples)
rollout_mode = "tree"        # tree: shared prefixes, branches where the policy is uncertain;
                             # linear: independent samples (the baseline)
planner_retries = 1          # LLM drafts of the words after the first; then a template
# plan_attempts = 60         # planning attempts per round, redraws included; unset: 3 per task
user_resamples = 3           # draws of a user turn that failed the simulator checks (echo,
                             # role break, leak); then it is written from the blueprint
# user_stop_when_met = true  # the user thanks and stops once the goal's checks hold after an
                             # answer; unset: on for the embedded SmolLM2 (it never writes
                             # the stop marker), off with --base-url
# assistant_tool_choice = "auto"   # after a user message: auto | required; unset: required for
                                   # the embedded SmolLM2 (it rarely calls tools under auto)
# assistant_tool_choice_after_tool = "auto"   # after tool results: auto | none; unset: none
                                              # for the embedded SmolLM2 (it repeats calls)
sandbox = "auto"             # docker | local | auto (docker when the engine and image are there)
sandbox_pool = 4             # warm sandboxes kept per process, reset between episodes (0: off)

[run.budgets]
max_turns = 6                # assistant turns per rollout
max_tool_calls = 12
max_tokens = 6000            # generated tokens per rollout
# max_run_tokens = 2000000   # generated tokens for all rollouts of a run, split evenly
tool_timeout_s = 20.0

[run.llm]
# base_url = "http://127.0.0.1:8000/v1"   # any OpenAI-compatible server (vLLM, hosted);
                                           # unset: start the embedded llama.cpp server
model = "SmolLM2-135M-Instruct"
temperature = 0.3
top_p = 0.95
max_tokens = 256
logprobs = true              # request top-k logprobs (token entropy for tree branching)
top_logprobs = 5             # k of those logprobs
max_concurrency = 2          # requests in flight at once
# requests_per_minute = 60
# tokens_per_minute = 100000
# timeout_s = 60.0           # seconds a request may take before it is retried; unset:
                             # adapted to the server's measured speed (docs/endpoints-timeouts.md)
max_retries = 3              # openai client retries on 429, 5xx and timeouts (honours Retry-After)
embedded_ctx = 4096          # context of the embedded server (not part of the run id)
# distractors = 4            # list the tools a task needs plus the 4 nearest, always (rows
                             # ~2.5x shorter; set the same for synth run, improve and eval)

[run.tree]                   # how rollout trees grow (docs/methods.md §9)
max_children = 3             # children per node
max_nodes = 64               # nodes per tree
max_tree_tokens = 24000      # generated tokens per tree
root_fraction = 0.5          # share of the leaf budget sampled at the root (ARPO's M/2)
alpha = 0.5                  # branch probability P_t = alpha + beta*dH after a tool result
alpha_after_user = 0.25      # ... and after a user reply
beta = 0.2
rho = 0.5                    # P_t *= rho^c, c = consecutive branching ancestors (AEPO)
prune = true                 # cut dead ends (repeated failing call, loop, no progress)

[run.curation]               # signals, topology, diversity, selection (docs/methods.md §5-§8)
embeddings = true            # all-MiniLM-L6-v2 digest embeddings (modes, near-duplicates);
                             # false: rule-label modes, exact duplicates only
embed_max_chars = 256        # digest characters embedded (each distinct text once, cached)
embed_max_tokens = 64        # word pieces the model reads (cost grows with it)
embed_batch_size = 128
# embed_backend = "onnx"     # torch | onnx (ONNX Runtime) | auto: the faster, measured once
# embed_threads = 2          # embedding workers (unset: measured once per machine)
duplicate_cosine = 0.95      # near-duplicate digest cosine (§5.4)
soft_merge = "off"           # off | difflib | embedding: merge near-equal observations (§1.2)
soft_merge_threshold = 0.95
mode_min_fit = 500           # digests needed before a k-means mode codebook (else rule labels)
mode_min_cosine = 0.5        # below this cosine to every centroid a digest is unassigned
mode_max_fit = 2000          # digests the k-means codebook is fitted on (a seeded sample)
evolution = true             # move the next round's sampling toward rare cells (§6)

[run.curation.sft]           # SFT selection (§8): sft_score = w_rec*rec + w_eff*eff + w_novelty*nov
w_rec = 1.0
w_eff = 1.0
w_novelty = 0.5
k_sft = 2                    # trajectories per task
distinct_signatures = true
# max_total = 1000           # cap over all tasks

[run.curation.rl]            # RL selection (§8): tasks with 0 < p < 1, top rl_fraction by rl_score
rl_fraction = 0.5
min_rollouts = 2
# max_tasks = 500

[run.curation.evolution_params]  # §6 update rule
alpha0 = 0.5
lam = 1.0
beta = 2.0
eta = 1.0
delta = 0.5
temperature = 2.0
kappa = 5.0
eps_floor = 0.05

[run.sandbox_limits]
memory_mb = 512
pids = 128
cpus = 1.0
timeout_s = 30.0
disk_mb = 256                # work directory size (a tmpfs; in Docker charged to memory_mb)
tmp_mb = 64                  # /tmp size
allow_unsafe_local_sandbox = false   # true: LocalSandbox runs model code even where it cannot
                                     # enforce every limit (`synth doctor` lists which)

[run.judge]                  # an optional model judge (docs/verification.md); off by default
enabled = false
# base_url = "https://api.example.com/v1"   # unset: the run's own endpoint
# model = "a-strong-model"                 # unset: the run's model
# api_key_env = "JUDGE_API_KEY"            # the variable holding its key (never stored)
threshold = 0.5              # the judge accepts at or above this score
decides = false              # true: `passed` also needs the judge's accept; false: stored only
"""
