"""GRPOTrainer with step-level credit and early stopping (docs/methods.md §9-§11, §13).

Written against TRL 1.16.0 (``PINNED_TRL``; the ``train`` extra pins it) and checked at import
of the trainer: one hook below is a TRL internal that moves between releases.

``TrajsynthGRPOTrainer`` changes only the advantages. What it needs of TRL, and where from:

- the batch's completions, environments and rewards come through TRL's public reward-function
  interface: each reward function is called with ``completions=``, ``environments=`` (one per
  completion, from ``environment_factory``) and returns one reward per completion.
  ``RewardRecorder`` wraps the reward functions and keeps what they were given and returned;
- ``_generate_and_score_completions`` (private, the one override) runs TRL's own, then, for a
  non-``grpo`` estimator or early stopping, replaces ``output["advantages"]`` (shape ``(B,)``)
  by per-token advantages ``(B, T)`` (TRL 1.16's ``_compute_loss`` accepts both): each
  assistant turn's value on its tokens, tool and template tokens 0 (they are masked by
  ``tool_mask`` anyway). Assistant turns are the runs of ``completion_mask * tool_mask`` (TRL
  marks tool-result tokens 0). TRL 1.16 has no public hook for advantages: they are computed
  inline from the rewards (``scale_rewards``, ``multi_objective_aggregation``), and
  ``rollout_func``'s extra fields reach reward functions only, never the loss. The override is
  the only place that sees the whole generated batch (``compute_loss`` gets shuffled slices of
  it when ``steps_per_generation > 1``), so it stays until TRL exposes one;
- the tool schemas rendered into the prompt are the clusters' exact JSON schemas rather than
  ones transformers derives from the environment methods' signatures: TRL 1.16 takes tool
  schemas only from the methods (``get_json_schema`` on each), with no way to hand it a schema,
  so ``__init__`` writes them into TRL's ``_env_tools`` table (a private attribute).

Groups for the estimators: the G completions of one task, in TRL's order (``view(-1, G)``);
the tree is the prefix trie of their assistant turns (two completions share a node while their
turns so far, tool results included, are identical), GiGPO/HGPO anchors come from
``tool_env.step_anchors``. Completions without a reward (``None``: an infra fault) take no part
in their group and get advantage 0, as TRL does for its own.

Early stopping (§11, ``early_stop.enabled``): TRL's tool loop gives no hook between turns, so
the rule is applied right after generation: per-token regret ``ln p_max - ln p(a)`` comes from
one no-grad forward pass, and a rollout whose cumulative regret crosses the cluster's reference
curve is cut after the stop turn (later tokens masked out of the loss), gets ``r_fail`` and
stays in its group as a failure (never treated as a truncated completion). The tokens after
the stop point are logged as ``early_stop/tokens_saved``: what an in-loop stop would not have
generated. Generation itself is not shortened on this path.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from trajsynth.schemas import AdvantageKind, ObsClass, TrainConfig, canonical_json, stable_hash
from trajsynth.training import advantages as adv
from trajsynth.training.early_stop import EarlyStopRule, ReferenceCurves
from trajsynth.training.rewards import turn_call_counts
from trajsynth.training.tool_env import TaskEnvironment, step_anchors

__all__ = [
    "PINNED_TRL",
    "CompletionSteps",
    "RewardRecorder",
    "batch_step_values",
    "completion_steps",
    "group_step_values",
    "token_advantages",
    "trainer_class",
    "turn_spans",
]

log = logging.getLogger(__name__)

PINNED_TRL = "1.16.0"


@dataclass(frozen=True)
class CompletionSteps:
    """What the estimators need of one completion: its reward (None: unscorable), per assistant
    turn a content key (for the prefix trie), whether its calls all succeeded, and the anchor
    key of the state it acted from."""

    reward: float | None
    turn_keys: tuple[str, ...]
    exec_ok: tuple[bool, ...]
    anchors: tuple[str, ...]
    cluster_id: str = ""


def completion_steps(
    completion: Sequence[Mapping[str, Any]], env: TaskEnvironment | None, reward: float | None
) -> CompletionSteps:
    """``CompletionSteps`` of a TRL completion (assistant and tool messages) and its env."""
    keys: list[str] = []
    current: list[Any] = []
    for message in completion:
        if message.get("role") == "assistant":
            if current:
                keys.append(stable_hash(current, length=16))
            current = [canonical_json({k: message.get(k) for k in ("content", "tool_calls")})]
        elif current:
            current.append(canonical_json(message.get("content")))
    if current:
        keys.append(stable_hash(current, length=16))
    counts = turn_call_counts(completion)
    ok: list[bool] = []
    anchors: list[str] = []
    if env is not None:
        calls = iter(env.calls)
        for n in counts:
            turn = [next(calls, None) for _ in range(n)]
            ok.append(all(c is not None and c.obs_class != ObsClass.ERROR for c in turn))
        anchors = step_anchors(env, counts)
    else:
        ok = [True] * len(counts)
        anchors = list(keys)
    return CompletionSteps(
        reward=None if reward is None or math.isnan(reward) else float(reward),
        turn_keys=tuple(keys),
        exec_ok=tuple(ok),
        anchors=tuple(anchors),
        cluster_id=env.cluster.cluster_id if env is not None else "",
    )


def group_step_values(
    kind: AdvantageKind, group: Sequence[CompletionSteps], config: TrainConfig
) -> list[np.ndarray]:
    """Per-step advantages of one group (one array per completion, one value per turn).

    Unscorable completions and completions without a turn get zeros; for ``tree_subgroup``
    every turn of a leaf carries the leaf's value (whitening comes later, over tokens).
    """
    out = [np.zeros(len(c.turn_keys)) for c in group]
    live = [i for i, c in enumerate(group) if c.reward is not None and c.turn_keys]
    if len(live) < 2:
        return out
    members = [group[i] for i in live]
    rewards = [c.reward for c in members if c.reward is not None]  # each of them: live is scored
    if kind in (AdvantageKind.TREE_SUBGROUP, AdvantageKind.TREE_GL, AdvantageKind.FORK):
        leaves = [
            adv.TreeLeaf(
                path=c.turn_keys,
                reward=float(r),
                exec_ok=c.exec_ok if len(c.exec_ok) == len(c.turn_keys) else None,
            )
            for c, r in zip(members, rewards, strict=True)
        ]
        if kind is AdvantageKind.TREE_SUBGROUP:
            values = adv.tree_subgroup(leaves, variant=config.tree_variant)
            steps = [np.full(len(c.turn_keys), v) for c, v in zip(members, values, strict=True)]
        elif kind is AdvantageKind.TREE_GL:
            steps = adv.tree_gl(leaves)
        else:
            steps = adv.fork(leaves, lambda_e=config.fork_lambda_e, eta=config.fork_eta)
    elif kind in (AdvantageKind.GIGPO, AdvantageKind.HGPO):
        trajs = [
            adv.StepTrajectory(
                reward=float(r),
                anchors=c.anchors if len(c.anchors) == len(c.turn_keys) else c.turn_keys,
            )
            for c, r in zip(members, rewards, strict=True)
        ]
        if kind is AdvantageKind.GIGPO:
            steps = adv.gigpo(
                trajs, gamma=config.gigpo_gamma, omega=config.gigpo_omega, norm=config.gigpo_norm
            ).advantages
        else:
            steps = adv.hgpo_trajectories(
                trajs, gamma=config.gigpo_gamma, depth=config.hgpo_depth, alpha=config.hgpo_alpha
            )
    else:
        raise ValueError(f"no step-level estimator for {kind!r}; grpo is TRL's own")
    for i, values in zip(live, steps, strict=True):
        out[i] = np.asarray(values, dtype=float)
    return out


def turn_spans(mask_row: np.ndarray) -> list[tuple[int, int]]:
    """``[start, end)`` of each run of 1s in a completion's loss mask: its assistant turns."""
    spans = []
    start = None
    for t, m in enumerate(np.asarray(mask_row).astype(bool)):
        if m and start is None:
            start = t
        elif not m and start is not None:
            spans.append((start, t))
            start = None
    if start is not None:
        spans.append((start, len(mask_row)))
    return spans


