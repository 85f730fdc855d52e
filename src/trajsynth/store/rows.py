"""One pydantic row model per table: the store's DDL, its migrations and ``synth schema`` are
all read from these models, so a column is declared once.

A model's fields are its columns in order; the first is the primary key. The DuckDB type
comes from the annotation (``str`` or a ``StrEnum`` VARCHAR, ``int`` INTEGER, ``float`` DOUBLE,
``bool`` BOOLEAN, ``datetime`` TIMESTAMP, anything nested JSON); ``BigInt`` and ``Vector`` name
the two types an annotation cannot say. Each field's description is the column's meaning. A
record the library builds whole (``schemas.Scores``, ``schemas.MetricValue``) is its own row
model's base, so its columns are declared once, in ``schemas/``.
Every column but the key may be NULL: a row written by an older release lacks later columns.
"""

from __future__ import annotations

import types
from collections.abc import Mapping
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, ClassVar, TypeVar, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from trajsynth.schemas import MetricValue, Scores

__all__ = [
    "ROW_MODELS",
    "BigInt",
    "Row",
    "Vector",
    "column_types",
    "model_from_row",
    "row_model",
]


class _SQLType:
    def __init__(self, sql: str) -> None:
        self.sql = sql


BigInt = Annotated[int, _SQLType("BIGINT")]
Vector = Annotated[list[float], _SQLType("FLOAT[]")]
Json = JsonValue


class Row(BaseModel):
    """A stored row. ``__table__`` names its table; the first field is the primary key."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    __table__: ClassVar[str] = ""

    @classmethod
    def key(cls) -> str:
        return next(iter(cls.model_fields))


ROW_MODELS: dict[str, type[Row]] = {}


def _table(name: str) -> Any:
    def register(cls: type[Row]) -> type[Row]:
        cls.__table__ = name
        ROW_MODELS[name] = cls
        return cls

    return register


def row_model(table: str) -> type[Row]:
    return ROW_MODELS[table]


_SCALARS = {str: "VARCHAR", int: "INTEGER", float: "DOUBLE", bool: "BOOLEAN", datetime: "TIMESTAMP"}


def _sql_type(annotation: Any, metadata: list[Any]) -> str:
    for meta in metadata:
        if isinstance(meta, _SQLType):
            return meta.sql
    if get_origin(annotation) in (Union, types.UnionType):
        args = [a for a in get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return _sql_type(args[0], [])
    if get_origin(annotation) is Annotated:
        base, *meta = get_args(annotation)
        return _sql_type(base, list(meta))
    if isinstance(annotation, type) and issubclass(annotation, StrEnum):
        return "VARCHAR"  # stored as its value, so SQL compares it with a plain string
    return _SCALARS.get(annotation, "JSON")


def column_types(model: type[Row]) -> dict[str, str]:
    """``{column: DuckDB type}`` in the model's field order."""
    return {name: _sql_type(f.annotation, f.metadata) for name, f in model.model_fields.items()}


M = TypeVar("M", bound=BaseModel)


def model_from_row(model: type[M], row: Mapping[str, Any]) -> M:
    """A library model (``Trajectory``, ``Verdict``, ...) from a stored row: the row's
    columns the model lacks and its NULLs (the model's defaults apply) are left out."""
    fields = model.model_fields
    return model.model_validate({k: v for k, v in row.items() if k in fields and v is not None})


def _c(meaning: str) -> Any:
    return Field(default=None, description=meaning)


# --- runs and clusters -------------------------------------------------------------------
@_table("runs")
class RunRow(Row):
    run_id: str = Field(description="hash of the run's config (seeds included)")
    created_at: datetime | None = _c("when the run was first started (UTC)")
    updated_at: datetime | None = _c("last change of state (UTC)")
    state: str | None = _c("running, completed or failed")
    config: Json = _c("the RunConfig the run was built with")
    manifest: Json = _c("versions, model, endpoint, sandbox image, git commit")
    summary: Json = _c("the RunSummary at the end (counts, tokens, time)")


@_table("clusters")
class ClusterRow(Row):
    cluster_id: str = Field(description="the cluster's name")
    domain: str | None = _c("the service domain (shop, calendar, ...)")
    description: str | None = _c("what the cluster's service does")
    source: str | None = _c("bundled, stdio or http")
    server: Json = _c("how the MCP server is started")
    state_readable: bool | None = _c("whether the end state can be read for verification")
    n_tools: int | None = _c("tools the server lists")
    n_edges: int | None = _c("edges of the tool dependency graph")


