"""Readings of the clock: told apart from stored dates, masked in probe results."""

from __future__ import annotations

import doctest
from datetime import UTC, datetime, timedelta

import pytest

from trajsynth.mcp_servers.environment.results import ToolResult, probe_value
from trajsynth.schemas import clock
from trajsynth.schemas.clock import CLOCK_MASK, mask_clock_readings, reads_the_clock

NOW = datetime(2026, 11, 26, 17, 20, tzinfo=UTC)


def test_the_doctests() -> None:
    assert doctest.testmod(clock).failed == 0


@pytest.mark.parametrize(
    ("value", "reads"),
    [
        ("2026-11-26T12:19:03-05:00", True),  # mcp-server-time
        ("2026-11-26T17:19:03.123Z", True),
        ("2026-11-26 17:19", True),  # naive: read as UTC
        ("Thu Nov 26 2026 17:13:56 GMT+0000 (Coordinated Universal Time)", True),  # node
        ("Thu, 26 Nov 2026 17:13:56 GMT", True),  # HTTP
        ("Thu Nov 26 17:13:56 2026", True),  # ctime
        ("2024-01-05T10:00:00", False),  # a stored date, long before
        ("2027-03-01T09:00:00Z", False),  # a meeting months ahead
        ("2026-11-26", False),  # a date alone is not a reading
        ("size: 32", False),
        (1795713540, True),
        (1795713540123, True),
        (32, False),
        (True, False),
    ],
)
def test_reads_the_clock(value: object, reads: bool) -> None:
    assert reads_the_clock(value, NOW) is reads


def test_server_filesystems_file_info_reads_the_same_in_the_same_state() -> None:
    """server-filesystem's get_file_info: the gold run wrote notes.txt at 17:13, a rollout
    wrote the same file at 17:19. Their end states must compare equal; the size must not."""

    def info(minutes_ago: int, size: int = 32) -> ToolResult:
        at = (datetime.now(UTC) - timedelta(minutes=minutes_ago)).strftime("%a %b %d %Y %H:%M:%S")
        text = (
            f"size: {size}\ncreated: {at} GMT+0000 (Coordinated Universal Time)"
            f"\nmodified: {at} GMT+0000 (Coordinated Universal Time)\n"
            "isDirectory: false\nisFile: true\npermissions: 644"
        )
        return ToolResult(text=text)

    gold, rollout = probe_value(info(6)), probe_value(info(0))
    assert gold == rollout
    assert isinstance(gold, str) and gold.count(CLOCK_MASK) == 2 and "size: 32" in gold
    assert probe_value(info(0, size=33)) != gold
    # structured results: a time field masked, a stored date kept
    row = {"id": 7, "updated_at": "2026-11-26T17:19:00Z", "due": "2024-01-05"}
    masked = mask_clock_readings(row, NOW)
    assert masked == {"id": 7, "updated_at": CLOCK_MASK, "due": "2024-01-05"}
