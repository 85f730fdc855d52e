"""Records that cross the sandbox boundary."""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field

from trajsynth.schemas._base import Record

__all__ = ["ExecResult", "SandboxKind", "SandboxLimits", "SnapshotHandle"]


class SandboxKind(StrEnum):
    DOCKER = "docker"
    LOCAL = "local"
    AUTO = "auto"


class SandboxLimits(Record):
    memory_mb: int = Field(default=512, ge=32)
    pids: int = Field(default=128, ge=8)
    cpus: float = Field(default=1.0, gt=0)
    timeout_s: float = Field(default=30.0, gt=0, description="default wall-clock limit per exec")
    disk_mb: int = Field(default=256, ge=8, description="size of the work directory")
    tmp_mb: int = Field(default=64, ge=8, description="size of /tmp")
    allow_unsafe_local_sandbox: bool = Field(
        default=False,
        description="let LocalSandbox run where it cannot enforce every limit (see synth doctor)",
    )


class ExecResult(Record):
    exit_code: int
    stdout: str
    stderr: str
    duration_s: float
    timed_out: bool = False


class SnapshotHandle(Record):
    """An opaque reference to a saved work directory, valid for the sandbox that made it."""

    snapshot_id: str
    sandbox_id: str
    method: str = "tar"
