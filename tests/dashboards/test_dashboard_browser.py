"""The dashboard in a real headless Chromium (Debian's ``chromium``), served by ``synth
dashboard`` on a free loopback port over a store of known rows. Screenshots go to
``$TRAJSYNTH_SHOTS`` (default ``/tmp/trajsynth-dashboard-shots``) to be looked at."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from trajsynth.dashboards import free_port, wait_until_ready
from trajsynth.store import Store
from trajsynth.store.summary import summarize_run

pytestmark = pytest.mark.slow

SHOTS = Path(os.environ.get("TRAJSYNTH_SHOTS", "/tmp/trajsynth-dashboard-shots"))
# /usr/bin/chromium is Debian's wrapper script; Playwright drives the binary behind it.
_CANDIDATES = ("/usr/lib/chromium/chromium", shutil.which("chromium") or "")
CHROMIUM = next((p for p in _CANDIDATES if p and Path(p).is_file()), None)
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="no chromium binary (apt-get install chromium)"
)


def sync_playwright():
    """Playwright, imported when a test runs (0.4 s that every collecting worker paid)."""
    api = pytest.importorskip("playwright.sync_api", reason="playwright not installed")
    return api.sync_playwright()


# the flags of /work/.library/env/machines/python.md: no sandbox as root, and no background
# connections this machine's closed network would refuse
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-quic",
    "--no-first-run", "--disable-background-networking", "--disable-component-update",
    "--disable-sync",
]  # fmt: skip
N_CHARTS = 6  # rounds, clusters, modes, roles, the rollout tree, the quotient graph


@pytest.fixture
def server(known_store: Store, tmp_path: Path) -> Iterator[str]:
    """``synth dashboard`` on a free loopback port; yields its URL, stops it afterwards."""
    port = free_port()
    log = tmp_path / "dashboard.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "trajsynth.cli", "dashboard",
             "--store", str(known_store.path), "--port", str(port)],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_ready(url, timeout_s=90, process=proc)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    assert proc.returncode is not None, log.read_text()


def _wait_rendered(page) -> None:
    """Every section drawn: the six plotly charts, the tree's nodes among them. (A first
    render on a loaded 2-core machine took over 60 s in CI: the wait is generous, the
    assertions after it are not.)"""
    page.wait_for_function(
        f"document.querySelectorAll('.js-plotly-plot .main-svg').length >= {N_CHARTS}",
        timeout=180_000,
    )
    page.wait_for_selector(".st-key-tree_chart .js-plotly-plot g.textpoint", timeout=180_000)


def _full_screenshot(page, path: Path) -> None:
    """Streamlit scrolls inside its main block: grow the viewport to its height first."""
    height = page.evaluate(
        "Math.max(...[...document.querySelectorAll('[data-testid=\"stMain\"], section, body')]"
        ".map(e => e.scrollHeight))"
    )
    page.set_viewport_size({"width": 1400, "height": min(int(height) + 100, 12_000)})
    page.wait_for_timeout(500)
    path.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(path), full_page=True)


def _metric(page, label: str) -> str:
    """The value a metric shows, found by its label."""
    box = page.locator('[data-testid="stMetric"]').filter(has_text=label).first
    return box.locator('[data-testid="stMetricValue"]').inner_text().strip()


@needs_chromium
def test_dashboard_shows_the_store_in_chromium(server: str, known_store: Store) -> None:
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(server, wait_until="domcontentloaded")
            _wait_rendered(page)
            body = page.inner_text("body")

            # runs and their state; the newest run (run-alpha) is the one shown
            assert "run-alpha" in body and "run-beta" in body
            assert "finished" in body and "running" in body
            assert _metric(page, "Pass rate") == "57.1%"  # 4 of 7 (the excluded one left out)

            # per-verified costs and wall time: the very numbers of the run summary (the stored
            # wall time, tokens of every LLM call), not sums over trajectories (16 s, 1,200)
            summary = summarize_run(known_store, "run-alpha", wall_s=120.0)
            assert summary.tokens_per_verified is not None and summary.passed == 4
            assert _metric(page, "Tokens / passed") == f"{summary.tokens_per_verified:,.0f}"
            assert _metric(page, "Seconds / passed") == f"{summary.wall_s / summary.passed:,.2f}"
            assert _metric(page, "Wall time") == f"{summary.wall_s:,.1f} s" == "120.0 s"

            # per-round figures in the chart itself (plotly SVG text) and in the table
            charts = page.locator(".js-plotly-plot")
            round_chart = " ".join(charts.nth(0).locator("text").all_text_contents())
            for value in ("0.693", "1.099", "0.562", "1.040", "4.250", "5.500", "0.333"):
                assert value in round_chart, (value, round_chart)
            # pass rates by cluster and by mode, drawn as bar labels (excluded left out)
            cluster_chart = charts.nth(1).locator("text").all_text_contents()
            assert {"75.0%", "33.3%", "shop", "calendar"} <= set(cluster_chart)
            mode_chart = charts.nth(2).locator("text").all_text_contents()
            assert {"100.0%", "33.3%", "0.0%", "plan-first", "recover"} <= set(mode_chart)
            # tokens by role: the table shows the sums of llm_calls
            assert "600" in body and "148" in body

            # the rollout tree: full width of the page's main block, 8 nodes in layers
            content = page.locator('[data-testid="stMainBlockContainer"]').evaluate(
                "el => { const s = getComputedStyle(el);"
                " return el.clientWidth - parseFloat(s.paddingLeft) - parseFloat(s.paddingRight); }"
            )
            tree = page.locator(".st-key-tree_chart .js-plotly-plot")
            tree_box = tree.bounding_box()
            half = charts.nth(1).bounding_box()  # the cluster chart, in a half-width column
            assert tree_box and half
            assert tree_box["width"] >= 0.97 * content, (tree_box, content)
            assert tree_box["width"] > 1.8 * half["width"], (tree_box, half)
            labels = tree.locator("g.textpoint text").all_text_contents()
            assert len(labels) == 8, labels  # root, 2 middle, 1 pruned, 4 leaves
            flat = " ".join(labels)
            assert flat.count("pass") == 3 and flat.count("fail") == 1
            assert "pruned: repeated_call" in flat and "root" in flat
            # zoom and pan: plotly's mode bar, drag pans
            assert tree.locator(".modebar").count() == 1
            assert tree.evaluate("el => el.layout.dragmode") == "pan"
            # nodes sit in one column per depth (layered), none on top of another
            xs = tree.evaluate("el => el.data[1].x")
            ys = tree.evaluate("el => el.data[1].y")
            assert sorted(set(xs)) == [0.0, 1.0, 2.0]
            assert len(set(zip(xs, ys, strict=True))) == 8

            # the quotient graph: full width too, short labels on the nodes
            quotient = page.locator(".st-key-quotient_chart .js-plotly-plot")
            q_box = quotient.bounding_box()
            assert q_box and q_box["width"] >= 0.97 * content
            q_labels = set(quotient.locator("g.textpoint text").all_text_contents())
            assert {"start", "success", "fail", "S1", "E1"} <= q_labels
            # the quotient graph's metrics: a table drawn after the chart (wait for it: a loaded
            # machine renders the page in pieces)
            page.wait_for_selector("text=rl_score", timeout=60_000)
            body = page.inner_text("body")
            assert "rl_score" in body and "0.340" in body

            # the tree's trajectories link to their transcripts; tasks link to their task
            links = page.locator('a[href*="trajectory="]')
            assert links.count() == 4
            href = page.locator('a[href*="trajectory=task-a1-t3"]').get_attribute("href")
            assert page.locator('a[href*="task=task-a2"]').count() >= 1

            _full_screenshot(page, SHOTS / "dashboard.png")
            assert (SHOTS / "dashboard.png").stat().st_size > 10_000
            page.set_viewport_size({"width": 1400, "height": 1000})
            tree.scroll_into_view_if_needed()
            tree.screenshot(path=str(SHOTS / "rollout-tree.png"))
            quotient.screenshot(path=str(SHOTS / "quotient-graph.png"))

            # the transcript page of a failed trajectory: turns, calls, verdict with why
            assert href is not None and href.startswith("?trajectory=")
            page.goto(server + "/" + href, wait_until="domcontentloaded")
            page.wait_for_selector("text=Trajectory task-a1-t3", timeout=60_000)
            page.wait_for_selector("text=Signals fired", timeout=60_000)
            page.wait_for_selector("text=no such order", timeout=60_000)  # the folded result
            text = page.inner_text("body")
            assert "Verdict: FAILED" in text and "cluster shop" in text
            seen = ("user", "assistant", "call", "get_order", "X9", "no such order", "Sorry.",
                    "final_state", "order X9 does not exist", "tool_called")  # fmt: skip
            assert [w for w in seen if w not in text] == [], text
            assert "FAIL" in page.locator('[data-testid="stTable"]').inner_text()
            assert "`failure`" not in text and "failure, no_progress" in text  # signals fired
            _full_screenshot(page, SHOTS / "transcript.png")

            # a task link opens that task: its tree and its trajectories' transcript links
            task_href = page.evaluate("() => location.origin") + "/?task=task-a2"
            page.goto(task_href, wait_until="domcontentloaded")
            _wait_rendered(page)
            page.wait_for_selector("text=tree tree-task-a2: 7 nodes, 4 leaves", timeout=60_000)
            assert page.locator('a[href*="trajectory=task-a2-t3"]').count() == 1

            # the other run: its own figures, and the empty state for missing round figures
            page.goto(server, wait_until="domcontentloaded")
            _wait_rendered(page)
            page.locator('[data-testid="stSidebar"] [data-testid="stSelectbox"]').click()
            page.get_by_role("option", name="run-beta").click()
            page.wait_for_selector("text=Run run-beta", timeout=30_000)
            page.wait_for_selector("text=No round statistics yet", timeout=30_000)
            assert _metric(page, "Pass rate") == "100.0%"
            # still running: the time from its start to its last change (09:00 to 09:05), not
            # until now (a run that died unfinished showed 28,370,370 s)
            assert _metric(page, "Wall time") == "300.0 s"
            assert _metric(page, "Seconds / passed") == "300.00"
            page.screenshot(path=str(SHOTS / "dashboard-run-beta.png"))
        finally:
            browser.close()


WRITER = """
import sys, time
from datetime import datetime
sys.path.insert(0, {tests!r})
from fakes.dashboard_rows import merge, run_row, synthetic_rows
from trajsynth.store import Store

