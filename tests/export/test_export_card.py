"""The dataset card: front matter the Hub reads, the store's figures, plots beside it."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from fakes.export_store import export_store

from trajsynth.export import export_dataset

# each renders rows through the tokenizer (transformers and torch): the slow tier's
pytestmark = pytest.mark.slow


def _front_matter(text: str) -> dict:
    assert text.startswith("---\n")
    return yaml.safe_load(text.split("---\n")[1])


def test_card_carries_the_store_numbers_and_plots(tmp_path: Path) -> None:
    store = export_store(tmp_path / "s.duckdb")
    report = export_dataset(store, tmp_path / "ds", check_render=False)
    card = (tmp_path / "ds" / "README.md").read_text()
    meta = _front_matter(card)
    assert meta["configs"] == [
        {"config_name": "sft", "data_files": [{"split": "train", "path": "sft/*.parquet"}]},
        {"config_name": "rl", "data_files": [{"split": "train", "path": "rl/*.parquet"}]},
    ]
    assert meta["size_categories"] == ["n<1K"]
    assert "| sft | 3 |" in card and "| rl | 1 |" in card
    assert "after round 0 (`round_stats`)" in card
    assert "| reasoning-mode entropy (nats) | 0.918 |" in card
    assert "| cumulative action complexity (mean) | 2.25 |" in card
    # pass rates by cluster: t1, t2, t4 pass, t3 fails
    assert "| shop | 4 | 0 | 3 | 0.75 |" in card
    assert '"rounds": 1' in card and "sk-secret" not in card and '"llm_api_key": "***"' in card
    for name in ("domains", "modes", "cac"):
        png = tmp_path / "ds" / "plots" / f"{name}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"(plots/{name}.png)" in card
    assert set(report.files) >= {"README.md", "plots/cac.png", "sft/train-00000-of-00001.parquet"}


def test_card_counts_from_rows_without_round_stats(tmp_path: Path) -> None:
    import datasets

    store = export_store(tmp_path / "s.duckdb", stats=False)
    export_dataset(store, tmp_path / "ds", check_render=False, plots=False)
    card = (tmp_path / "ds" / "README.md").read_text()
    assert "No `round_stats` in the store" in card
    assert "| reasoning modes | 2 |" in card and "| tasks in SFT | 2 |" in card
    assert "| mean CAC (SFT) | 2.25 |" in card
    assert "not recorded in the store's `runs` table" in card
    # the card's configs load as written
    sft = datasets.load_dataset(str(tmp_path / "ds"), "sft", split="train")
    rl = datasets.load_dataset(str(tmp_path / "ds"), "rl", split="train")
    assert (len(sft), len(rl)) == (3, 1)


def test_card_validates_with_huggingface_hub(tmp_path: Path) -> None:
    """The Hub's own card loader reads the front matter: configs, declared features,
    license, language, task categories; the features are the ones the Parquet files hold."""
    import datasets
    from huggingface_hub import DatasetCard

    from trajsynth.export.records import rl_features, sft_features

    store = export_store(tmp_path / "s.duckdb")
    export_dataset(store, tmp_path / "ds", check_render=False, plots=False, license="cc-by-4.0")
    card = DatasetCard.load(tmp_path / "ds" / "README.md")
    data = card.data
    assert data.license == "cc-by-4.0" and data.language == ["en"]
    assert data.task_categories == ["text-generation"] and data.size_categories == ["n<1K"]
    assert [c["config_name"] for c in data.configs] == ["sft", "rl"]
    infos = datasets.info.DatasetInfosDict.from_dataset_card_data(data)
    assert infos["sft"].features == sft_features() and infos["rl"].features == rl_features()
    assert infos["sft"].splits["train"].num_examples == 3
    assert infos["rl"].splits["train"].num_examples == 1
    assert "domain entropy (nats)" in card.text and "(bits)" not in card.text
    sft = datasets.load_dataset(str(tmp_path / "ds"), "sft", split="train")
    assert sft.features == sft_features()


def test_card_of_a_jsonl_export_declares_no_parquet_features(tmp_path: Path) -> None:
    from huggingface_hub import DatasetCard

    store = export_store(tmp_path / "s.duckdb")
    export_dataset(store, tmp_path / "ds", fmt="openai-jsonl", check_render=False, plots=False)
    data = DatasetCard.load(tmp_path / "ds" / "README.md").data
    assert data.license == "other"
    assert data.configs[0]["data_files"] == [{"split": "train", "path": "sft/train.jsonl"}]
    assert data.get("dataset_info") is None


def test_card_sizes_license_and_how_to_train(tmp_path: Path) -> None:
    """num_bytes is the rows' Arrow size (as ``datasets`` counts it), the license is the one
    asked for and the generating model's is named, the tokenizer folder and the base model
    command are on the card."""
    import datasets
    import pyarrow.parquet as pq
    from huggingface_hub import DatasetCard

    store = export_store(tmp_path / "s.duckdb")
    export_dataset(store, tmp_path / "ds", check_render=False, plots=False, license="cc-by-4.0")
    card = DatasetCard.load(tmp_path / "ds" / "README.md")
    infos = datasets.info.DatasetInfosDict.from_dataset_card_data(card.data)
    for name in ("sft", "rl"):
        files = sorted((tmp_path / "ds" / name).glob("*.parquet"))
        arrow = pq.read_table([str(f) for f in files]).nbytes
        assert infos[name].splits["train"].num_bytes == arrow > 0
        assert infos[name].dataset_size == arrow
        assert infos[name].download_size == sum(f.stat().st_size for f in files)
    # what `datasets` holds once loaded (it reads in batches: a few offset bytes differ)
    loaded = datasets.load_dataset(str(tmp_path / "ds"), "sft", split="train")
    assert loaded.data.nbytes == pytest.approx(infos["sft"].splits["train"].num_bytes, rel=0.01)
    text = card.text
    assert "This dataset's license: `cc-by-4.0`" in text
    assert "generated with `smollm2`, licensed `apache-2.0`" in text
    assert "`tokenizer/`" in text and 'AutoTokenizer.from_pretrained("path/to/this/folder/' in text
    assert "synth model export --out base/" in text
    assert (tmp_path / "ds" / "tokenizer" / "tokenizer_config.json").is_file()


def test_an_unset_license_names_itself_and_says_how_to_set_it(tmp_path: Path) -> None:
    from huggingface_hub import DatasetCard

    store = export_store(tmp_path / "s.duckdb")
    export_dataset(store, tmp_path / "ds", check_render=False, plots=False)
    card = DatasetCard.load(tmp_path / "ds" / "README.md")
    assert card.data.license == "other" and card.data.license_name == "unspecified"
    assert "synth export --license ID" in card.text
