"""RunConfig: the plain, hashable description of one run (stored with it, hashed into ids)."""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import Field

from trajsynth.schemas._base import Record, stable_hash
from trajsynth.schemas.curation import CurationConfig
from trajsynth.schemas.sandbox import SandboxKind, SandboxLimits

__all__ = [
    "Budgets",
    "JudgeConfig",
    "LLMConfig",
    "PolicyRef",
    "RolloutMode",
    "RunConfig",
    "TreeConfig",
]


class RolloutMode(StrEnum):
    LINEAR = "linear"
    TREE = "tree"


class LLMConfig(Record):
    """Where the LLM is and how to sample. The API key is never part of it."""

    base_url: str | None = Field(default=None, description="None: start the embedded server")
    model: str = "SmolLM2-135M-Instruct"
    temperature: float = Field(default=0.3, ge=0.0, le=2.0)
    top_p: float = Field(default=0.95, gt=0.0, le=1.0)
    max_tokens: int = Field(default=256, ge=1)
    logprobs: bool = True
    top_logprobs: int = Field(default=5, ge=0, le=20)
    max_concurrency: int = Field(default=2, ge=1)
    requests_per_minute: int | None = Field(default=None, ge=1)
    tokens_per_minute: int | None = Field(default=None, ge=1)
    timeout_s: float | None = Field(
        default=None,
        gt=0,
        description=(
            "seconds one try of a request may take before it is retried (every try); None: "
            "adapted to the server's measured speed (at least 120 s, doubled on each retry)"
        ),
    )
    max_retries: int = Field(default=3, ge=0)
    embedded_ctx: int = Field(
        default=4096,
        ge=512,
        description="context of the embedded server (base_url None); not part of the run id",
    )
    embedded_deterministic: bool = Field(
        default=False,
        description=(
            "the embedded server evaluates every request from an empty context, with no prompt "
            "cache, so a seeded request's answer does not depend on the requests before it (a "
            "resumed run then ends with an uninterrupted run's ids); slower; not part of the "
            "run id"
        ),
    )
    distractors: int | None = Field(
        default=None,
        ge=0,
        description=(
            "None: every tool, unless the list does not fit the context (then the tools a "
            "task needs plus the nearest few); N: always the needed tools plus the N nearest "
            "(agents.context), so training rows and evals show the model the same short list"
        ),
    )


class Budgets(Record):
    max_turns: int = Field(default=6, ge=1, description="assistant turns per rollout")
    max_tool_calls: int = Field(default=12, ge=0)
    max_tokens: int = Field(default=6000, ge=1, description="generated tokens per rollout")
    max_run_tokens: int | None = Field(
        default=None,
        ge=1,
        description=(
            "generated tokens for all rollouts of a run; split evenly over its trees (or linear "
            "rollouts) up front, so the split is the same after a resume"
        ),
    )
    tool_timeout_s: float = Field(default=20.0, gt=0)


class TreeConfig(Record):
    """How a rollout tree grows (methods.md §9.1, §9.2, §9.6); ``samples`` is its leaf budget."""

    max_children: int = Field(default=3, ge=1, description="children per node")
    max_nodes: int = Field(default=64, ge=2, description="nodes per tree, root included")
    max_tree_tokens: int = Field(default=24_000, ge=1, description="generated tokens per tree")
    root_fraction: float = Field(
        default=0.5, gt=0.0, le=1.0, description="share of the leaf budget sampled at the root"
    )
    alpha: float = Field(default=0.5, ge=0.0, le=1.0, description="P_t base after a tool result")
    alpha_after_user: float = Field(
        default=0.25, ge=0.0, le=1.0, description="P_t base after a user reply"
    )
    beta: float = Field(default=0.2, ge=0.0, le=1.0, description="P_t slope in dH")
    rho: float = Field(default=0.5, gt=0.0, le=1.0, description="AEPO decay per branching ancestor")
    deterministic: bool = Field(
        default=False, description="branch iff P_t > tau (tests) instead of u < P_t"
    )
    tau: float = Field(default=0.5, ge=0.0, le=1.0)
    candidates: int = Field(
        default=3, ge=2, description="m candidate actions when the backend gives no logprobs"
    )
    prune: bool = Field(default=True, description="cut dead-end branches from cheap signals")


class PolicyRef(Record):
    """A tuned policy serving the assistant role of a run: the model path as
    given, the GGUF the embedded server loads, and its ``models`` row when it has one."""

    path: str = Field(description="the policy as given: a .gguf, a HF model folder, embedded")
    gguf: str = Field(description="the GGUF its llama.cpp server loads")
    model_id: str | None = Field(default=None, description="its models row, when trained here")


DEFAULT_RUBRIC = (
    "You review one conversation between a user and a tool-using assistant, for use as a "
    "training example. Accept it only if: the outcome the user asked for was reached; no "
    "tool call is junk (unknown tools, broken arguments, made-up tool results, pointless "
    "repeats); the user was answered in words; and the answer is faithful to the tool "
    "results. Reply with one line: SCORE: <a number from 0 to 1>, then one short reason."
)


