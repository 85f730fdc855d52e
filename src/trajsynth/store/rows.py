"""One pydantic row model per table: the store's DDL, its migrations and ``synth schema`` are
all read from these models, so a column is declared once.

A model's fields are its columns in order; the first is the primary key. The DuckDB type
comes from the annotation (``str`` or a ``StrEnum`` VARCHAR, ``int`` INTEGER, ``float`` DOUBLE,
``bool`` BOOLEAN, ``datetime`` TIMESTAMP, anything nested JSON); ``BigInt`` and ``Vector`` name
the two types an annotation cannot say. Each field's description is the column's meaning. A
record the library stores whole is declared once, in ``schemas/``: its row model is derived from
it (``stored_row``: the record's fields, their descriptions as the columns' meanings, every
column but the key nullable, a StrEnum or Literal as text, anything nested as JSON), or has it
as its base (``schemas.Scores``, ``schemas.MetricValue``).
Every column but the key may be NULL: a row written by an older release lacks later columns.
"""

from __future__ import annotations

import types
from collections.abc import Callable, Mapping
from datetime import datetime
from enum import StrEnum
from typing import (
    TYPE_CHECKING,
    Annotated,
    Any,
    ClassVar,
    Literal,
    Self,
    TypeVar,
    Union,
    cast,
    get_args,
    get_origin,
)

from pydantic import BaseModel, ConfigDict, Field, JsonValue, create_model

from trajsynth.schemas import (
    Blueprint,
    BlueprintAttempt,
    LLMUsage,
    MetricValue,
    ModeCodebookRecord,
    RolloutTree,
    RoundStats,
    Scores,
    Selection,
    Signals,
    TaskTopology,
    ToolCluster,
    ToolEdge,
    ToolSpec,
    Trajectory,
    TrajectoryTopology,
    Verdict,
)
from trajsynth.schemas import Node as TreeNode

__all__ = [
    "RECORD_ROWS",
    "ROW_MODELS",
    "BigInt",
    "Row",
    "Vector",
    "column_types",
    "model_from_row",
    "row_model",
    "stored_row",
]


class _SQLType:
    def __init__(self, sql: str) -> None:
        self.sql = sql


BigInt = Annotated[int, _SQLType("BIGINT")]
_NullableBigInt = Annotated[int | None, _SQLType("BIGINT")]
Vector = Annotated[list[float], _SQLType("FLOAT[]")]
Json = JsonValue