@_table("tools")
class ToolRow(Row):
    tool_key: str = Field(description="cluster id and tool name")
    cluster_id: str | None = _c("the cluster the tool belongs to")
    name: str | None = _c("the tool's name")
    access: str | None = _c("read or write (whether a call changes state)")
    description: str | None = _c("the tool's description as the server gives it")
    input_schema: Json = _c("JSON schema of the arguments")
    output_schema: Json = _c("JSON schema of the result, where declared")


@_table("edges")
class EdgeRow(Row):
    edge_key: str = Field(description="content id of the edge")
    cluster_id: str | None = _c("the cluster of both tools")
    source: str | None = _c("the tool whose output feeds")
    target: str | None = _c("the tool whose parameter is fed")
    out_field: str | None = _c("the output field of the source")
    in_param: str | None = _c("the parameter of the target")
    score: float | None = _c("how sure the inference is (0-1)")
    origin: str | None = _c("inferred or declared")
    verified: bool | None = _c("seen to work in a gold run")


# --- planning ------------------------------------------------------------------------------
@_table("blueprints")
class BlueprintRow(Row):
    blueprint_id: str = Field(description="content id of the task (its blueprint)")
    run_id: str | None = _c("the run that planned it")
    round: int | None = _c("the round it was planned in (0-based)")
    cluster_id: str | None = _c("the cluster it runs against")
    domain: str | None = _c("the cluster's domain")
    cell: Json = _c("the sampled cell: cluster, path shape, reasoning mode, difficulty")
    difficulty: str | None = _c("planned difficulty")
    path_shape: str | None = _c("shape of the planned tool path")
    target_mode: str | None = _c("the reasoning mode the task calls for")
    initial_state_id: str | None = _c("seed of the environment's starting state")
    tool_path: Json = _c("the planned tool calls, in order")
    slots: Json = _c("values the planned path binds")
    persona: str | None = _c("who the simulated user is")
    goal: str | None = _c("the user's goal in natural words")
    hidden_info: Json = _c("what the user knows and reveals only when asked")
    uses_code_tool: bool | None = _c("whether the task needs the code tool")
    n_writes: int | None = _c("write calls on the planned path")
    gold_run: Json = _c("the planned path executed once: calls, results, end state")
    constraints: Json = _c("the checks that decide success")
    max_turns: int | None = _c("turn budget of a rollout")
    seed: BigInt | None = _c("the planning seed")
    words_source: str | None = _c("llm or template (who wrote the goal)")
    mutation_lint: Json = _c(
        "the mutation lint: wrong variants of the gold run replayed, caught, survived, and the "
        "checks it added (null: not run)"
    )


@_table("blueprint_attempts")
class BlueprintAttemptRow(Row):
    attempt_id: str = Field(description="content id of the attempt")
    run_id: str | None = _c("the run")
    round: int | None = _c("the round")
    cluster_id: str | None = _c("the cluster tried")
    cell: Json = _c("the sampled cell")
    seed: BigInt | None = _c("the attempt's seed")
    accepted: bool | None = _c("whether a blueprint came of it")
    reason: str | None = _c("why it was rejected (a short class)")
    detail: str | None = _c("the rejection's message")


# --- rollouts ------------------------------------------------------------------------------
@_table("trees")
class TreeRow(Row):
    tree_id: str = Field(description="content id of the rollout tree")
    run_id: str | None = _c("the run")
    blueprint_id: str | None = _c("the task")
    round: int | None = _c("the round")
    rollout_mode: str | None = _c("tree or independent samples")
    n_nodes: int | None = _c("nodes grown")
    n_leaves: int | None = _c("finished branches")
    pass_rate: float | None = _c("share of leaves that passed verification")
    total_tokens: BigInt | None = _c("prompt plus completion tokens of the tree")
    wall_s: float | None = _c("seconds to grow it")
    generated_tokens: BigInt | None = _c("completion tokens of the tree")
    n_pruned: int | None = _c("branches cut early")
    n_passed: int | None = _c("leaves that passed")
    budget: Json = _c("the budgets and what was spent")