def token_advantages(
    step_values: Sequence[np.ndarray], mask: np.ndarray, *, whiten: bool = False
) -> np.ndarray:
    """Per-token advantages ``(B, T)``: turn r's value on the tokens of the r-th run of
    ``mask`` (a run past the last value takes the last value), 0 off the mask; ``whiten``
    standardizes over the masked tokens of the batch (TreePO, docs/methods.md §9.3)."""
    mask = np.asarray(mask)
    out = np.zeros(mask.shape, dtype=float)
    for b, values in enumerate(step_values):
        if len(values) == 0:
            continue
        for r, (s, e) in enumerate(turn_spans(mask[b])):
            out[b, s:e] = values[min(r, len(values) - 1)]
    if whiten:
        out = adv.whiten(out, mask.astype(bool))
    return out


def batch_step_values(
    kind: AdvantageKind,
    records: Sequence[CompletionSteps],
    num_generations: int,
    config: TrainConfig,
) -> list[np.ndarray]:
    """``group_step_values`` over a whole batch of consecutive groups of ``num_generations``."""
    if len(records) % num_generations:
        raise ValueError(f"{len(records)} completions is not a multiple of G={num_generations}")
    out: list[np.ndarray] = []
    for start in range(0, len(records), num_generations):
        out.extend(group_step_values(kind, records[start : start + num_generations], config))
    return out