class Row(BaseModel):
    """A stored row. ``__table__`` names its table; the first field is the primary key."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    __table__: ClassVar[str] = ""
    # the schema record the row is derived from (``stored_row``); None: a row of its own
    __record__: ClassVar[type[BaseModel] | None] = None

    @classmethod
    def key(cls) -> str:
        return next(iter(cls.model_fields))

    @classmethod
    def of(cls, record: BaseModel, /, **columns: Any) -> Self:
        """The row of ``record``: its fields that are columns, and ``columns`` (the run, the
        round, what the writer computes). Validated, so a wrong value fails here, not in SQL."""
        data = record.model_dump(mode="json", include=set(cls.model_fields))
        return cls.model_validate({**data, **columns})


ROW_MODELS: dict[str, type[Row]] = {}
# record type -> the row model derived from it: ``Store.read`` takes either
RECORD_ROWS: dict[type[BaseModel], type[Row]] = {}


def _table(name: str) -> Any:
    def register(cls: type[Row]) -> type[Row]:
        cls.__table__ = name
        ROW_MODELS[name] = cls
        return cls

    return register


class StoredRow(Row):
    """A row derived from a record (``stored_row``). Its columns are made at run time, so a
    type checker knows none of them: it sees each as ``Any``; pydantic validates them."""

    if TYPE_CHECKING:

        def __getattr__(self, name: str) -> Any: ...


S = TypeVar("S", bound=StoredRow)


def _derived(table: str, record: type[BaseModel], **options: Any) -> Callable[[type[S]], type[S]]:
    """The class it decorates, as ``stored_row`` derives it from ``record`` for ``table``:
    its name and docstring kept, its body (a docstring) the only thing written by hand."""

    def build(cls: type[S]) -> type[S]:
        model = stored_row(cls.__name__, record, **options)
        model.__doc__ = cls.__doc__
        return cast("type[S]", _table(table)(model))

    return build


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


def _column_annotation(annotation: Any) -> Any:
    """A record field's type as a nullable column: scalars keep theirs, a StrEnum or a
    Literal is text (an older store's value outside today's enum still reads), the rest JSON."""
    if get_origin(annotation) in (Union, types.UnionType):
        args = [a for a in get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return _column_annotation(args[0])
    if get_origin(annotation) is Literal or (
        isinstance(annotation, type) and issubclass(annotation, StrEnum)
    ):
        return str | None
    if annotation in _SCALARS:
        return annotation | None
    return Json


def stored_row(
    name: str,
    record: type[BaseModel],
    *,
    bigint: frozenset[str] = frozenset(),
    key: tuple[str, str] | None = None,
    context: Mapping[str, tuple[Any, str]] | None = None,
    computed: Mapping[str, tuple[Any, str]] | None = None,
    exclude: frozenset[str] = frozenset(),
) -> type[Row]:
    """The row model of a record stored whole: one column per field, in the record's order,
    meaning its field's description; ``bigint`` names the integer columns that outgrow
    INTEGER. The key is the record's first field, or ``key`` (name, meaning) when the
    record holds none (a tool's key is its cluster and name). Columns the record does not
    hold, as ``{name: (type, meaning)}``: ``context`` after the key (the run and round it was
    made in), ``computed`` at the end (what the writer derives: a property, a flag set
    later). ``exclude`` names the record's fields that are not stored (what it carries in
    memory only, such as the LLM calls a blueprint cost, which go to ``llm_calls``)."""
    fields: dict[str, Any] = {}
    if key is not None:
        fields[key[0]] = (str, Field(description=key[1]))
        fields.update({c: (t, _c(meaning)) for c, (t, meaning) in (context or {}).items()})
    for field, info in record.model_fields.items():
        if field in exclude:
            continue
        if not info.description:
            raise TypeError(f"{record.__name__}.{field} has no description (its column meaning)")
        column = _NullableBigInt if field in bigint else _column_annotation(info.annotation)
        if not fields:  # the key: never NULL
            fields[field] = (column, Field(description=info.description))
            fields.update({c: (t, _c(meaning)) for c, (t, meaning) in (context or {}).items()})
        else:
            fields[field] = (column, _c(info.description))
    for field, (column, meaning) in (computed or {}).items():
        fields[field] = (column, _c(meaning))
    model = create_model(name, __base__=StoredRow, __module__=__name__, **fields)
    model.__doc__ = f"``schemas.{record.__name__}`` as stored."
    model.__record__ = record
    if not any(record.model_fields[f].is_required() for f in exclude):
        # the record reads back whole from its row (``Store.read(record)``); one whose
        # required fields live elsewhere (a cluster's tools) reads as its row only
        RECORD_ROWS.setdefault(record, model)
    return model


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


@_derived(
    "clusters",
    ToolCluster,
    computed={
        "n_tools": (int | None, "tools the server lists"),
        "n_edges": (int | None, "edges of the tool dependency graph"),
    },
    # what the cluster's own tables (tools, edges) or its registry entry hold
    exclude=frozenset(
        {"tools", "edges", "seed", "probes", "arg_values", "warnings", "facts", "preconditions"}
    ),
)
class ClusterRow(StoredRow):
    """``schemas.ToolCluster`` as stored."""


@_derived(
    "tools",
    ToolSpec,
    key=("tool_key", "cluster id and tool name"),
    context={"cluster_id": (str | None, "the cluster the tool belongs to")},
    exclude=frozenset({"access_source", "access_evidence", "idempotent", "injected"}),
)
class ToolRow(StoredRow):
    """``schemas.ToolSpec`` as stored."""


@_derived(
    "edges",
    ToolEdge,
    key=("edge_key", "content id of the edge"),
    context={"cluster_id": (str | None, "the cluster of both tools")},
    exclude=frozenset({"evidence"}),
)
class EdgeRow(StoredRow):
    """``schemas.ToolEdge`` as stored."""


# --- planning ------------------------------------------------------------------------------
_PLANNER_ONLY = frozenset({"words_attempts", "reads_before_write", "usage", "refused_paths"})


@_derived(
    "blueprints",
    Blueprint,
    bigint=frozenset({"seed"}),
    context={"run_id": (str | None, "the run that planned it")},
    computed={
        "difficulty": (str | None, "planned difficulty"),
        "path_shape": (str | None, "shape of the planned tool path"),
        "target_mode": (str | None, "the reasoning mode the task calls for"),
    },
    exclude=_PLANNER_ONLY,
)
class BlueprintRow(StoredRow):
    """``schemas.Blueprint`` as stored."""


@_derived(
    "blueprint_attempts",
    BlueprintAttempt,
    bigint=frozenset({"seed"}),
    context={"run_id": (str | None, "the run")},
    exclude=frozenset({"blueprint_id", "words_source", "usage"}),
)
class BlueprintAttemptRow(StoredRow):
    """``schemas.BlueprintAttempt`` as stored."""


# --- rollouts ------------------------------------------------------------------------------
@_derived("trees", RolloutTree, bigint=frozenset({"total_tokens", "generated_tokens"}))
class TreeRow(StoredRow):
    """``schemas.RolloutTree`` as stored."""


@_derived("nodes", TreeNode)
class NodeRow(StoredRow):
    """``schemas.Node`` as stored."""


@_table("final_states")
class FinalStateRow(Row):
    state_hash: str = Field(description="canonical hash of an environment's end state")
    state: Json = _c("the end state")


@_derived(
    "trajectories",
    Trajectory,
    bigint=frozenset({"seed"}),
    computed={
        "n_calls": (int | None, "tool calls"),
        "total_tokens": (_NullableBigInt, "tokens of the rollout, all roles"),
    },
)
class TrajectoryRow(StoredRow):
    """``schemas.Trajectory`` as stored."""


@_derived("verdicts", Verdict)
class VerdictRow(StoredRow):
    """``schemas.Verdict`` as stored."""


# --- curation --------------------------------------------------------------------------------
@_table("scores")
class ScoreRow(Row, Scores):
    """``schemas.Scores`` as stored: its fields are the columns."""

    __record__ = Scores


@_table("metric_values")
class MetricValueRow(Row, MetricValue):
    """``schemas.MetricValue`` as stored: one registered metric's value for one item."""

    __record__ = MetricValue