@_table("nodes")
class NodeRow(Row):
    node_id: str = Field(description="content id of the node")
    tree_id: str | None = _c("its tree")
    parent_id: str | None = _c("the node it branched from (NULL at the root)")
    depth: int | None = _c("turns from the root")
    messages: Json = _c("the messages this node adds")
    calls: Json = _c("the tool calls made at this node, with results")
    usage: Json = _c("tokens and time by role")
    step_entropy: float | None = _c("the policy's token entropy at the step (nats)")
    confidence: float | None = _c("1 - normalised entropy")
    branch_probability: float | None = _c("probability it was branched on")
    n_children: int | None = _c("children grown from it")
    snapshot_id: str | None = _c("the sandbox snapshot its children restore")
    prune_reason: str | None = _c("why its branch was cut (NULL: not cut)")
    value: float | None = _c("mean reward of the leaves below it")
    advantage: float | None = _c("value minus its parent's value")
    process_reward: float | None = _c("the step's reward as a process signal")
    n_leaves: int | None = _c("leaves below it")
    branch: Json = _c("why it branched: signal, candidates")


@_table("final_states")
class FinalStateRow(Row):
    state_hash: str = Field(description="canonical hash of an environment's end state")
    state: Json = _c("the end state")


@_table("trajectories")
class TrajectoryRow(Row):
    trajectory_id: str = Field(description="content id of the rollout (root-to-leaf path)")
    run_id: str | None = _c("the run")
    blueprint_id: str | None = _c("the task")
    tree_id: str | None = _c("its tree")
    leaf_node_id: str | None = _c("the leaf it ends at")
    cluster_id: str | None = _c("the cluster")
    round: int | None = _c("the round")
    seed: BigInt | None = _c("the rollout's seed")
    node_ids: Json = _c("the nodes from root to leaf")
    messages: Json = _c("the conversation, OpenAI chat format")
    tools: Json = _c("the tool schemas the assistant saw")
    calls: Json = _c("every tool call with its result")
    final_answer: str | None = _c("the assistant's last words")
    termination: str | None = _c("why it ended (user stop, max turns, error, ...)")
    failure_class: str | None = _c("infra, simulator, tool or model (NULL: none)")
    failure_detail: str | None = _c("the failure's message")
    attempts: int | None = _c("tries it took (infra retries)")
    usage: Json = _c("tokens and time by role")
    n_turns: int | None = _c("assistant turns")
    user_resamples: int | None = _c(
        "user-simulator draws made again after a reply failed its checks (echo, role, leak)"
    )
    user_scripted: int | None = _c(
        "user turns written from the blueprint without a model (every simulator draw failed)"
    )
    n_calls: int | None = _c("tool calls")
    total_tokens: BigInt | None = _c("tokens of the rollout, all roles")
    final_state_hash: str | None = _c("hash of the end state (final_states)")
    wall_s: float | None = _c("seconds it took")
    source: str | None = _c("rollout (a policy acted it out) or gold (a replayed gold run)")


@_table("verdicts")
class VerdictRow(Row):
    verdict_id: str = Field(description="content id of the verdict")
    trajectory_id: str | None = _c("the trajectory judged")
    results: Json = _c("one result per constraint")
    passed: bool | None = _c(
        "clean and correct: every hard constraint and every hygiene check held (and the model "
        "judge accepted, when set to decide)"
    )
    score: float | None = _c("0.9 x passed + 0.1 x the share of soft constraints that held")
    state_hash: str | None = _c("hash of the end state checked")
    state_diff: Json = _c("end state against the gold run's")
    excluded: bool | None = _c("left out of pass rates (an infra or simulator failure)")
    constraints_passed: bool | None = _c("every hard constraint held (NULL: before hygiene)")
    clean: bool | None = _c("every hygiene check held (NULL: judged before hygiene)")
    hygiene: Json = _c("one result per hygiene check: check, passed, detail")
    recovered: bool | None = _c("clean, with a failed call that a later call corrected")
    judge: Json = _c("the model judge's score and reason (NULL: no judge)")


# --- curation --------------------------------------------------------------------------------
@_table("scores")
class ScoreRow(Row, Scores):
    """``schemas.Scores`` as stored: its fields are the columns."""


@_table("metric_values")
class MetricValueRow(Row, MetricValue):
    """``schemas.MetricValue`` as stored: one registered metric's value for one item."""