class RewardRecorder:
    """Keeps what TRL's public reward interface hands the reward functions of one batch.

    TRL calls every reward function once per generated batch with ``completions=`` and, with
    ``environment_factory``, ``environments=``; ``wrap`` returns a function that passes the call
    on and records the completions, environments and its rewards (``None`` kept as NaN).
    ``scalar_rewards`` then combines the columns as TRL's ``sum_then_normalize`` does: the
    weighted sum over the functions that scored a completion, NaN where none did.
    """

    def __init__(self) -> None:
        self.completions: list[Any] = []
        self.environments: list[Any] = []
        self.columns: dict[int, list[float]] = {}

    def clear(self) -> None:
        self.completions, self.environments, self.columns = [], [], {}

    def _record(self, index: int, kwargs: Mapping[str, Any], rewards: Sequence[Any]) -> None:
        completions = list(kwargs.get("completions") or [])
        self.completions = completions
        self.environments = list(kwargs.get("environments") or [None] * len(completions))
        self.columns[index] = [math.nan if r is None else float(r) for r in rewards]

    def wrap(self, index: int, func: Callable[..., Any], *, is_async: bool) -> Callable[..., Any]:
        """``func`` recorded as column ``index``; async stays async (TRL awaits those apart,
        and tells them by ``trl.trainer.utils.is_async_callable``)."""
        if is_async:

            async def recorded_async(**kwargs: Any) -> Any:
                rewards = await func(**kwargs)
                self._record(index, kwargs, rewards)
                return rewards

            recorded: Callable[..., Any] = recorded_async
        else:

            def recorded_sync(**kwargs: Any) -> Any:
                rewards = func(**kwargs)
                self._record(index, kwargs, rewards)
                return rewards

            recorded = recorded_sync
        recorded.__name__ = getattr(func, "__name__", type(func).__name__)
        return recorded

    def scalar_rewards(self, weights: Sequence[float]) -> np.ndarray:
        """One reward per recorded completion: weighted sum of the columns, NaN if all are."""
        n = len(self.completions)
        table = np.full((n, len(weights)), np.nan)
        for index, column in self.columns.items():
            table[:, index] = column
        scored = ~np.isnan(table).all(axis=1)
        out = np.full(n, np.nan)
        out[scored] = np.nansum(table[scored] * np.asarray(weights, dtype=float), axis=1)
        return out


def _check_trl() -> None:
    import trl

    if trl.__version__ != PINNED_TRL:
        raise ImportError(
            f"TrajsynthGRPOTrainer was written against trl=={PINNED_TRL} (it overrides "
            f"internal methods); trl {trl.__version__} is installed: pip install "
            f"'trl=={PINNED_TRL}'"
        )