RECORD_ROWS.update({Scores: ScoreRow, MetricValue: MetricValueRow})


_RUN = {"run_id": (str | None, "the run"), "round": (int | None, "the round")}


@_derived("signals", Signals, context=_RUN)
class SignalRow(StoredRow):
    """``schemas.Signals`` as stored."""


@_derived(
    "task_topology",
    TaskTopology,
    context={**_RUN, "cluster_id": (str | None, "the cluster")},
    computed={
        "in_rl_pool": (bool | None, "selected for the RL dataset"),
        "graph": (Json, "the quotient graph (nodes, edges)"),
    },
)
class TaskTopologyRow(StoredRow):
    """``schemas.TaskTopology`` as stored."""


@_derived("trajectory_topology", TrajectoryTopology, context=_RUN)
class TrajectoryTopologyRow(StoredRow):
    """``schemas.TrajectoryTopology`` as stored."""


@_derived("selections", Selection, context={"run_id": _RUN["run_id"]})
class SelectionRow(StoredRow):
    """``schemas.Selection`` as stored."""


@_derived("round_stats", RoundStats)
class RoundStatsRow(StoredRow):
    """``schemas.RoundStats`` as stored."""


@_derived(
    "mode_codebooks",
    ModeCodebookRecord,
    context={"run_id": _RUN["run_id"], "round": (int | None, "the round it was fitted in")},
    computed={"record": (Json, "the codebook: centres and labels")},
    exclude=frozenset({"modes", "centroids", "min_cosine"}),
)
class ModeCodebookRow(StoredRow):
    """``schemas.ModeCodebookRecord`` as stored."""


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


@_derived(
    "llm_calls",
    LLMUsage,
    key=("call_key", "content id of the call"),
    context={
        "run_id": (str | None, "the run"),
        "trajectory_id": (str | None, "the trajectory it served"),
    },
)
class LLMCallRow(StoredRow):
    """``schemas.LLMUsage`` as stored."""


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
