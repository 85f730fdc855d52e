"""One failure taxonomy for the whole pipeline (docs/design.md, "Rules that hold everywhere").

A *model-facing* failure (``tool``, ``model``) is recorded and counts against the policy.
An *infrastructure* failure is raised, retried, then excluded: never in pass rates, never a
zero reward. A ``simulator`` failure (the user simulator broke its role) is excluded too.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = [
    "FailureClass",
    "InfraError",
    "EnvironmentStartError",
    "InputError",
    "LLMError",
    "MCPServerError",
    "MCPServerStartError",
    "ModelOutputError",
    "SandboxError",
    "SandboxStartError",
    "SandboxTimeout",
    "SimulatorError",
    "TrajsynthError",
    "counts_against_policy",
]


class FailureClass(StrEnum):
    INFRA = "infra"
    SIMULATOR = "simulator"
    TOOL = "tool"
    MODEL = "model"


def counts_against_policy(failure: FailureClass | None) -> bool:
    """Whether a failure of this class may lower a pass rate or a reward."""
    return failure in (FailureClass.TOOL, FailureClass.MODEL)


class TrajsynthError(Exception):
    """Root of every error trajsynth raises on purpose."""

    failure_class: FailureClass | None = None


class InputError(TrajsynthError):
    """Bad user input (config, cluster spec): the message names the file, field or tool."""


class InfraError(TrajsynthError):
    """Raised, never shown to a model; retried, then excluded."""

    failure_class = FailureClass.INFRA


class EnvironmentStartError(InfraError):
    """An environment did not start: its sandbox (``SandboxStartError``) or its MCP server
    (``MCPServerStartError``). Callers that skip a cluster or try elsewhere catch this type;
    the message says why, for people only."""


class SandboxError(InfraError):
    """The sandbox could not start, died, or an operation on it failed."""


class SandboxStartError(SandboxError, EnvironmentStartError):
    """The sandbox could not be created or started (no engine, no image, no cgroup, ...)."""


class SandboxGone(SandboxError):
    """The sandbox is not there to act on: never started, closed, or its container died or
    was removed. Permanent: trying the operation again cannot help (other ``SandboxError``s,
    an operation that failed or broke mid-way in a live sandbox, may be transient)."""


class SandboxTimeout(SandboxError):
    """A command in the sandbox ran past its wall-clock limit and was killed."""


class MCPServerError(InfraError):
    """The MCP server did not start, hung, died, or its transport broke."""


class MCPServerStartError(MCPServerError, EnvironmentStartError):
    """The MCP server did not start: its command is missing, it crashed or never answered
    ``initialize`` within its start timeout."""


class LLMError(InfraError):
    """The LLM server is unreachable, answered 5xx or timed out after retries."""


class SimulatorError(TrajsynthError):
    """The user simulator left its role (spoke as the assistant, leaked hidden facts)."""

    failure_class = FailureClass.SIMULATOR


class ModelOutputError(TrajsynthError):
    """The policy's output could not be used (bad JSON, unknown tool, schema violation)."""

    failure_class = FailureClass.MODEL