class JudgeConfig(Record):
    """``[run.judge]``: an optional model judge (any OpenAI-compatible endpoint) that scores
    every judged trajectory against a rubric. Its score is stored beside the verdict; it
    changes ``passed`` only when ``decides`` is set (docs/verification.md)."""

    enabled: bool = False
    base_url: str | None = Field(
        default=None, description="the judge's endpoint; None: the run's own LLM endpoint"
    )
    model: str | None = Field(default=None, description="None: the run's model")
    api_key_env: str | None = Field(
        default=None, description="the environment variable holding its API key (never stored)"
    )
    rubric: str = DEFAULT_RUBRIC
    threshold: float = Field(default=0.5, ge=0.0, le=1.0, description="accept at or above")
    decides: bool = Field(
        default=False,
        description="a trajectory passes only if the judge also accepts it (off: stored only)",
    )
    max_tokens: int = Field(default=128, ge=8)
    timeout_s: float = Field(default=120.0, gt=0)


# About half the first draws on the bundled clusters were rejected before the path binder
# learnt which values a tool accepts; three attempts per task asked leave room for that.
PLAN_ATTEMPTS_PER_TASK = 3


class RunConfig(Record):
    tasks: int = Field(default=20, ge=1, description="blueprints per round")
    clusters: list[str] = Field(default_factory=list, description="empty: every cluster")
    seed: int = 0
    rounds: int = Field(default=1, ge=1)
    samples: int = Field(
        default=4, ge=1, description="rollouts per task: leaves of its tree, or linear samples"
    )
    rollout_mode: RolloutMode = RolloutMode.TREE
    tree: TreeConfig = Field(default_factory=TreeConfig)
    curation: CurationConfig = Field(default_factory=CurationConfig)
    llm: LLMConfig = Field(default_factory=LLMConfig)
    budgets: Budgets = Field(default_factory=Budgets)
    sandbox: SandboxKind = SandboxKind.AUTO
    sandbox_limits: SandboxLimits = Field(default_factory=SandboxLimits)
    sandbox_pool: int = Field(
        default=4,
        ge=0,
        description="started sandboxes kept warm per process and reused, reset between "
        "episodes (0: a new sandbox per episode); not part of the run id",
    )
    planner_retries: int = Field(default=1, ge=0)
    plan_attempts: int | None = Field(
        default=None,
        ge=1,
        description=(
            "planning attempts per round, redraws of rejected blueprints included (at least "
            "tasks); None: three per task"
        ),
    )
    user_resamples: int = Field(
        default=3,
        ge=0,
        description=(
            "draws of a user turn after one that failed the simulator checks (echo, role "
            "break, leak), each with another seed and a higher temperature; then the turn is "
            "written from the blueprint"
        ),
    )
    user_stop_when_met: bool | None = Field(
        default=None,
        description=(
            "the simulated user thanks and stops, without a draw, once the goal's "
            "mid-dialogue checks hold after an answer in words (a person leaves when served; "
            "a small user model rarely writes the stop marker); the judge still verifies the "
            "whole trajectory, end state included. None: on for the embedded SmolLM2 user (it "
            "never writes the marker), off for an endpoint's model"
        ),
    )
    assistant_tool_choice: Literal["auto", "required"] | None = Field(
        default=None,
        description=(
            "tool_choice on assistant turns that follow a user message; None: 'required' for "
            "the embedded SmolLM2 (it almost never calls a tool under 'auto'), else 'auto'"
        ),
    )
    assistant_tool_choice_after_tool: Literal["auto", "none"] | None = Field(
        default=None,
        description=(
            "tool_choice right after tool results; None: 'none' for the embedded SmolLM2 (it "
            "repeats calls instead of answering), else 'auto'"
        ),
    )
    policy: PolicyRef | None = Field(
        default=None,
        description="a tuned policy for the assistant role on its own llama.cpp server; "
        "None: the assistant uses the run's model like the other roles",
    )
    judge: JudgeConfig = Field(
        default_factory=JudgeConfig, description="the optional model judge (off by default)"
    )

    def plan_budget(self) -> int:
        """Planning attempts one round may make, redraws included (at least one per task):
        ``plan_attempts``, else ``PLAN_ATTEMPTS_PER_TASK`` per task."""
        if self.plan_attempts is not None:
            return max(self.plan_attempts, self.tasks)
        return PLAN_ATTEMPTS_PER_TASK * self.tasks

    def config_hash(self) -> str:
        # how sandboxes are recycled changes no result, so a run resumes across pool sizes;
        # the embedded server's context size stays out of the id too, so runs begun before
        # it mattered keep resuming, although a prompt too long for it now ends its rollout
        # as context_limit (a judged result): resume with the size the run began with.
        # Deterministic evaluation changes only whether the answers repeat, so a run begun
        # without it can be resumed with it
        exclude = {"sandbox_pool": True, "llm": {"embedded_ctx", "embedded_deterministic"}}
        dump = self.model_dump(mode="json", exclude=exclude)
        if dump["policy"] is None:  # runs from before --policy keep their ids (and resume)
            del dump["policy"]
        if dump["llm"]["distractors"] is None:  # likewise for runs from before the option
            del dump["llm"]["distractors"]
        if dump["llm"]["timeout_s"] is None:  # unset hashes as the old default: ids stay
            dump["llm"]["timeout_s"] = 120.0
        if not dump["judge"]["enabled"]:  # the judge off changes no verdict: ids as before
            del dump["judge"]
        if dump["plan_attempts"] is None:  # and before redraws had a configurable budget
            del dump["plan_attempts"]
        if dump["user_stop_when_met"] is None:  # and before a user could stop when served
            del dump["user_stop_when_met"]
        return stable_hash(dump, length=16)
