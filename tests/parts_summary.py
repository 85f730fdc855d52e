"""Print what each part of `make test` did, last, so the tail of a CI log names every failure.

`make test` runs its parts one after another (fast tier, shared part, alone part, pyright) and
only the last part's output ends the log; a CI that keeps the tail would hide a failure of an
earlier part. This reads each part's JUnit XML and prints, per part, its counts and time, then
every failing or erroring test with the first lines of its message.

    python tests/parts_summary.py DIR [PART=EXIT ...]
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from pathlib import Path

from pydantic import BaseModel

MESSAGE_LINES = 6
LINE_CHARS = 300  # a Hypothesis failure's first line holds its whole case


class Failure(BaseModel):
    test: str
    kind: str
    message: str


class PartReport(BaseModel):
    name: str
    tests: int = 0
    failures: int = 0
    errors: int = 0
    skipped: int = 0
    seconds: float = 0.0
    failed: list[Failure] = []


def read_part(path: Path) -> PartReport:
    name = path.stem.removeprefix("junit-")
    try:
        root = ET.parse(path).getroot()
    except (ET.ParseError, OSError) as exc:
        unreadable = Failure(test=str(path), kind="unreadable", message=str(exc))
        return PartReport(name=name, failed=[unreadable])
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    report = PartReport(name=name)
    for suite in suites:
        report.tests += int(suite.get("tests", 0))
        report.failures += int(suite.get("failures", 0))
        report.errors += int(suite.get("errors", 0))
        report.skipped += int(suite.get("skipped", 0))
        report.seconds += float(suite.get("time", 0.0))
        for case in suite.iter("testcase"):
            for outcome in ("failure", "error"):
                for element in case.findall(outcome):
                    test = f"{case.get('classname', '')}::{case.get('name', '')}"
                    text = (element.get("message") or "") + "\n" + (element.text or "")
                    lines = [
                        line[:LINE_CHARS] for line in text.strip().splitlines() if line.strip()
                    ]
                    report.failed.append(
                        Failure(test=test, kind=outcome, message="\n".join(lines[:MESSAGE_LINES]))
                    )
    return report


def summary(directory: Path, exits: dict[str, str]) -> str:
    """One line per part, in the order the parts ran: its exit (where given), its counts and
    time, then each of its failures; then the exits of parts without a report (pyright)."""
    lines = ["", "== make test: every part =="]
    exits = dict(exits)  # the caller's stays as given; a part printed here is taken out
    reports = sorted(directory.glob("junit-*.xml"), key=lambda path: path.stat().st_mtime)
    for path in reports:
        part = read_part(path)
        passed = part.tests - part.failures - part.errors - part.skipped
        code = f"exit {exits.pop(part.name)}: " if part.name in exits else ""
        lines.append(
            f"{part.name}: {code}{passed} passed, {part.failures} failed, {part.errors} errors, "
            f"{part.skipped} skipped in {part.seconds:.1f} s"
        )
        for failure in part.failed:
            lines.append(f"  {failure.kind.upper()} {failure.test}")
            lines.extend(f"    {line}" for line in failure.message.splitlines())
    lines.extend(f"{name}: exit {code}" for name, code in exits.items())
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    exits = dict(arg.split("=", 1) for arg in argv[1:] if "=" in arg)
    print(summary(Path(argv[0]), exits))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
