"""The settings every command reads come from ``cli/context.py``, and no module imports
``cli/main.py`` back.

``main.py`` mounts the command modules; a command that imported ``main`` for the settings
closed a circle through every command module. The check walks every import of ``cli/`` (lazy
ones inside functions included); its control finds the old import in the source it used to
be. The settings a command reads are the file ``--config`` named, through the real entry point.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

from fakes.cli import SynthRunner

import trajsynth.cli
from trajsynth.store import Store

CLI = Path(trajsynth.cli.__file__).parent


def _imports_main(source: str) -> bool:
    """Whether ``source`` imports ``trajsynth.cli.main`` anywhere (a function body included)."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.level == 0:
            if node.module == "trajsynth.cli.main":
                return True
            if node.module == "trajsynth.cli" and any(a.name == "main" for a in node.names):
                return True
        elif isinstance(node, ast.Import) and any(
            a.name == "trajsynth.cli.main" for a in node.names
        ):
            return True
    return False


def test_no_module_of_the_cli_imports_main_back() -> None:
    importers = sorted(
        p.relative_to(CLI).as_posix() for p in CLI.rglob("*.py") if _imports_main(p.read_text())
    )
    # __main__ is `python -m trajsynth.cli`: the process's entry, which nothing imports
    assert importers == ["__main__.py"]


def test_the_check_finds_a_lazy_import_of_main() -> None:
    old = (
        "def store_path_or_default(store_path):\n"
        "    from trajsynth.cli import main as cli\n"
        "    return cli.settings().store_path\n"
    )
    assert _imports_main(old)
    assert _imports_main("import trajsynth.cli.main\n")
    assert not _imports_main("from trajsynth.cli.context import current_settings\n")


def test_a_command_reads_the_settings_file_config_names(synth: SynthRunner, tmp_path: Path) -> None:
    mine = tmp_path / "elsewhere" / "mine.duckdb"
    mine.parent.mkdir()
    Store(mine).migrate()
    Store(mine).execute("create table marker as select 'mine' as whose")
    (tmp_path / "mine.toml").write_text(f'store_path = "{mine}"\n')
    ran = synth("-c", str(tmp_path / "mine.toml"), "query", "select whose from marker", "--json",
                cwd=tmp_path)  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout) == [{"whose": "mine"}]
    # the control: with no --config the same command reads the default store, not that one
    ran = synth("query", "select whose from marker", "--json", cwd=tmp_path)
    assert ran.returncode == 2
    assert f"no store at {Path('data/synth.duckdb')}" in ran.stderr