@_table("signals")
class SignalRow(Row):
    trajectory_id: str = Field(description="the trajectory")
    run_id: str | None = _c("the run")
    round: int | None = _c("the round")
    misalignment_ratio: float | None = _c("share of turns the user had to correct")
    misalignment: bool | None = _c("misalignment above its threshold")
    efficiency: float | None = _c("planned calls over calls made")
    no_progress: bool | None = _c("steps that changed nothing")
    stagnation: bool | None = _c("the conversation stopped moving")
    disengagement: bool | None = _c("the user gave up")
    satisfaction_count: int | None = _c("satisfaction phrases of the user")
    satisfaction_confidence: float | None = _c("how sure the satisfaction flag is")
    satisfaction: bool | None = _c("the user said the task was done")
    failure_rate: float | None = _c("share of tool calls that failed")
    malformed_calls: int | None = _c("tool calls that did not parse")
    failure: bool | None = _c("failure rate above its threshold")
    repetition_instances: int | None = _c("repeated identical calls")
    loop: bool | None = _c("a call repeated past its threshold")
    exhaustion: bool | None = _c("a budget ran out")
    triage: float | None = _c("how much the trajectory wants a look (0-1)")


@_table("task_topology")
class TaskTopologyRow(Row):
    task_id: str = Field(description="the task (blueprint id)")
    run_id: str | None = _c("the run")
    round: int | None = _c("the round")
    cluster_id: str | None = _c("the cluster")
    n_rollouts: int | None = _c("valid rollouts in the quotient graph")
    n_excluded: int | None = _c("rollouts left out: infra, simulator, no verdict")
    n_success: int | None = _c("rollouts that passed")
    pass_rate: float | None = _c("n_success / n_rollouts (NULL with no valid rollout)")
    n_nodes: int | None = _c("nodes of the quotient graph")
    n_edges: int | None = _c("edges of the quotient graph")
    n_branch_points: int | None = _c("nodes where rollouts part")
    n_branch_edges: int | None = _c("edges leaving branch points")
    n_error_branch_edges: int | None = _c("error edges leaving branch points")
    error_branch_ratio: float | None = _c("error edges over all edges at branch points")
    strategy_entropy: float | None = _c("entropy of the strategy signatures (nats)")
    strategy_entropy_norm: float | None = _c("strategy_entropy over its maximum (0-1)")
    n_signatures: int | None = _c("distinct strategy signatures")
    n_success_strategies: int | None = _c("distinct successful strategies, errors removed")
    shortest_success_len: int | None = _c("fewest edges of a successful path")
    rl_score: float | None = _c("how much signal the task gives GRPO")
    in_rl_pool: bool | None = _c("selected for the RL dataset")
    graph: Json = _c("the quotient graph (nodes, edges)")


@_table("trajectory_topology")
class TrajectoryTopologyRow(Row):
    trajectory_id: str = Field(description="the trajectory")
    run_id: str | None = _c("the run")
    round: int | None = _c("the round")
    task_id: str | None = _c("the task")
    included: bool | None = _c("in its task's quotient graph")
    skip_reason: str | None = _c("why it was left out")
    success: bool | None = _c("passed verification")
    signature: str | None = _c("hash of its strategy signature")
    signature_len: int | None = _c("nodes in the signature")
    path_len: int | None = _c("edges traversed, self-loops included")
    n_errors: int | None = _c("failing calls")
    n_recovered: int | None = _c("failing calls later recovered")
    recovered: bool | None = _c("passed an error and still succeeded")
    efficiency: float | None = _c("shortest success length over its own (successes only)")
    redundancy: float | None = _c("1 - efficiency")


@_table("selections")
class SelectionRow(Row):
    selection_id: str = Field(description="content id of the decision")
    run_id: str | None = _c("the run")
    kind: str | None = _c("sft or rl")
    item_id: str | None = _c("the trajectory (sft) or task (rl)")
    task_id: str | None = _c("the task")
    round: int | None = _c("the round")
    selected: bool | None = _c("whether it made the dataset")
    score: float | None = _c("its selection score")
    rank: int | None = _c("its rank among the candidates")
    reason: str | None = _c("why it was taken or left")
    components: Json = _c("the score's parts")
    config_hash: str | None = _c("hash of the selection config")


