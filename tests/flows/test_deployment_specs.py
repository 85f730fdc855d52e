"""`prefect.yaml` checked before anything reaches a Prefect server: schedules that do not
parse and entrypoints that name no flow are clear errors naming the file and deployment;
parameters come from the settings; `grow-dataset` picks the next seed from the store."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from trajsynth.cli.main import app
from trajsynth.cli.settings import load_settings
from trajsynth.flows.deployments import build_deployments, load_project, module_entrypoint
from trajsynth.flows.grow import next_seed
from trajsynth.schemas import InputError, RunConfig
from trajsynth.store import Store

REPO = Path(__file__).resolve().parents[2]

FLOWS = """
from prefect import flow

@flow(name="tiny")
def tiny(config: dict, store_path: str, note: str = "x") -> int:
    return 1

@flow(name="needs-more")
def needs_more(store_path: str, out_dir: str) -> int:
    return 1

def not_a_flow() -> int:
    return 1
"""


def _project(tmp_path: Path, deployments: str) -> Path:
    (tmp_path / "flows_here.py").write_text(FLOWS)
    path = tmp_path / "prefect.yaml"
    path.write_text("name: t\ndeployments:\n" + textwrap.indent(textwrap.dedent(deployments), "  "))
    return path


def _settings(tmp_path: Path):
    (tmp_path / "synth.toml").write_text(
        f'store_path = "{tmp_path / "s.duckdb"}"\n[run]\ntasks = 3\nseed = 4\n'
    )
    return load_settings(tmp_path / "synth.toml")


def test_the_repo_project_file_parses() -> None:
    specs = {s.name: s for s in load_project(REPO / "prefect.yaml")}
    assert set(specs) == {"grow-dataset", "export"}
    assert specs["grow-dataset"].schedules[0].cron == "0 3 * * *"
    assert specs["grow-dataset"].entrypoint.startswith("src/trajsynth/flows/")


def test_package_files_run_as_modules_so_prefect_copies_nothing() -> None:
    # a file entrypoint makes Prefect's engine copy the project folder into the flow run's
    # working directory; one inside the installed package is imported as a module instead
    entry = "src/trajsynth/flows/grow.py:grow_dataset"
    assert module_entrypoint(REPO, entry) == "trajsynth.flows.grow.grow_dataset"
    assert module_entrypoint(REPO, "bench/dask.py:main") == "bench/dask.py:main"


def test_the_repo_deployments_build_from_settings(tmp_path: Path, monkeypatch) -> None:
    settings = _settings(tmp_path)
    monkeypatch.chdir(tmp_path)
    deployments = {d.name: d for d in build_deployments(REPO / "prefect.yaml", settings)}
    grow, export = deployments["grow-dataset"], deployments["export"]
    assert grow.entrypoint == "trajsynth.flows.grow.grow_dataset"
    assert grow.parameters["store_path"] == str(tmp_path / "s.duckdb")
    assert grow.parameters["task_runner"] == "thread"
    assert RunConfig.model_validate(grow.parameters["config"]).seed == 4
    assert export.entrypoint == "trajsynth.flows.stages.export_stage"
    assert export.parameters["out_dir"] == str(tmp_path / "data" / "export")
    assert export.concurrency_limit == 1


@pytest.mark.parametrize(
    ("cron", "timezone", "expected"),
    [
        ("61 * * * *", "UTC", "Invalid cron string"),
        ("every day", "UTC", "Invalid cron string"),
        ("0 3 * * *", "Mars/Base", "Invalid timezone"),
    ],
)
def test_a_schedule_that_does_not_parse(
    tmp_path: Path, cron: str, timezone: str, expected: str
) -> None:
    path = _project(
        tmp_path,
        f"""
        - name: nightly
          entrypoint: flows_here.py:tiny
          schedules:
            - cron: "{cron}"
              timezone: {timezone}
        """,
    )
    with pytest.raises(InputError) as err:
        load_project(path)
    message = str(err.value)
    assert str(path) in message and "'nightly'" in message and "schedules[0]" in message
    assert expected in message


@pytest.mark.parametrize(
    ("entrypoint", "expected"),
    [
        ("flows_here.py:missing", "'missing' not found"),
        ("nowhere.py:tiny", "no file"),
        ("flows_here.py:not_a_flow", "not a flow"),
        ("flows_here:tiny", "is not 'path/to/file.py:flow_function'"),
    ],
)
def test_a_deployment_naming_a_missing_flow(tmp_path: Path, entrypoint: str, expected: str):
    path = _project(tmp_path, f"- name: d\n  entrypoint: {entrypoint}\n")
    with pytest.raises(InputError) as err:
        build_deployments(path, _settings(tmp_path))
    assert "deployment 'd': entrypoint" in str(err.value)
    assert expected in str(err.value)


def test_parameters_come_from_the_file_then_the_settings(tmp_path: Path) -> None:
    path = _project(
        tmp_path,
        """
        - name: d
          entrypoint: flows_here.py:tiny
          parameters:
            note: hello
            config: {samples: 2}
          schedules:
            - cron: "*/5 * * * *"
              timezone: Europe/Paris
        """,
    )
    (deployment,) = build_deployments(path, _settings(tmp_path))
    params = deployment.parameters
    assert params["note"] == "hello" and params["store_path"] == str(tmp_path / "s.duckdb")
    config = RunConfig.model_validate(params["config"])
    assert (config.tasks, config.seed, config.samples) == (3, 4, 2)  # settings, then file
    assert deployment.schedules[0].schedule.cron == "*/5 * * * *"
    assert deployment.schedules[0].schedule.timezone == "Europe/Paris"
    assert deployment.entrypoint == "flows_here.py:tiny"


def test_parameter_errors_are_named(tmp_path: Path) -> None:
    unknown = _project(
        tmp_path, "- name: d\n  entrypoint: flows_here.py:tiny\n  parameters: {x: 1}"
    )
    with pytest.raises(InputError, match=r"parameters \['x'\] are not parameters of flow 'tiny'"):
        build_deployments(unknown, _settings(tmp_path))
    missing = _project(tmp_path, "- name: d\n  entrypoint: flows_here.py:needs_more\n")
    with pytest.raises(InputError, match="needs parameter 'out_dir'"):
        build_deployments(missing, _settings(tmp_path))
    bad_config = _project(
        tmp_path, "- name: d\n  entrypoint: flows_here.py:tiny\n  parameters: {config: {tasks: 0}}"
    )
    with pytest.raises(InputError, match=r"parameters.config.tasks"):
        build_deployments(bad_config, _settings(tmp_path))


def test_synth_deploy_reports_a_bad_schedule_before_touching_prefect(tmp_path: Path) -> None:
    path = _project(
        tmp_path,
        '- name: d\n  entrypoint: flows_here.py:tiny\n  schedules:\n    - cron: "1 2 3"\n',
    )
    result = CliRunner().invoke(app, ["deploy", "--project", str(path)])
    assert result.exit_code != 0
    assert isinstance(result.exception, InputError)
    assert "Invalid cron string" in str(result.exception)
    path = _project(tmp_path, "- name: d\n  entrypoint: flows_here.py:tiny\n")
    named = CliRunner().invoke(app, ["serve", "--project", str(path), "--name", "other"])
    assert "no deployment named ['other']" in str(named.exception)


def test_next_seed_counts_completed_runs_of_the_same_config(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.duckdb")
    base = RunConfig(tasks=2, seed=10)
    assert next_seed(store, base) == 10  # no store yet
    rows = []
    for i, (seed, state, tasks) in enumerate(
        [(10, "completed", 2), (11, "completed", 2), (12, "running", 2), (10, "completed", 5)]
    ):
        config = base.model_copy(update={"seed": seed, "tasks": tasks}).model_dump(mode="json")
        rows.append({"run_id": f"r{i}", "state": state, "config": config, "manifest": {}})
    store.insert("runs", rows)
    # two finished firings of this config; the crashed third (seed 12) is resumed next
    assert next_seed(store, base) == 12


def _comparable(spec) -> dict:
    data = spec.model_dump(exclude={"entrypoint"})
    return data


def test_the_packaged_definitions_agree_with_the_repo_prefect_yaml() -> None:
    """The package ships the deployments (any folder); prefect.yaml stays for `prefect deploy`."""
    from trajsynth.flows.deployments import load_flow, packaged

    shipped = packaged()
    assert shipped.is_file() and shipped.parent.name == "data"
    ours = {s.name: s for s in load_project(shipped)}
    repo = {s.name: s for s in load_project(REPO / "prefect.yaml")}
    assert set(ours) == set(repo) == {"grow-dataset", "export"}
    for name, spec in ours.items():
        assert _comparable(spec) == _comparable(repo[name])
        # the same flow object: the module path and the repo's file path name one function
        assert load_flow(shipped.parent, spec, shipped) is load_flow(REPO, repo[name])


def test_the_packaged_deployments_build_from_any_folder(tmp_path: Path, monkeypatch) -> None:
    settings = _settings(tmp_path)
    monkeypatch.chdir(tmp_path)  # no prefect.yaml here
    assert not (tmp_path / "prefect.yaml").exists()
    deployments = {d.name: d for d in build_deployments(None, settings)}
    grow, export = deployments["grow-dataset"], deployments["export"]
    assert grow.entrypoint == "trajsynth.flows.grow.grow_dataset"
    assert grow.schedules[0].schedule.cron == "0 3 * * *"
    assert grow.parameters["store_path"] == str(tmp_path / "s.duckdb")
    assert export.entrypoint == "trajsynth.flows.stages.export_stage"
    assert export.parameters["out_dir"] == str(tmp_path / "data" / "export")
    assert (grow.concurrency_limit, export.tags) == (1, ["trajsynth", "export"])


def test_a_module_entrypoint_that_names_nothing(tmp_path: Path) -> None:
    path = _project(tmp_path, "- name: d\n  entrypoint: trajsynth.flows.grow.no_such_flow\n")
    with pytest.raises(InputError, match="deployment 'd': entrypoint") as err:
        build_deployments(path, _settings(tmp_path))
    assert "no_such_flow" in str(err.value)


def test_synth_deploy_outside_the_checkout_reaches_the_api_check(
    tmp_path: Path, monkeypatch
) -> None:
    """From a folder with no prefect.yaml the definitions still load; what stops it here is
    the missing Prefect server, named in one line."""
    monkeypatch.chdir(tmp_path)
    settings = tmp_path / "synth.toml"
    settings.write_text(f'store_path = "{tmp_path / "s.duckdb"}"\n')
    result = CliRunner().invoke(
        app, ["--config", str(settings), "deploy"], env={"PREFECT_API_URL": ""}
    )
    assert isinstance(result.exception, InputError), result.output
    assert "PREFECT_API_URL is not set" in str(result.exception)
