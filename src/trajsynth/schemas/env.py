"""What the verifier sees of an environment: its canonical final state."""

from __future__ import annotations

from pydantic import Field

from trajsynth.schemas._base import JsonValue, Record
from trajsynth.schemas.tools import ServerSpec

__all__ = ["EnvSpec", "EnvState"]


class EnvState(Record):
    """The canonical state of one environment at one moment.

    ``tables`` is the cluster's state as rows (sorted, volatile columns removed) and
    ``state_hash`` its hash, so two environments in the same state have the same hash.
    ``checks`` holds results of checks run inside the sandbox (code tests), by check id.
    """

    state_hash: str
    tables: dict[str, list[dict[str, JsonValue]]] = Field(default_factory=dict)
    checks: dict[str, bool] = Field(default_factory=dict)
    readable: bool = True


class EnvSpec(Record):
    """Enough to rebuild a task's environment anywhere: the RL dataset carries it."""

    cluster_id: str
    seed: int
    initial_state_id: str
    # outside clusters: what rebuilds the server (command or URL, reset mode, copied files by
    # content hash, the names of its environment variables; never their values)
    server: ServerSpec | None = None