@_table("round_stats")
class RoundStatsRow(Row):
    round_key: str = Field(description="run id and round")
    run_id: str | None = _c("the run")
    round: int | None = _c("the round")
    input_hash: str | None = _c("hash of what the round was curated from")
    n_trajectories: int | None = _c("trajectories of the round")
    n_verified: int | None = _c("of which passed")
    n_accepted: int | None = _c("of which counted in the dataset")
    pass_rate: float | None = _c("n_verified over the counted trajectories")
    n_tasks: int | None = _c("tasks of the round")
    domain_entropy: float | None = _c("entropy of the domains (nats), dataset so far")
    domain_entropy_norm: float | None = _c("domain_entropy over its maximum")
    cluster_entropy_norm: float | None = _c("normalised entropy of the clusters")
    reasoning_mode_entropy: float | None = _c("entropy of the reasoning modes (nats)")
    reasoning_mode_entropy_norm: float | None = _c("reasoning_mode_entropy over its maximum")
    action_complexity: float | None = _c("mean cumulative action complexity")
    error_branch_ratio: float | None = _c("mean error branch ratio of the tasks")
    strategic_heterogeneity: float | None = _c("mean normalised strategy entropy")
    n_success_strategies: float | None = _c("mean successful strategies per task")
    n_recovered: int | None = _c("trajectories that recovered from an error")
    n_duplicates: int | None = _c("near-duplicates found")
    n_sft_selected: int | None = _c("trajectories in the SFT selection")
    n_rl_selected: int | None = _c("tasks in the RL selection")
    mode_codebook: str | None = _c("the codebook of the round")
    skips: Json = _c("what was skipped and why")
    timings: Json = _c("seconds per curation stage")
    report: Json = _c("the DiversityReport of the dataset after the round")
    round_report: Json = _c("the DiversityReport of the round alone")
    curation: Json = _c("the CurationReport (counts, skips)")


@_table("mode_codebooks")
class ModeCodebookRow(Row):
    codebook_id: str = Field(description="content id of the codebook")
    run_id: str | None = _c("the run")
    round: int | None = _c("the round it was fitted in")
    version: str | None = _c("codebook version")
    kind: str | None = _c("kmeans or the fallback")
    n_fit: int | None = _c("texts it was fitted on")
    silhouette: float | None = _c("cluster quality (-1 to 1)")
    fallback_reason: str | None = _c("why the fallback was used")
    record: Json = _c("the codebook: centres and labels")


@_table("evolution")
class EvolutionRow(Row):
    change_id: str = Field(description="content id of the weight change")
    run_id: str | None = _c("the run")
    round: int | None = _c("the round the weights are for")
    level: str | None = _c("domain, cluster, path shape, mode or difficulty")
    parent: str | None = _c("the domain, at the cluster level")
    option: str | None = _c("the option weighed")
    n_accepted: int | None = _c("accepted trajectories of the option so far")
    failure_rate: float | None = _c("its informative failure rate")
    validity: float | None = _c("its Laplace-smoothed validity rate")
    weight_old: float | None = _c("its sampling weight before")
    weight_new: float | None = _c("its sampling weight for the round")
    reason: str | None = _c("what moved the weight")
    detail: Json = _c("the whole WeightChange")


@_table("embeddings")
class EmbeddingRow(Row):
    text_hash: str = Field(description="hash of the model id and the text")
    model: str | None = _c("the embedding model")
    vector: Vector | None = _c("the embedding")


@_table("llm_calls")
class LLMCallRow(Row):
    call_key: str = Field(description="content id of the call")
    run_id: str | None = _c("the run")
    trajectory_id: str | None = _c("the trajectory it served")
    role: str | None = _c("planner, user simulator, assistant or verifier")
    model: str | None = _c("the model")
    prompt_tokens: int | None = _c("prompt tokens")
    completion_tokens: int | None = _c("completion tokens")
    latency_s: float | None = _c("seconds to answer")
    cached: bool | None = _c("answered from the cache")


@_table("work_units")
class WorkUnitRow(Row):
    unit_id: str = Field(description="the unit of work (a plan, a rollout, a curation round)")
    run_id: str | None = _c("the run")
    kind: str | None = _c("plan, rollout, curate, ...")
    done_at: datetime | None = _c("when it was committed (UTC)")


@_table("unit_failures")
class UnitFailureRow(Row):
    failure_id: str = Field(description="content id: the run, the unit and which failure it is")
    run_id: str | None = _c("the run")
    round: int | None = _c("the round")
    kind: str | None = _c("plan or rollout")
    unit_id: str | None = _c("the unit of work (its work_units id once it succeeds)")
    blueprint_id: str | None = _c("the task grown (rollout units)")
    cluster_id: str | None = _c("the cluster")
    failure: int | None = _c("which failure of this unit it is (1, 2, ... over reruns)")
    failure_class: str | None = _c("infra, simulator or model; error: an exception of no class")
    error_type: str | None = _c("the exception's type")
    error: str | None = _c("the error, one line")
    attempts: int | None = _c("tries before it was given up (Prefect task retries included)")
    failed_at: datetime | None = _c("when it was given up (UTC)")


