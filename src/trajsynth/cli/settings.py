"""Settings: one TOML file plus ``SYNTH_...`` environment overrides.

This is the only module that reads the environment. The CLI builds ``Settings``, then a
``RunConfig`` (a plain schema stored with the run), and passes typed values down.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, SecretStr, ValidationError
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from trajsynth.schemas import (
    Budgets,
    CurationConfig,
    InputError,
    LLMConfig,
    RolloutMode,
    RunConfig,
    SandboxKind,
    SandboxLimits,
    TreeConfig,
)

__all__ = ["DEFAULT_CONFIG_FILE", "Settings", "default_toml", "load_settings"]

DEFAULT_CONFIG_FILE = Path("synth.toml")


class LLMSettings(LLMConfig):
    """``[llm]``: every ``LLMConfig`` knob with its one default, plus process-level ones."""

    # Read from SYNTH_LLM__API_KEY (or OPENAI_API_KEY through the CLI); never stored or logged.
    api_key: SecretStr | None = None
    cache: bool = True

    def config(self) -> LLMConfig:
        """The run's part (no key, no process settings): what the run id hashes."""
        return LLMConfig(**self.model_dump(include=set(LLMConfig.model_fields)))


_RUN = RunConfig.model_fields


class RunSettings(Budgets):
    """``[run]``: the run's knobs (their one default is RunConfig's), its budgets (a
    ``Budgets``), and where its rollouts run."""

    tasks: int = Field(default=_RUN["tasks"].default, ge=1)
    clusters: list[str] = Field(default_factory=list)
    seed: int = _RUN["seed"].default
    rounds: int = Field(default=_RUN["rounds"].default, ge=1)
    samples: int = Field(default=_RUN["samples"].default, ge=1)
    rollout: RolloutMode = _RUN["rollout_mode"].default
    planner_retries: int = Field(default=_RUN["planner_retries"].default, ge=0)
    assistant_tool_choice: Literal["auto", "required"] | None = None
    assistant_tool_choice_after_tool: Literal["auto", "none"] | None = None
    # Where a round's rollouts run (flows/runners.py); not in RunConfig, so not in the run id.
    task_runner: Literal["thread", "dask", "ray"] = "thread"
    task_runner_address: str | None = None  # tcp://scheduler:8786 (dask), ray://head:10001
    task_runner_workers: int = Field(default=2, ge=1)

    def budgets(self) -> Budgets:
        return Budgets(**self.model_dump(include=set(Budgets.model_fields)))


class SandboxSettings(SandboxLimits):
    """``[sandbox]``: the ``SandboxLimits`` knobs, the sandbox kind and the warm pool."""

    kind: SandboxKind = RunConfig.model_fields["sandbox"].default
    pool: int = Field(default=RunConfig.model_fields["sandbox_pool"].default, ge=0)

    def limits(self) -> SandboxLimits:
        return SandboxLimits(**self.model_dump(include=set(SandboxLimits.model_fields)))


class Settings(BaseSettings):
    """Every setting, with its default. ``synth init`` writes these as a commented TOML file."""

    model_config = SettingsConfigDict(
        env_prefix="SYNTH_", env_nested_delimiter="__", extra="forbid", toml_file=None
    )

    store_path: Path = Path("data/synth.duckdb")
    clusters_dir: Path = Path("data/clusters")
    cache_dir: Path = Path("data/cache")
    # the dataset card's `license` (a Hub license id: apache-2.0, cc-by-4.0, ...); "other"
    # until the owner of the run picks one, since the data's terms follow the LLM's
    dataset_license: str = "other"
    llm: LLMSettings = Field(default_factory=LLMSettings)
    run: RunSettings = Field(default_factory=RunSettings)
    sandbox: SandboxSettings = Field(default_factory=SandboxSettings)
    tree: TreeConfig = Field(default_factory=TreeConfig)
    curation: CurationConfig = Field(default_factory=CurationConfig)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        toml = TomlConfigSettingsSource(settings_cls)
        return (init_settings, env_settings, toml)

    def run_config(self, **overrides: Any) -> RunConfig:
        """The RunConfig for a run: these settings plus command-line overrides."""
        run = self.run.model_copy(update={k: v for k, v in overrides.items() if v is not None})
        return RunConfig(
            tasks=run.tasks,
            clusters=list(run.clusters),
            seed=run.seed,
            rounds=run.rounds,
            samples=run.samples,
            rollout_mode=run.rollout,
            tree=self.tree,
            curation=self.curation,
            llm=self.llm.config(),
            budgets=run.budgets(),
            sandbox=self.sandbox.kind,
            sandbox_pool=self.sandbox.pool,
            sandbox_limits=self.sandbox.limits(),
            planner_retries=run.planner_retries,
            assistant_tool_choice=run.assistant_tool_choice,
            assistant_tool_choice_after_tool=run.assistant_tool_choice_after_tool,
        )


