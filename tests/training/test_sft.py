"""SFT on an export: bad input, `synth sft --smoke`, and a stranger's script on the export."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from fakes.export_store import export_store
from typer.testing import CliRunner

from trajsynth.cli.main import app
from trajsynth.schemas import InputError
from trajsynth.store import Store
from trajsynth.training.models_io import resolve_model
from trajsynth.training.sft import load_sft_dataset

pytestmark = pytest.mark.alone  # torch or transformers: every core

SCRIPT = Path(__file__).parent / "scripts" / "stranger_sft.py"


@pytest.mark.slow
def test_bad_sft_data_is_one_clear_line(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="does not exist"):
        load_sft_dataset(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match=r"no \*\.parquet or \*\.jsonl files"):
        load_sft_dataset(tmp_path / "empty")
    rl = tmp_path / "rl"
    rl.mkdir()
    (rl / "train.jsonl").write_text('{"prompt": [], "env": {}}\n')
    with pytest.raises(InputError, match="not SFT rows .*missing \\['messages', 'tools'\\]"):
        load_sft_dataset(rl)
    blank = tmp_path / "blank"
    blank.mkdir()
    (blank / "train.jsonl").write_text("")
    with pytest.raises(InputError, match="no rows|no \\*\\.parquet"):
        load_sft_dataset(blank)


def test_a_policy_path_that_is_not_a_model_is_one_clear_line(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("hi")
    for bad in (tmp_path, tmp_path / "notes.txt", tmp_path / "nope"):
        with pytest.raises(InputError, match="is not a model: expected 'embedded', a .gguf"):
            resolve_model(bad)
    result = CliRunner().invoke(app, ["eval", "--policy", str(tmp_path), "--smoke"])
    assert result.exit_code != 0 and "is not a model" in str(result.exception)


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::UserWarning")  # peft: the GGUF folder has no config.json
@pytest.mark.filterwarnings("ignore:.*gradient_checkpointing.* is deprecated:FutureWarning")
def test_synth_sft_smoke_trains_writes_a_gguf_and_records_the_model(tmp_path: Path) -> None:
    store = tmp_path / "s.duckdb"
    out = tmp_path / "sft"
    result = CliRunner().invoke(
        app,
        ["sft", "--smoke", "--output-dir", str(out), "--store", str(store)],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    assert re.search(r"SFT \(sft-lora\) on 4 rows", result.output)
    assert (out / "model" / "config.json").is_file() and (out / "adapter").is_dir()
    assert (out / "model.f16.gguf").stat().st_size > 100_000_000
    (row,) = Store(store).query("SELECT * FROM models")
    assert row["parent"] == "embedded" and row["method"] == "sft-lora" and row["n_rows"] == 4
    metrics = json.loads(row["metrics"]) if isinstance(row["metrics"], str) else row["metrics"]
    assert metrics["peak_rss_mb"] > 0 and metrics["steps"] == 2
    # the gold tasks were planned on the spot, in no store: their lineage is recorded anyway
    assert row["unresolved"] == [] and len(row["lineage"]) == 4
    assert all(k["signature"] and k["path"] for k in row["lineage"])
    from trajsynth.flows.lineage import model_lineage

    assert model_lineage(Store(store), str(out / "model")).complete


@pytest.mark.slow
def test_a_strangers_sft_script_trains_on_the_export_without_trajsynth(tmp_path: Path) -> None:
    """The whole path a stranger takes: `synth export` of a tiny dataset, `synth model export`
    for the base model (transformers refuses to fine-tune the GGUF it loads itself), then a
    plain TRL script that imports nothing of trajsynth trains two steps on them."""
    from trajsynth.export import export_sft

    export_sft(export_store(tmp_path / "s.duckdb"), tmp_path / "sft")
    model_dir = tmp_path / "base"
    made = subprocess.run(
        [sys.executable, "-m", "trajsynth.cli", "model", "export", "--out", str(model_dir)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert made.returncode == 0, made.stderr[-3000:]
    assert (model_dir / "model.safetensors").is_file() and (model_dir / "config.json").is_file()
    assert (model_dir / "tokenizer_config.json").is_file()
    assert "quantization_config" not in (model_dir / "config.json").read_text()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), str(tmp_path / "sft"), str(model_dir), str(tmp_path / "o"),
         "2"],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    found = re.search(
        r"steps=2 loss=([\d.]+) finite=True changed=(\d+)/(\d+) trajsynth_modules=\[\]",
        proc.stdout,
    )
    assert found, proc.stdout[-2000:]
    assert float(found.group(1)) > 0
    assert int(found.group(2)) > 0  # the steps moved the weights


def test_bundled_sft_configs_parse() -> None:
    from trajsynth.training.sft import load_sft_config

    data = Path(__file__).resolve().parents[2] / "src" / "trajsynth" / "data" / "train"
    cpu = load_sft_config(data / "sft-cpu.toml", max_steps=3)
    assert cpu.use_cpu and cpu.gradient_checkpointing and cpu.bf16 == "auto" and cpu.max_steps == 3
    gpu = load_sft_config(data / "sft-gpu.toml")
    assert gpu.bf16 is True and not gpu.use_cpu and "down_proj" in gpu.lora.target_modules
    with pytest.raises(InputError, match="sft-cpu.toml"):
        load_sft_config(data / "sft-cpu.toml", learning_rate=-1)


@pytest.mark.slow
def test_the_rows_task_and_run_ids_come_back_for_the_lineage(tmp_path: Path) -> None:
    from trajsynth.export import export_sft
    from trajsynth.flows.lineage import row_lineage

    store = export_store(tmp_path / "s.duckdb")
    export_sft(store, tmp_path / "sft")
    trained_on = load_sft_dataset(tmp_path / "sft")
    assert trained_on.column_names == ["messages", "tools"]  # what the trainer reads
    rows = load_sft_dataset(tmp_path / "sft", extra_columns=("task_id", "run_id", "nope"))
    assert rows.column_names == ["messages", "tools", "task_id", "run_id"]
    lineage = row_lineage(store, rows.to_list())
    # the fake store's blueprints are sketches (no gold run): named, though not resolvable
    task_ids = set(rows["task_id"])
    assert task_ids and {k.task_id for k in lineage.keys} | set(lineage.unresolved) == task_ids
    assert lineage.run_ids == sorted(set(rows["run_id"]))
