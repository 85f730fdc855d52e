"""What every `synth` command shares: the settings of the file the command line named.

``main.py`` mounts the command modules and records ``--config`` here before any command runs;
a command reads the settings with ``current_settings()``. This module sits below ``main.py`` and
the commands, so the commands reach the settings without importing the module that imports
them.
"""

from __future__ import annotations

from pathlib import Path

from trajsynth.cli.settings import Settings, load_settings

__all__ = ["current_settings", "use_config"]


class _State:
    config: Path | None = None


def use_config(config: Path | None) -> None:
    """The settings file ``--config`` named (None: ./synth.toml, else the defaults)."""
    _State.config = config


def current_settings() -> Settings:
    """The settings of this command: the file ``--config`` named, read now."""
    return load_settings(_State.config)
