"""The image recipe: its tag follows its inputs; the Docker part builds or finds it."""

from __future__ import annotations

import re

import pytest

from trajsynth.sandboxes import image


def test_tag_is_a_hash_of_the_inputs(monkeypatch: pytest.MonkeyPatch) -> None:
    tag = image.image_tag()
    assert re.fullmatch(r"trajsynth-sandbox:[0-9a-f]{12}", tag)
    assert image.image_tag() == tag  # stable
    monkeypatch.setattr(image, "site_requirements", lambda: ["mcp==0.0.1"])
    assert image.image_tag() != tag
    monkeypatch.undo()
    monkeypatch.setattr(image, "BUILD_VERSION", image.BUILD_VERSION + 1)
    assert image.image_tag() != tag


def test_inputs_pin_the_host_mcp_version() -> None:
    import importlib.metadata

    assert image.image_inputs()["site"] == [f"mcp=={importlib.metadata.version('mcp')}"]
    assert image.image_inputs()["rootfs"]["suite"] == "bookworm"


def test_wheels_are_picked_for_the_image_glibc() -> None:
    args = image._pip_target_args()
    platforms = [args[i + 1] for i, a in enumerate(args) if a == "--platform"]
    minors = [int(m.group(1)) for p in platforms if (m := re.search(r"manylinux_2_(\d+)_", p))]
    assert max(minors) == image.GLIBC_MINOR == 36  # nothing newer than bookworm's glibc
    assert "--only-binary=:all:" in args
    assert args[args.index("--python-version") + 1] == "3.11"


@pytest.mark.docker
def test_ensure_image_builds_once_then_finds_it(sandbox_image: str) -> None:
    assert sandbox_image == image.image_tag()
    assert image.image_exists(sandbox_image)
    assert image.ensure_image() == sandbox_image  # present: no rebuild
    assert not image.image_exists("trajsynth-sandbox:does-not-exist")
