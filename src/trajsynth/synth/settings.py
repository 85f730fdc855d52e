"""Settings: one TOML file plus ``SYNTH_...`` environment overrides.

This is the only module that reads the environment. The CLI builds ``Settings``, then a
``RunConfig`` (a plain schema stored with the run), and passes typed values down.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError
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


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class LLMSettings(_Section):
    base_url: str | None = Field(
        default=None, description="OpenAI-compatible endpoint; empty starts the embedded server"
    )
    model: str = "SmolLM2-135M-Instruct"
    # Read from SYNTH_LLM__API_KEY (or OPENAI_API_KEY through the CLI); never stored or logged.
    api_key: SecretStr | None = None
    temperature: float = Field(default=0.3, ge=0.0, le=2.0)
    max_tokens: int = Field(default=256, ge=1)
    logprobs: bool = True
    max_concurrency: int = Field(default=2, ge=1)
    requests_per_minute: int | None = Field(default=None, ge=1)
    tokens_per_minute: int | None = Field(default=None, ge=1)
    timeout_s: float = Field(default=120.0, gt=0)
    max_retries: int = Field(default=3, ge=0)
    cache: bool = True
    embedded_ctx: int = Field(default=4096, ge=512)


class RunSettings(_Section):
    tasks: int = Field(default=20, ge=1)
    clusters: list[str] = Field(default_factory=list)
    seed: int = 0
    rounds: int = Field(default=1, ge=1)
    samples: int = Field(default=4, ge=1)
    rollout: RolloutMode = RolloutMode.TREE
    max_turns: int = Field(default=6, ge=1)
    max_tool_calls: int = Field(default=12, ge=0)
    max_tokens: int = Field(default=6000, ge=1)
    max_run_tokens: int | None = Field(default=None, ge=1)
    tool_timeout_s: float = Field(default=20.0, gt=0)
    planner_retries: int = Field(default=1, ge=0)
    assistant_tool_choice: Literal["auto", "required"] | None = None
    assistant_tool_choice_after_tool: Literal["auto", "none"] | None = None
    # Where a round's rollouts run (flows/runners.py); not in RunConfig, so not in the run id.
    task_runner: Literal["thread", "dask", "ray"] = "thread"
    task_runner_address: str | None = None  # tcp://scheduler:8786 (dask), ray://head:10001
    task_runner_workers: int = Field(default=2, ge=1)


class SandboxSettings(_Section):
    kind: SandboxKind = SandboxKind.AUTO
    memory_mb: int = Field(default=512, ge=32)
    pids: int = Field(default=128, ge=8)
    cpus: float = Field(default=1.0, gt=0)
    timeout_s: float = Field(default=30.0, gt=0)
    pool: int = Field(default=4, ge=0)


class Settings(BaseSettings):
    """Every setting, with its default. ``synth init`` writes these as a commented TOML file."""

    model_config = SettingsConfigDict(
        env_prefix="SYNTH_", env_nested_delimiter="__", extra="forbid", toml_file=None
    )

    store_path: Path = Path("data/synth.duckdb")
    clusters_dir: Path = Path("data/clusters")
    cache_dir: Path = Path("data/cache")
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
        llm = LLMConfig(
            base_url=self.llm.base_url,
            model=self.llm.model,
            temperature=self.llm.temperature,
            max_tokens=self.llm.max_tokens,
            logprobs=self.llm.logprobs,
            max_concurrency=self.llm.max_concurrency,
            requests_per_minute=self.llm.requests_per_minute,
            tokens_per_minute=self.llm.tokens_per_minute,
            timeout_s=self.llm.timeout_s,
            max_retries=self.llm.max_retries,
            embedded_ctx=self.llm.embedded_ctx,
        )
        return RunConfig(
            tasks=run.tasks,
            clusters=list(run.clusters),
            seed=run.seed,
            rounds=run.rounds,
            samples=run.samples,
            rollout_mode=run.rollout,
            tree=self.tree,
            curation=self.curation,
            llm=llm,
            budgets=Budgets(
                max_turns=run.max_turns,
                max_tool_calls=run.max_tool_calls,
                max_tokens=run.max_tokens,
                max_run_tokens=run.max_run_tokens,
                tool_timeout_s=run.tool_timeout_s,
            ),
            sandbox=self.sandbox.kind,
            sandbox_pool=self.sandbox.pool,
            sandbox_limits=SandboxLimits(
                memory_mb=self.sandbox.memory_mb,
                pids=self.sandbox.pids,
                cpus=self.sandbox.cpus,
                timeout_s=self.sandbox.timeout_s,
            ),
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

[llm]
# base_url = "http://127.0.0.1:8000/v1"   # any OpenAI-compatible server (vLLM, hosted);
                                           # unset: start the embedded llama.cpp server
model = "SmolLM2-135M-Instruct"
temperature = 0.3
max_tokens = 256
logprobs = true              # request top-k logprobs (token entropy for tree branching)
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
embed_batch_size = 64
# embed_threads = 2          # torch threads while embedding (unset: min(2, cores))
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
pool = 4                     # warm sandboxes kept per process, reset between episodes (0: off)
"""
