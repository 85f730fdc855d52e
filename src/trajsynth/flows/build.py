"""`build_dataset`: rounds of plan -> rollout trees (verified) -> curate, evolving between.

Runs in Prefect's ephemeral mode by default (no server to start) or under a served
deployment. The LLM endpoint is resolved once here (the embedded llama.cpp server is started
and stopped by this flow); units of work get the resolved endpoint, so they run on any task
runner. With ``config.policy`` a second embedded server serves the tuned policy's GGUF, and
the rollout units send the assistant's turns there (``agents.policy.RoleRoutedLLM``) while
the planner and the user simulator keep the run's model. After each round the curation
stage scores and selects, and evolution sets the next round's sampling weights.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import AsyncIterator
from pathlib import Path

from prefect import flow
from pydantic import SecretStr

from trajsynth.flows.interrupt import rearm
from trajsynth.flows.stages import _clusters, plan_round, rollout_round
from trajsynth.flows.units import run_id_for
from trajsynth.llm.client import open_llm_client
from trajsynth.llm.endpoints import forget_faults
from trajsynth.schemas import LLMConfig, RunConfig, SandboxError, SandboxKind, ToolCluster
from trajsynth.store import Store
from trajsynth.store.manifest import run_manifest
from trajsynth.store.rows import ClusterRow, EdgeRow, Row, ToolRow
from trajsynth.store.summary import RunSummary, summarize_run

__all__ = ["build_dataset", "run_id_for"]

log = logging.getLogger(__name__)


def _sandbox_image(kind: SandboxKind) -> str | None:
    if kind == SandboxKind.LOCAL:
        return None
    try:
        from trajsynth.sandboxes.image import image_id, image_tag

        found = image_id()
    except SandboxError:  # no engine: the manifest records what it can
        return None
    return f"{image_tag()}@{found}" if found else None


def _cluster_rows(clusters: list[ToolCluster]) -> list[Row]:
    rows: list[Row] = []
    for c in clusters:
        rows.append(ClusterRow.of(c, n_tools=len(c.tools), n_edges=len(c.edges)))
        rows += [ToolRow.of(t, tool_key=f"{c.cluster_id}/{t.name}", cluster_id=c.cluster_id)
                 for t in c.tools]  # fmt: skip
        rows += [
            EdgeRow.of(
                e,
                edge_key=f"{c.cluster_id}/{e.source}->{e.target}:{e.out_field}->{e.in_param}",
                cluster_id=c.cluster_id,
            )
            for e in c.edges
        ]
    return rows


def policy_endpoint(config: RunConfig, llm: LLMConfig) -> LLMConfig:
    """How the policy's own server is asked: the run's sampling, the policy's name as the
    model (so ``llm_calls`` rows say which policy answered the assistant's turns)."""
    assert config.policy is not None
    name = config.policy.model_id or Path(config.policy.gguf).stem
    return llm.model_copy(update={"base_url": None, "model": f"policy:{name}"})


@contextlib.asynccontextmanager
async def _served_policy(config: RunConfig, llm: LLMConfig) -> AsyncIterator[LLMConfig | None]:
    """The tuned policy's resolved endpoint on its own embedded llama.cpp server, for the
    run's length (None: no policy; the assistant uses the run's model)."""
    if config.policy is None:
        yield None
        return
    from trajsynth.agents.policy import serve_policy

    async with serve_policy(config.policy.gguf, policy_endpoint(config, llm)) as client:
        yield client.config


def _curate(store: Store, run_id: str, round_index: int, config: RunConfig) -> None:
    from trajsynth.flows.stages import curate_task

    curate_task(str(store.path), run_id, round_index, config)


def _next_weights(
    store: Store, run_id: str, round_index: int, config: RunConfig
) -> dict[str, dict[str, float]] | None:
    from trajsynth.flows.curate import next_weights

    weights = next_weights(store, run_id, round_index, config.curation)
    return weights.weights if weights is not None else None


@flow(name="build-dataset", log_prints=False, validate_parameters=False)
async def build_dataset(
    config: RunConfig,
    store_path: str,
    cache_dir: str | None = None,
    clusters_dir: str | None = None,
    api_key: SecretStr | None = None,
    concurrency: int = 2,
) -> RunSummary:
    """Build ``config.rounds`` rounds into the store; returns the run's summary (from SQL).

    ``concurrency`` is kept for callers of the first version; the task runner bounds how many
    units run at once (``flows.runners``; ``with_options(task_runner=...)``)."""
    del concurrency
    rearm()  # Prefect's SIGTERM handler waits for the units in flight; the command's does not
    forget_faults()  # an endpoint a former run of this process found dead is asked again
    started = time.perf_counter()
    store = Store(Path(store_path))
    run_id = run_id_for(config)
    clusters = _clusters(config, clusters_dir)
    store.start_run(
        run_id,
        config.model_dump(mode="json"),
        run_manifest(
            config,
            clusters=[c.cluster_id for c in clusters],
            sandbox_image=_sandbox_image(config.sandbox),
        ),
    )
    store.write(_cluster_rows(clusters))
    state = "completed"
    try:
        async with (
            open_llm_client(config.llm, api_key=api_key) as probe,
            _served_policy(config, config.llm) as policy_llm,
        ):
            llm = probe.config  # the resolved endpoint (the embedded server's URL)
            weights = None
            for round_index in range(config.rounds):
                if round_index > 0:
                    weights = _next_weights(store, run_id, round_index - 1, config)
                common = {
                    "config": config,
                    "llm": llm,
                    "run_id": run_id,
                    "round_index": round_index,
                    "clusters": clusters,
                    "store": store,
                    "api_key": api_key,
                    "cache_dir": cache_dir,
                }
                await plan_round(**common, weights=weights)
                await rollout_round(**common, policy_llm=policy_llm)
                _curate(store, run_id, round_index, config)
    except BaseException:
        state = "failed"
        raise
    finally:
        summary = summarize_run(store, run_id, wall_s=time.perf_counter() - started)
        store.finish_run(run_id, state, summary.model_dump(mode="json"))
    return summary
