"""The dataset card: ``README.md`` with YAML front matter the Hub reads, and PNG plots.

The card is built with ``huggingface_hub``'s ``DatasetCard`` / ``DatasetCardData``; the
``dataset_info`` block comes from ``datasets``' own ``DatasetInfosDict`` over the features
``records`` declares (Parquet only: the JSONL layouts are not those features), so a loader
that reads the YAML gets the very types the files hold. Entropies are in nats, as
``curation/entropy.py`` computes them (docs/methods.md §1.1).

Figures come from the store: the diversity and topology figures from the run's last
``round_stats`` row (docs/methods.md §5-§8 as curation computed them), else counted from the
exported rows; pass rates by cluster from ``trajectories`` and ``verdicts`` (excluded
verdicts, infra faults, are left out of the rate); the run config from ``runs`` with any
key that looks like a secret masked.
"""

from __future__ import annotations

import json
import math
import re
import statistics
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from trajsynth.export.report import ExportReport
from trajsynth.schemas import RLRow, SFTRow
from trajsynth.store import Store

__all__ = [
    "DEFAULT_LANGUAGE",
    "DEFAULT_LICENSE",
    "card_data",
    "card_text",
    "is_secret_key",
    "model_license",
    "pass_rates",
    "write_card",
    "write_plots",
]

DEFAULT_LICENSE = "other"
DEFAULT_LANGUAGE = ("en",)

# A config key is a secret when one of its words is one of these ("api_key", "hf_token",
# "client_secret"); counts and budgets of tokens are not ("max_tokens", "tokens_per_minute").
_SECRET_WORDS = frozenset(
    {"key", "apikey", "token", "secret", "password", "passwd", "credential", "credentials"}
)
# values that are keys whatever their field is called (OpenAI, Anthropic, Hugging Face,
# GitHub, AWS, Slack, a bearer header)
_SECRET_VALUE = re.compile(
    r"\b(sk-[A-Za-z0-9_\-]{16,}|hf_[A-Za-z0-9]{20,}|gh[pousr]_[A-Za-z0-9]{20,}|AKIA[0-9A-Z]{16}"
    r"|xox[abpr]-[A-Za-z0-9\-]{10,}|Bearer\s+[A-Za-z0-9._\-]{16,})"
)
# licenses of the models trajsynth ships or names, by a word of the model's name
MODEL_LICENSES = {"smollm2": "apache-2.0", "smollm": "apache-2.0"}
TOKENIZER_MODEL = "SmolLM2-135M-Instruct"
_FIGURES = (
    ("n_trajectories", "rollouts"),
    ("n_verified", "verified rollouts"),
    ("n_accepted", "accepted trajectories"),
    ("pass_rate", "pass rate"),
    ("n_tasks", "tasks"),
    ("domain_entropy", "domain entropy (nats)"),
    ("domain_entropy_norm", "domain entropy, normalised"),
    ("cluster_entropy_norm", "cluster entropy, normalised"),
    ("reasoning_mode_entropy", "reasoning-mode entropy (nats)"),
    ("reasoning_mode_entropy_norm", "reasoning-mode entropy, normalised"),
    ("action_complexity", "cumulative action complexity (mean)"),
    ("error_branch_ratio", "error branch ratio (mean)"),
    ("strategic_heterogeneity", "strategic heterogeneity (mean)"),
    ("n_success_strategies", "successful strategies per task (mean)"),
    ("n_recovered", "trajectories that recover from an error"),
    ("n_duplicates", "near-duplicates"),
    ("n_sft_selected", "SFT selected"),
    ("n_rl_selected", "RL selected"),
)


def is_secret_key(name: str) -> bool:
    """Whether a config key names a secret: one of its words (snake, kebab or camel case) is
    a secret's word ("llm_api_key", "hfToken"); "max_tokens" is a budget, shown.

    >>> [is_secret_key(k) for k in ("api_key", "max_tokens", "hfToken", "tokenizer")]
    [True, False, True, False]
    """
    words = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name).lower().replace("-", "_").split("_")
    return any(w in _SECRET_WORDS for w in words)


