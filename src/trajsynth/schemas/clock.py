"""Values that read the clock: the current time as a tool reports it (no rollout can match a
gold run's reading of it).

A tool that reports "now" (a clock server's answer, a file's modification time, a record's
``created_at``) gives a new value on every run, so neither an answer nor an end state can be
compared with the gold run's copy of it. ``reads_the_clock`` tells such a value;
``mask_clock_readings`` writes ``<time>`` in its place inside a probe's result, so two
environments in the same state read the same.

Shared by ``mcp_servers`` (probe results) and ``agents`` (answer constraints), so it sits
with the records both import.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from typing import Any

__all__ = ["CLOCK_MASK", "mask_clock_readings", "reads_the_clock"]

CLOCK_MASK = "<time>"
# Wider than any UTC offset (a naive time is read as UTC), narrower than a stored date.
_WINDOW = timedelta(days=2)
_DAY = r"(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun)"
_MONTH = r"(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)"
_ISO = r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?"
# JavaScript's Date#toString: "Thu Nov 26 2026 17:13:56 GMT+0000 (Coordinated Universal Time)"
_JS = rf"{_DAY} {_MONTH} \d{{1,2}} \d{{4}} \d{{2}}:\d{{2}}:\d{{2}} GMT[+-]\d{{4}}(?: \([^)]*\))?"
# RFC 2822 / HTTP dates: "Thu, 26 Nov 2026 17:13:56 GMT"
_RFC = rf"{_DAY}, \d{{1,2}} {_MONTH} \d{{4}} \d{{2}}:\d{{2}}:\d{{2}} (?:GMT|UTC|[+-]\d{{4}})"
# C's ctime / Python's datetime.ctime: "Thu Nov 26 17:13:56 2026"
_CTIME = rf"{_DAY} {_MONTH} [ \d]\d \d{{2}}:\d{{2}}:\d{{2}} \d{{4}}"
# A time of day to the second, as JavaScript's toLocaleTimeString and many logs print it:
# "10:44:08 PM", "22:44:08" (a server's "resource created at ..."); without seconds it is
# more often data (a meeting at 10:30) than a reading of the clock.
_TOD = r"\d{1,2}:\d{2}:\d{2}(?:\.\d+)?(?: ?[AaPp]\.?[Mm]\.?(?![\w.]))?"
_READING = re.compile(rf"(?<![\w:.-])(?:{_ISO}|{_JS}|{_RFC}|{_CTIME}|{_TOD})(?![\w:])")
# A time of day has no date: it reads the clock when it is this near the time now (in UTC or
# in local time; a server prints either), around midnight included.
_TOD_WINDOW = timedelta(hours=3)


def _time_of_day(text: str) -> timedelta | None:
    """The time since midnight a time-of-day text names ("10:44:08 PM"), or None."""
    match = re.fullmatch(r"(\d{1,2}):(\d{2}):(\d{2})(?:\.\d+)?(?: ?([AaPp])\.?[Mm]\.?)?", text)
    if match is None:
        return None
    hour, minute, second = (int(match.group(i)) for i in (1, 2, 3))
    half = (match.group(4) or "").lower()
    if minute > 59 or second > 60 or hour > (12 if half else 23) or (half and hour == 0):
        return None
    if half:
        hour = hour % 12 + (12 if half == "p" else 0)
    return timedelta(hours=hour, minutes=minute, seconds=second)


def _near_time_of_day(of_day: timedelta, now: datetime) -> bool:
    day = timedelta(days=1)
    for clock in (now.astimezone(UTC), now.astimezone()):
        since = timedelta(hours=clock.hour, minutes=clock.minute, seconds=clock.second)
        gap = abs(since - of_day)
        if min(gap, day - gap) <= _TOD_WINDOW:
            return True
    return False


def _reads_now(text: str, now: datetime) -> bool:
    """Whether a matched date-time or time-of-day text is a reading of the clock ``now``."""
    of_day = _time_of_day(text)
    if of_day is not None:
        return _near_time_of_day(of_day, now)
    moment = _moment(text)
    return moment is not None and _near(moment, now)


def _moment(text: str) -> datetime | None:
    """The instant a date-time text names, or None when it is not one."""
    try:
        if text[:1].isdigit():
            parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
        elif " GMT" in text and "," not in text:
            parsed = datetime.strptime(text.split(" (")[0], "%a %b %d %Y %H:%M:%S GMT%z")
        elif "," in text:
            parsed = parsedate_to_datetime(text)
        else:
            parsed = datetime.strptime(" ".join(text.split()), "%a %b %d %H:%M:%S %Y")
    except (ValueError, TypeError, IndexError):
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _near(moment: datetime, now: datetime) -> bool:
    return abs(moment - now) <= _WINDOW


def reads_the_clock(value: Any, now: datetime | None = None) -> bool:
    """Whether ``value`` is the current time as a tool would report it: a date-time text, or
    Unix seconds or milliseconds, within two days of ``now``.

    >>> now = datetime(2026, 11, 26, 14, 48, tzinfo=UTC)
    >>> [reads_the_clock(v, now) for v in ("2026-11-26T09:47:50-05:00", "2026-11-26",
    ...     "2024-01-05T10:00:00", 1795704480, 1795704480123, 54.2, "Thursday",
    ...     "Thu Nov 26 2026 14:13:56 GMT+0000 (Coordinated Universal Time)")]
    [True, False, False, True, True, False, False, True]
    >>> [reads_the_clock(v, now) for v in ("2:48:07 PM", "14:47:59", "3:10:00 AM", "14:48")]
    [True, True, False, False]
    """
    now = now or datetime.now(UTC)
    if isinstance(value, str):
        match = _READING.fullmatch(value.strip())
        return match is not None and _reads_now(match.group(0), now)
    if isinstance(value, int | float) and not isinstance(value, bool):
        return any(
            abs(value / scale - now.timestamp()) <= _WINDOW.total_seconds()
            for scale in (1.0, 1000.0)
        )
    return False


def mask_clock_readings(value: Any, now: datetime | None = None) -> Any:
    """``value`` (JSON) with every reading of the clock replaced by ``<time>``: date-times
    inside texts, and numbers that are Unix times near ``now`` where a key names a time.

    >>> now = datetime(2026, 11, 26, 17, 20, tzinfo=UTC)
    >>> mask_clock_readings("size: 32\\nmodified: Thu Nov 26 2026 17:13:56 GMT+0000 (UTC)\\n"
    ...                     "born: 1990-05-01T08:00:00Z", now)
    'size: 32\\nmodified: <time>\\nborn: 1990-05-01T08:00:00Z'
    >>> mask_clock_readings("Resource 1: a plaintext resource created at 5:19:58 PM; "
    ...                     "open 09:00:00-17:00:00", now)
    'Resource 1: a plaintext resource created at <time>; open 09:00:00-17:00:00'
    >>> mask_clock_readings({"mtime": 1795713180, "size": 1795713180, "at": ["2026-11-26 17:19"]},
    ...                     now)
    {'mtime': '<time>', 'size': 1795713180, 'at': ['<time>']}
    """
    now = now or datetime.now(UTC)

    def text(s: str) -> str:
        def swap(match: re.Match[str]) -> str:
            return CLOCK_MASK if _reads_now(match.group(0), now) else match.group(0)

        return _READING.sub(swap, s)

    def walk(node: Any, key: str = "") -> Any:
        if isinstance(node, str):
            return text(node)
        if isinstance(node, dict):
            return {k: walk(v, str(k)) for k, v in node.items()}
        if isinstance(node, list):
            return [walk(v, key) for v in node]
        if _TIME_KEY.search(key) and reads_the_clock(node, now):
            return CLOCK_MASK
        return node

    return walk(value)


# A number is a time only where its key says so (a size may happen to be near 1.8e9).
_TIME_KEY = re.compile(r"(?i)(time|date|stamp|created|modified|updated|accessed|_at$|^at$)")