def _make_trainer_class() -> type:
    _check_trl()
    import torch
    from accelerate.utils import gather_object
    from trl.trainer.grpo_trainer import GRPOTrainer
    from trl.trainer.utils import is_async_callable

    class _Trainer(GRPOTrainer):
        def __init__(
            self,
            *args: Any,
            train_config: TrainConfig,
            tool_schemas: Mapping[str, list[dict[str, Any]]] | None = None,
            **kwargs: Any,
        ) -> None:
            super().__init__(*args, **kwargs)
            self.train_config = train_config
            # Private: TRL 1.16 renders each environment's tools from its methods' signatures
            # (transformers' get_json_schema) and takes no schema from outside; the clusters'
            # schemas (enums, nested objects, required fields) do not survive that round trip.
            if tool_schemas and getattr(self, "_env_tools", None) is not None:
                for name, schemas in tool_schemas.items():
                    if name in self._env_tools:
                        self._env_tools[name] = list(schemas)
            # Public: every callable reward function (the environments' own get_reward ones
            # included, which TRL adds to reward_funcs) is wrapped to record its batch.
            self.recorder = RewardRecorder()
            self.reward_funcs = [
                f
                if isinstance(f, torch.nn.Module)
                else self.recorder.wrap(i, f, is_async=is_async_callable(f))
                for i, f in enumerate(self.reward_funcs)
            ]
            es = train_config.early_stop
            self._stop_rule = EarlyStopRule(margin=es.margin, patience=es.patience, j_min=es.j_min)
            self._references = ReferenceCurves(
                min_successes=es.min_successes, percentile=es.percentile, rounds=es.rounds
            )
            self.tokens_saved_total = 0
            self.step_records: list[CompletionSteps] = []

        def _policy(self) -> torch.nn.Module:
            """The model being trained (GRPOTrainer always holds one: it loads a model id)."""
            assert self.model is not None
            return self.model

        def _group_size(self) -> int:
            """G (GRPOConfig cannot be built with None: its checks divide by it)."""
            assert self.num_generations is not None
            return self.num_generations

        # Private TRL method, the one override: see the module doc for the missing public hook.
        def _generate_and_score_completions(self, inputs):
            self.recorder.clear()
            output = super()._generate_and_score_completions(inputs)
            cfg = self.train_config
            if cfg.advantage is AdvantageKind.GRPO and not cfg.early_stop.enabled:
                return output
            if any(isinstance(f, torch.nn.Module) for f in self.reward_funcs):
                raise ValueError("step-level advantages need callable reward functions")
            completions, environments = self.recorder.completions, self.recorder.environments
            weights = self.reward_weights.detach().cpu().tolist()
            local_rewards = self.recorder.scalar_rewards(weights)
            mask_t = output["completion_mask"]
            if "tool_mask" in output:
                mask_t = mask_t * output["tool_mask"]
            mask = mask_t.detach().cpu().numpy()
            n_local = len(completions)
            start = self.accelerator.process_index * n_local
            records = [
                completion_steps(c, e, None if np.isnan(r) else float(r))
                for c, e, r in zip(completions, environments, local_rewards, strict=True)
            ]
            if cfg.early_stop.enabled:
                records, mask, local_rewards = self._early_stop(output, records, mask)
                new_mask = torch.as_tensor(mask, dtype=output["completion_mask"].dtype)
                output["completion_mask"] = new_mask.to(output["completion_mask"].device)
                if "tool_mask" in output:
                    output["tool_mask"] = torch.ones_like(output["tool_mask"])
            # groups may span processes: the estimators see the whole batch, in TRL's order
            all_records = gather_object(records)
            self.step_records = list(all_records)
            if cfg.advantage is AdvantageKind.GRPO:
                rewards = np.asarray(gather_object(local_rewards.tolist()), dtype=float)
                grpo = self._grpo(rewards)
                values = [
                    np.full(len(r.turn_keys), a) for r, a in zip(all_records, grpo, strict=True)
                ]
            else:
                values = batch_step_values(cfg.advantage, all_records, self._group_size(), cfg)
            local = values[start : start + n_local]
            whiten = cfg.advantage is AdvantageKind.TREE_SUBGROUP and cfg.tree_whiten
            per_token = token_advantages(local, mask, whiten=whiten)
            device = output["completion_ids"].device
            output["advantages"] = torch.as_tensor(per_token, dtype=torch.float32, device=device)
            mode = "train" if self._policy().training else "eval"
            self._metrics[mode][f"advantages/{cfg.advantage.value}_abs_mean"].append(
                float(np.abs(per_token[mask.astype(bool)]).mean()) if mask.any() else 0.0
            )
            return output

        def _grpo(self, rewards: np.ndarray) -> np.ndarray:
            """TRL's group advantages (sum_then_normalize), recomputed after early stopping."""
            g = self._group_size()
            grouped = rewards.reshape(-1, g)
            mean = np.nanmean(grouped, axis=1, keepdims=True)
            if self.scale_rewards == "batch":
                std = np.full_like(grouped, np.nanstd(rewards, ddof=1))
            else:
                std = np.nanstd(grouped, axis=1, ddof=1, keepdims=True)
            out = grouped - mean
            if self.scale_rewards != "none":
                out = out / (std + 1e-4)
            return np.nan_to_num(out.reshape(-1), nan=0.0)

        def _early_stop(self, output, records, mask):
            """ESPO's turn rule (docs/methods.md §11) on the generated batch; see the module doc."""
            es = self.train_config.early_stop
            ids = torch.cat([output["prompt_ids"], output["completion_ids"]], dim=1)
            attn = torch.cat([output["prompt_mask"], output["completion_mask"]], dim=1)
            t_len = output["completion_ids"].size(1)
            with torch.no_grad():
                out = self._policy()(input_ids=ids, attention_mask=attn)
                logits = out.logits[:, -t_len - 1 : -1]
                logp = torch.log_softmax(logits.float(), dim=-1)
                sampled = logp.gather(-1, output["completion_ids"].unsqueeze(-1)).squeeze(-1)
                regret = (logp.max(dim=-1).values - sampled).cpu().numpy()
            new_records, stopped, saved = [], 0, 0
            mask = mask.copy()
            for b, rec in enumerate(records):
                spans = turn_spans(mask[b])
                curve = np.cumsum([regret[b, s:e].sum() for s, e in spans]).tolist()
                if rec.reward is not None and rec.reward >= 0.9:
                    self._references.add_round(rec.cluster_id, [curve])
                reference = self._references.reference(rec.cluster_id)
                decision = self._stop_rule.decide(curve, reference) if reference else None
                j = decision.stop_turn if decision is not None and decision.stopped else None
                if j is None or j >= len(spans):
                    new_records.append(rec)
                    continue
                cut = spans[j - 1][1]
                saved += int(mask[b, cut:].sum())
                mask[b, cut:] = 0
                stopped += 1
                new_records.append(
                    CompletionSteps(
                        reward=es.r_fail,
                        turn_keys=rec.turn_keys[:j],
                        exec_ok=rec.exec_ok[:j],
                        anchors=rec.anchors[:j],
                        cluster_id=rec.cluster_id,
                    )
                )
            self.tokens_saved_total += saved
            mode = "train" if self._policy().training else "eval"
            self._metrics[mode]["early_stop/stopped"].append(float(stopped))
            self._metrics[mode]["early_stop/tokens_saved"].append(float(saved))
            if saved:
                log.info("early stop: %d rollouts cut, %d tokens saved", stopped, saved)
            rewards = np.array(
                [np.nan if r.reward is None else r.reward for r in new_records], dtype=float
            )
            return new_records, mask, rewards

    _Trainer.__name__ = _Trainer.__qualname__ = "TrajsynthGRPOTrainer"
    return _Trainer


_TRAINER: type | None = None


def trainer_class() -> type:
    """``TrajsynthGRPOTrainer`` (a ``trl.GRPOTrainer`` subclass), built on first use so that
    importing this module needs no TRL; raises ImportError on a TRL other than ``PINNED_TRL``."""
    global _TRAINER
    if _TRAINER is None:
        _TRAINER = _make_trainer_class()
    return _TRAINER


def __getattr__(name: str) -> Any:
    if name == "TrajsynthGRPOTrainer":
        return trainer_class()
    raise AttributeError(name)