store = Store({path!r})
store.insert_many(run_row("run-live", "running", datetime(2026, 1, 3)))
for i in range(6):
    store.insert_many(synthetic_rows(8, run_id="run-live", seed=i, start=i * 8))
    time.sleep(0.3)
"""


@needs_chromium
def test_dashboard_loads_while_a_run_writes(server: str, known_store: Store) -> None:
    tests_dir = str(Path(__file__).resolve().parents[1])
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER.format(tests=tests_dir, path=str(known_store.path))]
    )
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(server, wait_until="domcontentloaded")
            _wait_rendered(page)  # the page renders fully while batches commit
            assert writer.wait(timeout=120) == 0
            page.wait_for_timeout(200)
            page.get_by_role("button", name="Refresh now").click()
            page.wait_for_selector("text=Run run-live", timeout=60_000)
            trajectories = page.locator('[data-testid="stMetric"]').first
            page.wait_for_function(
                "el => el.innerText.includes('48')", arg=trajectories.element_handle(),
                timeout=60_000,
            )  # fmt: skip
            assert "Trajectories" in trajectories.inner_text()
            assert "48" in trajectories.inner_text()  # 6 batches of 8, all committed
        finally:
            browser.close()
            if writer.poll() is None:
                writer.kill()
                writer.wait()
