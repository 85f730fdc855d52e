"""Read-backs: reads a blueprint's final-state check takes at the end of an episode.

An outside server's end state is what its probes answer (``ToolCluster.probes``); a write
they cannot see (a file's content, an entity in a knowledge graph) is invisible to them. The
mutation lint (``planning.mutants``) then searches the cluster's reads for one whose answer the
gold run's writes change and puts it on the blueprint's ``FinalState`` (``probes``). Every
place that takes an episode's end state (the rollout loop, the planner's replays, the RL
environment) reads those calls too and keeps their answers in the state's tables under
``readback_key``, beside the probes' (the state hash stays the probes' own).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from trajsynth.schemas import Constraint, EnvState, FinalState, JsonValue, ProbeCall
from trajsynth.schemas.constraints import readback_key

__all__ = ["listed_resources", "read_backs", "readbacks_of", "with_readbacks"]


async def listed_resources(env: Any) -> list[str]:
    """The static resources ``env``'s server lists (an environment that cannot list them,
    such as a test's in-process one: none)."""
    listing = getattr(env, "list_resources", None)
    return await listing() if listing is not None else []


def readbacks_of(constraints: Sequence[Any]) -> list[ProbeCall]:
    """The read-backs a blueprint's final-state check asks for (one such check per blueprint;
    none: an empty list)."""
    for c in constraints:
        if isinstance(c, FinalState) and c.probes:
            return list(c.probes)
    return []


async def read_backs(
    env: Any, probes: Sequence[ProbeCall]
) -> dict[str, list[dict[str, JsonValue]]]:
    """The answers of ``probes`` now, keyed by ``readback_key`` (``env.read_probes``: the
    same reading, clock and work dir masked, as the cluster's own probes)."""
    if not probes:
        return {}
    reading: EnvState = await env.read_probes(list(probes))
    rows = list(reading.tables.values())  # one table per probe, in their order
    return {readback_key(i, p): rows[i] for i, p in enumerate(probes)}


async def with_readbacks(env: Any, state: EnvState, constraints: Sequence[Constraint]) -> EnvState:
    """``state`` with the answers of the read-backs ``constraints`` ask for."""
    probes = readbacks_of(constraints)
    if not probes:
        return state
    tables = await read_backs(env, probes)
    return state.model_copy(update={"tables": {**state.tables, **tables}})