def _mask(value: Any) -> Any:
    """The run config with every secret masked: values of secret keys, and values that are
    keys whatever their field is called."""
    if isinstance(value, dict):
        return {k: "***" if is_secret_key(str(k)) else _mask(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_mask(v) for v in value]
    if isinstance(value, str):
        return _SECRET_VALUE.sub("***", value)
    return value


def model_license(model: str | None) -> str | None:
    """The license of a model trajsynth knows by name (SmolLM2: apache-2.0), else None."""
    name = (model or "").lower().replace("-", "").replace("_", "")
    return next((lic for word, lic in MODEL_LICENSES.items() if word in name), None)


def _size_category(n: int) -> str:
    for bound, name in ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K")):
        if n < bound:
            return name
    return "100K<n<1M" if n < 1_000_000 else "n>1M"


def _fmt(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return "nan" if math.isnan(value) else f"{value:.4g}"
    return str(value)


def pass_rates(store: Store, run_id: str, round: int | None = None) -> list[dict[str, Any]]:
    """Per cluster: rollouts, excluded (infra), passed, pass rate over the non-excluded."""
    where, params = ("", []) if round is None else (" AND t.round = ?", [round])
    return store.query(
        "SELECT t.cluster_id, count(*) AS n, "
        "count(*) FILTER (WHERE coalesce(v.excluded, false)) AS excluded, "
        "count(*) FILTER (WHERE v.passed AND NOT coalesce(v.excluded, false)) AS passed, "
        "count(*) FILTER (WHERE v.passed AND NOT coalesce(v.excluded, false)) / "
        "nullif(count(*) FILTER (WHERE v.verdict_id IS NOT NULL "
        "AND NOT coalesce(v.excluded, false)), 0) AS pass_rate "
        "FROM trajectories t LEFT JOIN verdicts v ON v.trajectory_id = t.trajectory_id "
        f"WHERE t.run_id = ?{where} GROUP BY t.cluster_id ORDER BY t.cluster_id",
        [run_id, *params],
    )


def _counts(sft: Sequence[SFTRow], rl: Sequence[RLRow], key: str) -> Counter[str]:
    rows = sft if sft else rl
    return Counter(str(r.metadata.get(key) or "unknown") for r in rows)


def _numbers(rows: Sequence[SFTRow] | Sequence[RLRow], key: str) -> list[float]:
    """The ``key`` figure of each row's metadata that has one, as floats (a metadata value is
    any JSON; these figures are numbers, and a container raises as ``float`` would)."""
    out = []
    for r in rows:
        value = r.metadata.get(key)
        if value is None:
            continue
        if not isinstance(value, (int, float, str)):
            raise TypeError(f"metadata {key!r} is not a number: {value!r}")
        out.append(float(value))
    return out


def write_plots(sft: Sequence[SFTRow], rl: Sequence[RLRow], folder: Path) -> list[Path]:
    """``domains.png``, ``modes.png`` (bars) and ``cac.png`` (histogram) of the SFT rows
    (the RL rows' domains and target modes when there is no SFT row)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    bars = (
        ("domains", "domain", _counts(sft, rl, "domain")),
        ("modes", "reasoning mode", _counts(sft, rl, "mode" if sft else "target_mode")),
    )
    for name, label, counts in bars:
        fig, ax = plt.subplots(figsize=(6, 3.5))
        keys = sorted(counts, key=lambda k: (-counts[k], k))
        ax.bar(keys, [counts[k] for k in keys], color="#4c72b0")
        ax.set_xlabel(label)
        ax.set_ylabel("rows")
        ax.set_title(f"{label} distribution ({'SFT' if sft else 'RL'})")
        ax.tick_params(axis="x", labelrotation=30)
        fig.tight_layout()
        path = folder / f"{name}.png"
        fig.savefig(path, dpi=100)
        plt.close(fig)
        paths.append(path)
    cac = _numbers(sft, "cac")
    fig, ax = plt.subplots(figsize=(6, 3.5))
    if cac:
        ax.hist(cac, bins=min(30, max(5, len(set(cac)))), color="#55a868")
    else:
        ax.text(0.5, 0.5, "no CAC scores in the store", ha="center", va="center")
    ax.set_xlabel("cumulative action complexity (CAC)")
    ax.set_ylabel("SFT rows")
    ax.set_title("complexity histogram")
    fig.tight_layout()
    path = folder / "cac.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    paths.append(path)
    return paths


def _arrow_bytes(files: Sequence[Path]) -> tuple[int, int]:
    """(bytes of the rows in Arrow, as ``datasets`` counts a split's ``num_bytes``; bytes of
    the files on disk)."""
    import pyarrow.parquet as pq

    if not files:
        return 0, 0
    return pq.read_table([str(f) for f in files]).nbytes, sum(f.stat().st_size for f in files)


def _dataset_infos(report: ExportReport, folder: Path | None = None) -> Any:
    """``datasets``' infos per Parquet config: declared features, the train split's rows and
    bytes (read back from the files written in ``folder``)."""
    from datasets import DatasetInfo
    from datasets.info import DatasetInfosDict
    from datasets.splits import SplitDict, SplitInfo

    from trajsynth.export.records import rl_features, sft_features

    infos = DatasetInfosDict()
    if report.fmt != "parquet":
        return infos
    for name, n, features in (
        ("sft", report.n_sft, sft_features),
        ("rl", report.n_rl, rl_features),
    ):
        if n:
            files = sorted((folder / name).glob("*.parquet")) if folder is not None else []
            num_bytes, on_disk = _arrow_bytes(files)
            splits = SplitDict()
            splits.add(SplitInfo(name="train", num_examples=n, num_bytes=num_bytes))
            infos[name] = DatasetInfo(
                features=features(),
                splits=splits,
                config_name=name,
                download_size=on_disk,
                dataset_size=num_bytes,
            )
    return infos


def card_data(
    report: ExportReport,
    *,
    license: str = DEFAULT_LICENSE,
    language: Sequence[str] = DEFAULT_LANGUAGE,
    folder: Path | None = None,
) -> Any:
    """The card's front matter as ``huggingface_hub.DatasetCardData``: configs (data files
    per kind), ``dataset_info`` features and sizes (of the files in ``folder``), license
    (``other`` names itself: the Hub asks for a ``license_name``), language, task
    categories, size."""
    from huggingface_hub import DatasetCardData

    ext = "parquet" if report.fmt == "parquet" else "jsonl"
    configs = [
        {"config_name": name, "data_files": [{"split": "train", "path": f"{name}/*.{ext}"}]}
        for name, n in (("sft", report.n_sft), ("rl", report.n_rl))
        if n
    ]
    if report.fmt in ("openai-jsonl", "sharegpt") and report.n_sft:
        # sft/metadata.jsonl lies beside the rows (openai-jsonl): name the one data file
        configs[0]["data_files"][0]["path"] = "sft/train.jsonl"
    # the Hub's own field for a license it has no id for ("other")
    extra: dict[str, Any] = {"license_name": "unspecified"} if license == "other" else {}
    data = DatasetCardData(
        language=list(language),
        license=license,
        pretty_name=f"trajsynth dataset, run {report.run_id}",
        task_categories=["text-generation"],
        size_categories=[_size_category(max(report.n_sft, report.n_rl))],
        tags=["trajsynth", "synthetic", "tool-use", "agents", "function-calling"],
        configs=configs,
        **extra,
    )
    _dataset_infos(report, folder).to_dataset_card_data(data)
    return data


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_fmt(v) for v in row) + " |" for row in rows]
    return lines


def card_text(
    store: Store,
    report: ExportReport,
    sft: Sequence[SFTRow],
    rl: Sequence[RLRow],
    *,
    license: str = DEFAULT_LICENSE,
    language: Sequence[str] = DEFAULT_LANGUAGE,
    folder: Path | None = None,
) -> str:
    """The README.md text (front matter, sizes, figures, pass rates, config, plots, license,
    how to train on it), rendered by ``huggingface_hub.DatasetCard``. ``folder``: where the
    export's files are (their sizes and the shipped tokenizer)."""
    from huggingface_hub import DatasetCard

    run, rnd = report.run_id, report.round
    where, params = ("", []) if rnd is None else (" AND round <= ?", [rnd])
    stats = store.query(
        f"SELECT * FROM round_stats WHERE run_id = ?{where} ORDER BY round DESC LIMIT 1",
        [run, *params],
    )
    runs = store.query("SELECT config, state FROM runs WHERE run_id = ?", [run])
    scope = "every round" if rnd is None else f"round {rnd}"
    out = [f"# trajsynth dataset: run `{run}`", ""]
    out += [
        f"Tool-use agent trajectories built by trajsynth (run `{run}`, {scope}): SFT rows "
        "are verified trajectories chosen by curation, RL rows are tasks whose rollouts "
        "both pass and fail. Every SFT row renders through a tool-aware ChatML template "
        "with the assistant turns marked for the loss.",
        "",
        "## Sizes",
        "",
    ]
    sizes = [["sft", report.n_sft, "messages, tools"], ["rl", report.n_rl, "prompt, env"]]
    out += _table(["config", "rows", "main columns"], sizes)
    out += [
        "",
        f"SFT tokens (SmolLM2 tokenizer, tool-aware template): {report.n_tokens}, "
        f"of which assistant (trained on): {report.n_assistant_tokens}.",
        "",
    ]
    if not report.n_sft or not report.n_rl:
        empty = "SFT" if not report.n_sft else "RL"
        out += [f"The {empty} selection of this run is empty, so it is left out.", ""]
    out += ["## Diversity and topology", ""]
    if stats:
        s = stats[0]
        out += [f"From curation's figures after round {s['round']} (`round_stats`).", ""]
        out += _table(["figure", "value"], [[label, s.get(k)] for k, label in _FIGURES])
    else:
        out += ["No `round_stats` in the store; counted from the exported rows.", ""]
        cac = _numbers(sft, "cac")
        counted = [
            ["domains", len(_counts(sft, rl, "domain"))],
            ["reasoning modes", len(_counts(sft, rl, "mode" if sft else "target_mode"))],
            ["tasks in SFT", len({r.task_id for r in sft})],
            ["mean CAC (SFT)", statistics.fmean(cac) if cac else None],
        ]
        out += _table(["figure", "value"], counted)
    if rl:
        rates = _numbers(rl, "pass_rate")
        mean = statistics.fmean(rates) if rates else None
        out += ["", f"RL tasks: mean rollout pass rate {_fmt(mean)} over {len(rl)} tasks."]
    out += ["", "## Pass rates by cluster", ""]
    rates_rows = pass_rates(store, run, rnd)
    out += _table(
        ["cluster", "rollouts", "excluded (infra)", "passed", "pass rate"],
        [[r["cluster_id"], r["n"], r["excluded"], r["passed"], r["pass_rate"]] for r in rates_rows],
    )
    out += ["", "## Distributions", ""]
    for name, label in (("domains", "domains"), ("modes", "reasoning modes"), ("cac", "CAC")):
        out.append(f"![{label}](plots/{name}.png)")
    out += [""]
    out += _table(
        ["domain", "rows"], sorted(_counts(sft, rl, "domain").items(), key=lambda kv: -kv[1])
    )
    out += ["", "## Run config", ""]
    if runs:
        config = _mask(runs[0]["config"] or {})
        out += ["```json", json.dumps(config, indent=2, sort_keys=True, default=str), "```"]
    else:
        out += ["The run is not recorded in the store's `runs` table."]
    config = runs[0]["config"] if runs else {}
    model = ((config or {}).get("llm") or {}).get("model") or (config or {}).get("model")
    out += ["", *_license_section(license, model)]
    tokenizer = folder is not None and (folder / "tokenizer").is_dir()
    out += ["", *_loading_section(tokenizer)]
    data = card_data(report, license=license, language=language, folder=folder)
    return str(DatasetCard(f"---\n{data.to_yaml()}\n---\n\n" + "\n".join(out)))


def _license_section(license: str, model: str | None) -> list[str]:
    own = (
        "not set (`license: other`); set it with `synth export --license ID` or "
        "`dataset_license` in synth.toml"
        if license == "other"
        else f"`{license}`"
    )
    model_lic = model_license(model)
    generated = (
        f"The trajectories were generated with `{model}`, licensed `{model_lic}`; "
        "outputs of a model may carry its license's terms."
        if model and model_lic
        else f"The trajectories were generated with `{model}`: see its license for what "
        "its outputs may be used for."
        if model
        else "The model that generated the trajectories is not recorded."
    )
    return [
        "## License",
        "",
        f"This dataset's license: {own}.",
        "",
        generated,
        f"The shipped `tokenizer/` is {TOKENIZER_MODEL}'s (`{MODEL_LICENSES['smollm2']}`).",
    ]


def _loading_section(tokenizer: bool) -> list[str]:
    lines = [
        "## Loading and training",
        "",
        "```python",
        "from datasets import load_dataset",
        'sft = load_dataset("path/to/this/folder", "sft", split="train")',
        "```",
    ]
    if not tokenizer:
        return lines
    return lines + [
        "",
        f"`tokenizer/` holds {TOKENIZER_MODEL}'s tokenizer with the tool-aware chat template "
        "the rows were rendered with (`chat_template.jinja`: it marks the assistant turns, so "
        "TRL's `assistant_only_loss=True` trains on them alone). A base model to train, "
        "with the same tokenizer: `synth model export --out base/` writes "
        f"{TOKENIZER_MODEL} dequantized to float32 as a transformers folder (safetensors, "
        "config, tokenizer).",
        "",
        "```python",
        "from transformers import AutoModelForCausalLM, AutoTokenizer",
        "from trl import SFTConfig, SFTTrainer",
        "",
        'tokenizer = AutoTokenizer.from_pretrained("path/to/this/folder/tokenizer")',
        'model = AutoModelForCausalLM.from_pretrained("base")',
        "trainer = SFTTrainer(model=model, train_dataset=sft, processing_class=tokenizer,",
        '                     args=SFTConfig(output_dir="out", assistant_only_loss=True))',
        "trainer.train()",
        "```",
    ]


def write_card(
    store: Store,
    folder: Path,
    report: ExportReport,
    sft: Sequence[SFTRow],
    rl: Sequence[RLRow],
    *,
    plots: bool = True,
    license: str = DEFAULT_LICENSE,
    language: Sequence[str] = DEFAULT_LANGUAGE,
) -> list[Path]:
    """Write ``README.md`` (and ``plots/*.png``) into ``folder``; returns the paths."""
    from huggingface_hub import DatasetCard

    paths = write_plots(sft, rl, folder / "plots") if plots else []
    card = folder / "README.md"
    with store.session(read_only=True):
        text = card_text(store, report, sft, rl, license=license, language=language, folder=folder)
    DatasetCard(text).save(card)
    return [card, *paths]
