"""The end-of-`make test` summary names a failure of any part, read from real JUnit XML."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.parts_summary import main, read_part, summary

pytest_plugins = ["pytester"]


def _junit(pytester: pytest.Pytester, directory: Path, part: str, source: str) -> None:
    test_file = pytester.makepyfile(**{f"test_{part.replace('-', '_')}": source})
    pytester.runpytest_inprocess(
        str(test_file),
        "-p",
        "no:cacheprovider",
        "-p",
        "no:asyncio",
        f"--junitxml={directory}/junit-{part}.xml",
    )


def test_a_failure_in_an_early_part_is_named_with_its_message(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    reports = tmp_path / "reports"
    _junit(
        pytester,
        reports,
        "fast",
        "def test_ok():\n    pass\n\n"
        "def test_wrong():\n    assert 1 + 1 == 3, 'arithmetic moved'\n",
    )
    _junit(pytester, reports, "tiers-alone", "def test_fine():\n    pass\n")

    text = summary(reports, {"fast": "1", "tiers-alone": "0", "pyright": "0"})

    assert "fast: exit 1: 1 passed, 1 failed, 0 errors, 0 skipped" in text
    assert "tiers-alone: exit 0: 1 passed, 0 failed" in text
    assert text.index("fast:") < text.index("tiers-alone:") < text.index("pyright: exit 0")
    assert "FAILURE test_fast::test_wrong" in text
    assert "arithmetic moved" in text


def test_an_unreadable_report_is_said_not_skipped(tmp_path: Path) -> None:
    (tmp_path / "junit-tiers-shared.xml").write_text("<testsuites><testsuite")
    part = read_part(tmp_path / "junit-tiers-shared.xml")
    assert part.failed and part.failed[0].kind == "unreadable"


def test_without_a_directory_it_says_how_to_call_it(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert "parts_summary.py DIR" in capsys.readouterr().err
