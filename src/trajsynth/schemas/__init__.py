"""Data contracts: the pydantic models that cross every boundary between stages."""

from trajsynth.schemas._base import JsonValue, Record, canonical_json, content_id, stable_hash
from trajsynth.schemas.blueprint import (
    ArgBinding,
    Blueprint,
    BlueprintAttempt,
    Cell,
    Difficulty,
    GoldCall,
    GoldRun,
    LiteralArg,
    MutationLint,
    PathShape,
    PlannedCall,
    ReasoningMode,
    RefArg,
    SlotArg,
)
from trajsynth.schemas.config import (
    Budgets,
    JudgeConfig,
    LLMConfig,
    PolicyRef,
    RolloutMode,
    RunConfig,
    TreeConfig,
)
from trajsynth.schemas.constraints import (
    AnswerContains,
    AnswerMatches,
    CallPattern,
    CodeTestsPass,
    Constraint,
    ConstraintKind,
    FinalState,
    MaxCalls,
    ObservedField,
    Order,
    ToolCalled,
    ToolNotCalled,
)
from trajsynth.schemas.curation import (
    CurationConfig,
    CurationReport,
    RLSelectConfig,
    RoundStats,
    Selection,
    SelectionKind,
    SFTSelectConfig,
    TaskTopology,
    TrajectoryTopology,
)
from trajsynth.schemas.datasets import RLRow, SFTRow
from trajsynth.schemas.diversity import (
    CACBreakdown,
    CACStep,
    CACWeights,
    CellCatalog,
    DiversityReport,
    DuplicateMark,
    EntropyStats,
    EvolutionParams,
    ModeAssignment,
    ModeCodebookRecord,
    ModeInfo,
    OptionStats,
    RolloutOutcome,
    RoundWeights,
    WeightChange,
    WeightReason,
)
from trajsynth.schemas.env import EnvSpec, EnvState
from trajsynth.schemas.failures import (
    EnvironmentStartError,
    FailureClass,
    InfraError,
    InputError,
    LLMError,
    MCPServerError,
    MCPServerStartError,
    ModelOutputError,
    SandboxError,
    SandboxGone,
    SandboxStartError,
    SandboxTimeout,
    SimulatorError,
    TrajsynthError,
    counts_against_policy,
)
from trajsynth.schemas.messages import FunctionCall, Message, MessageRole, ToolCall
from trajsynth.schemas.registry import Registry
from trajsynth.schemas.rollout import (
    AgentRole,
    LLMUsage,
    Node,
    ObsClass,
    RolloutTree,
    Termination,
    ToolCallRecord,
    Trajectory,
    UsageTotals,
)
from trajsynth.schemas.sandbox import ExecResult, SandboxKind, SandboxLimits, SnapshotHandle
from trajsynth.schemas.scores import MetricScope, MetricValue, Scores
from trajsynth.schemas.signals import Signals
from trajsynth.schemas.tools import (
    BundledCluster,
    CopiedFile,
    DeclaredEdge,
    Domain,
    DomainFacts,
    EdgeOrigin,
    EdgeProposal,
    Precondition,
    ProbeCall,
    ResetMode,
    ServerKind,
    ServerSpec,
    ToolAccess,
    ToolCluster,
    ToolEdge,
    ToolSpec,
)
from trajsynth.schemas.training import AdvantageKind, EarlyStopConfig, LoraSettings, TrainConfig
from trajsynth.schemas.verdict import ConstraintResult, HygieneResult, JudgeResult, Verdict

__all__ = [
    "AgentRole", "AnswerContains", "AnswerMatches", "ArgBinding", "Blueprint",
    "BlueprintAttempt", "Budgets", "BundledCluster", "CallPattern", "Cell", "CodeTestsPass",
    "Constraint", "ConstraintKind", "ConstraintResult", "DeclaredEdge", "Difficulty", "Domain",
    "DomainFacts", "EdgeOrigin", "EdgeProposal", "EnvSpec",
    "EnvState", "ExecResult", "FailureClass", "FinalState", "FunctionCall", "GoldCall",
    "GoldRun", "InfraError", "InputError", "JsonValue", "LLMConfig", "LLMError", "LLMUsage",
    "LiteralArg", "MCPServerError", "MaxCalls", "Message", "MessageRole", "ModelOutputError",
    "MutationLint",
    "Node", "ObsClass", "ObservedField", "Order", "PathShape", "PlannedCall", "PolicyRef",
    "Precondition",
    "RLRow", "RLSelectConfig", "RoundStats",
    "ReasoningMode", "Record", "RefArg", "Registry", "RolloutMode", "RolloutTree", "RunConfig",
    "SFTRow",
    "TreeConfig",
    "SFTSelectConfig", "SandboxError", "SandboxKind", "SandboxLimits", "SandboxTimeout",
    "Scores", "Selection", "SelectionKind", "ServerKind", "ServerSpec", "Signals",
    "SimulatorError", "SlotArg", "SnapshotHandle", "TaskTopology", "Termination", "ToolAccess",
    "ToolCall", "ToolCallRecord", "ToolCalled", "ToolCluster", "ToolEdge", "ToolNotCalled",
    "ToolSpec", "Trajectory", "TrajectoryTopology", "TrajsynthError", "UsageTotals", "Verdict",
    "canonical_json", "content_id", "counts_against_policy", "stable_hash",
    # diversity and evolution (docs/methods.md §5, §6)
    "CACBreakdown", "CACStep", "CACWeights", "CellCatalog", "DiversityReport", "DuplicateMark",
    "EntropyStats", "EvolutionParams", "ModeAssignment", "ModeCodebookRecord", "ModeInfo",
    "OptionStats", "RolloutOutcome", "RoundWeights", "WeightChange", "WeightReason",
    # outside servers
    "CopiedFile", "ProbeCall", "ResetMode",
    # an environment that did not start
    "EnvironmentStartError", "MCPServerStartError", "SandboxStartError",
    # a sandbox that is not there: permanent, never retried
    "SandboxGone",
    # curation wiring
    "CurationConfig", "CurationReport", "MetricScope", "MetricValue",
    # GRPO stage (docs/methods.md §13)
    "AdvantageKind", "EarlyStopConfig", "LoraSettings", "TrainConfig",
    # hygiene and the optional model judge (docs/verification.md)
    "HygieneResult", "JudgeConfig", "JudgeResult",
]  # fmt: skip