def _describe_error(err: dict[str, Any], source: str) -> str:
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
# SYNTH_STORE_PATH, SYNTH_LLM__BASE_URL, SYNTH_RUN__TASKS, SYNTH_SANDBOX__KIND, ...
# Secrets (SYNTH_LLM__API_KEY) belong in the environment, never in this file.

store_path = "data/synth.duckdb"   # the DuckDB store
clusters_dir = "data/clusters"     # outside MCP servers added with `synth clusters add`
cache_dir = "data/cache"           # LLM response cache (a re-run costs nothing)
dataset_license = "other"          # `license` on the exported dataset card (a Hub license id)

[llm]
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
timeout_s = 120.0
max_retries = 3              # openai client retries on 429, 5xx and timeouts (honours Retry-After)
cache = true

[run]
tasks = 20                   # blueprints per round (about half pass the planner's checks)
clusters = []                # empty: every registered cluster
seed = 0
rounds = 1
samples = 4                  # rollouts per task: the leaves of its tree (or linear samples)
rollout = "tree"             # tree: shared prefixes, branches where the policy is uncertain;
                             # linear: independent samples (the baseline)
max_turns = 6                # assistant turns per rollout
max_tool_calls = 12
max_tokens = 6000            # generated tokens per rollout
# max_run_tokens = 2000000   # generated tokens for all rollouts of a run, split evenly
tool_timeout_s = 20.0
planner_retries = 1           # LLM drafts of the words after the first; then a template
# assistant_tool_choice = "auto"   # after a user message: auto | required; unset: required for
                                   # the embedded SmolLM2 (it rarely calls tools under auto)
# assistant_tool_choice_after_tool = "auto"   # after tool results: auto | none; unset: none
                                              # for the embedded SmolLM2 (it repeats calls)
task_runner = "thread"       # where a round's rollouts run: thread | dask | ray
# task_runner_address = "tcp://10.0.0.5:8786"   # an existing Dask scheduler (or ray://head:10001);
                                                # unset: a local cluster started with the run
task_runner_workers = 2      # threads, or local Dask worker processes

[tree]                       # how rollout trees grow (METHODS.md §9)
max_children = 3             # children per node
max_nodes = 64               # nodes per tree
max_tree_tokens = 24000      # generated tokens per tree
root_fraction = 0.5          # share of the leaf budget sampled at the root (ARPO's M/2)
alpha = 0.5                  # branch probability P_t = alpha + beta*dH after a tool result
alpha_after_user = 0.25      # ... and after a user reply
beta = 0.2
rho = 0.5                    # P_t *= rho^c, c = consecutive branching ancestors (AEPO)
prune = true                 # cut dead ends (repeated failing call, loop, no progress)

[curation]                   # signals, topology, diversity, selection (METHODS.md §5-§8)
embeddings = true            # all-MiniLM-L6-v2 digest embeddings (modes, near-duplicates);
                             # false: rule-label modes, exact duplicates only
embed_max_chars = 256        # digest characters embedded (each distinct text once, cached)
embed_max_tokens = 64        # word pieces the model reads (cost grows with it)
embed_batch_size = 128
# embed_threads = 2          # torch threads while embedding (unset: measured once per machine)
duplicate_cosine = 0.95      # near-duplicate digest cosine (§5.4)
soft_merge = "off"           # off | difflib | embedding: merge near-equal observations (§1.2)
soft_merge_threshold = 0.95
mode_min_fit = 500           # digests needed before a k-means mode codebook (else rule labels)
mode_min_cosine = 0.5        # below this cosine to every centroid a digest is unassigned
mode_max_fit = 2000          # digests the k-means codebook is fitted on (a seeded sample)
evolution = true             # move the next round's sampling toward rare cells (§6)

[curation.sft]               # SFT selection (§8): sft_score = w_rec*rec + w_eff*eff + w_novelty*nov
w_rec = 1.0
w_eff = 1.0
w_novelty = 0.5
k_sft = 2                    # trajectories per task
distinct_signatures = true
# max_total = 1000           # cap over all tasks

[curation.rl]                # RL selection (§8): tasks with 0 < p < 1, top rl_fraction by rl_score
rl_fraction = 0.5
min_rollouts = 2
# max_tasks = 500

[curation.evolution_params]  # §6 update rule
alpha0 = 0.5
lam = 1.0
beta = 2.0
eta = 1.0
delta = 0.5
temperature = 2.0
kappa = 5.0
eps_floor = 0.05

[sandbox]
kind = "auto"                # docker | local | auto (docker when the engine and image are there)
memory_mb = 512
pids = 128
cpus = 1.0
timeout_s = 30.0
disk_mb = 256                # work directory size (a tmpfs; in Docker charged to memory_mb)
tmp_mb = 64                  # /tmp size
pool = 4                     # warm sandboxes kept per process, reset between episodes (0: off)
allow_unsafe_local_sandbox = false   # true: LocalSandbox runs model code even where it cannot
                                     # enforce every limit (`synth doctor` lists which)
"""