# --- the training loop: trained models and their held-out evals ----------------------------
@_table("models")
class ModelRow(Row):
    model_id: str = Field(description="content id: parent, training data, config and method")
    parent: str | None = _c("the model it was trained from (a path, or embedded)")
    path: str | None = _c("the merged HF model folder")
    gguf_path: str | None = _c("the GGUF the embedded llama.cpp server loads")
    method: str | None = _c("lora or full")
    run_ids: Json = _c("runs whose data it was trained on")
    lineage: Json = _c(
        "lineage of the task behind every training row: id, signature, tool path, entities, "
        "goal (training.splits.TaskKey); the leakage check of `synth eval` reads it"
    )
    unresolved: Json = _c("training rows' task ids this store held no blueprint of")
    data_hash: str | None = _c("hash of the training rows")
    n_rows: int | None = _c("training rows")
    n_tokens: BigInt | None = _c("training tokens")
    config: Json = _c("the training config")
    metrics: Json = _c("training loss, steps, seconds, peak memory")
    created_at: datetime | None = _c("when it was trained (UTC)")


@_table("evals")
class EvalRow(Row):
    eval_id: str = Field(description="content id: policy, split, tasks and k")
    model_id: str | None = _c("the models row of the policy, when trained here")
    policy: str | None = _c("the policy evaluated (embedded, or a model path)")
    split: str | None = _c("the split's name")
    split_kind: str | None = _c("held_out_seeds or leave_one_cluster_out")
    k: int | None = _c("tries per task")
    n_tasks: int | None = _c("held-out tasks")
    n_tries: int | None = _c("tries counted")
    n_excluded: int | None = _c("tries excluded (infra or simulator faults)")
    pass1: float | None = _c("pass@1: the mean over tasks of each task's pass rate")
    pass1_low: float | None = _c("pass@1, 95% interval low (bootstrap over tasks)")
    pass1_high: float | None = _c("pass@1, 95% interval high (bootstrap over tasks)")
    passk: float | None = _c("pass@k, unbiased estimator")
    passk_low: float | None = _c("pass@k, 95% interval low (bootstrap over tasks)")
    passk_high: float | None = _c("pass@k, 95% interval high (bootstrap over tasks)")
    clusters: Json = _c("the same figures per cluster")
    n_dropped: int | None = _c("planned tasks dropped: they leak into the policy's training data")
    strata: Json = _c("each task's stratum: new-entities, path-disjoint or loco")
    tries: Json = _c("every try: task, cluster, passed, excluded")
    created_at: datetime | None = _c("when it ran (UTC)")


@_table("improve_rounds")
class ImproveRoundRow(Row):
    """One round of expert iteration (``synth improve``): a run synthesized with a policy,
    what it yielded, and the model trained on it (the next round's policy)."""

    improve_key: str = Field(description="loop id and round: one row per round of a loop")
    loop_id: str | None = _c("content id of the loop: base config, rounds, SFT config")
    round: int | None = _c("0: the base policy; i: the policy trained after round i-1")
    run_id: str | None = _c("the run synthesized in this round")
    policy: str | None = _c("the policy that played the assistant (embedded: the base)")
    policy_model_id: str | None = _c("its models row (None for the base)")
    trained_model_id: str | None = _c("the models row trained on this round's data (None: last)")
    n_trajectories: int | None = _c("trajectories of the run")
    n_passed: int | None = _c("verified (passed, not excluded)")
    n_counted: int | None = _c("counted against the policy (not excluded)")
    pass_rate: float | None = _c("passed over counted: the policy's pass rate this round")
    domain_entropy: float | None = _c("domain entropy of the accepted data (nats)")
    reasoning_mode_entropy: float | None = _c("reasoning-mode entropy of the accepted data")
    tokens_per_verified: float | None = _c("LLM tokens (all roles) per verified trajectory")
    n_rollout_rows: int | None = _c("the run's selected verified trajectories trained on")
    n_gold_rows: int | None = _c("gold demonstrations added (the policy passed almost nothing)")
    created_at: datetime | None = _c("when the round finished (UTC)")
