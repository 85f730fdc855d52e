"""The dashboard in a real headless Chromium (Debian's ``chromium``), served by ``synth
dashboard`` on a free loopback port over a store of known rows; a screenshot is saved under
``test-artifacts/``."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from trajsynth.dashboards import free_port, wait_until_ready
from trajsynth.store import Store

pytestmark = pytest.mark.slow

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
# /usr/bin/chromium is Debian's wrapper script; Playwright drives the binary behind it.
_CANDIDATES = ("/usr/lib/chromium/chromium", shutil.which("chromium") or "")
CHROMIUM = next((p for p in _CANDIDATES if p and Path(p).is_file()), None)
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="no chromium binary (apt-get install chromium)"
)
playwright = pytest.importorskip("playwright.sync_api", reason="playwright not installed")


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
    """Every section drawn: the quotient graph image, the tree and the four charts."""
    page.wait_for_selector('[data-testid="stImage"] img', timeout=60_000)
    page.wait_for_selector('[data-testid="stGraphVizChart"] svg g.node', timeout=60_000)
    page.wait_for_function(
        "document.querySelectorAll('.js-plotly-plot .main-svg').length >= 4", timeout=60_000
    )


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


@needs_chromium
def test_dashboard_shows_the_store_in_chromium(server: str) -> None:
    with playwright.sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=CHROMIUM,
            args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
        )
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(server, wait_until="domcontentloaded")
            _wait_rendered(page)
            body = page.inner_text("body")

            # runs and their state; the newest run (run-alpha) is the one shown
            assert "run-alpha" in body and "run-beta" in body
            assert "finished" in body and "running" in body
            metrics = page.locator('[data-testid="stMetric"]').all_inner_texts()
            assert any("Pass rate" in m and "57.1%" in m for m in metrics), metrics  # 4 of 7
            assert any("Tokens / verified" in m and "300" in m for m in metrics), metrics
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
            # the task's rollout tree (8 nodes: root, 2 middle, 1 pruned, 4 leaves) and graph
            tree = page.locator('[data-testid="stGraphVizChart"] svg')
            assert tree.locator("g.node").count() == 8
            tree_text = " ".join(tree.locator("text").all_text_contents())
            assert tree_text.count("pass") == 3 and tree_text.count("fail") == 1
            assert "pruned: repeated_call" in tree_text
            image = page.locator('[data-testid="stImage"] img')
            assert image.evaluate("img => img.complete && img.naturalWidth > 0")
            assert "rl_score" in body and "0.340" in body  # the quotient graph's metrics

            _full_screenshot(page, ARTIFACTS / "dashboard.png")
            assert (ARTIFACTS / "dashboard.png").stat().st_size > 10_000

            # the other run: its own figures, and the empty state for missing round figures
            page.locator('[data-testid="stSidebar"] [data-testid="stSelectbox"]').click()
            page.get_by_role("option", name="run-beta").click()
            page.wait_for_selector("text=Run run-beta", timeout=30_000)
            page.wait_for_selector("text=No round statistics yet", timeout=30_000)
            metrics = page.locator('[data-testid="stMetric"]').all_inner_texts()
            assert any("Pass rate" in m and "100.0%" in m for m in metrics), metrics
            page.screenshot(path=str(ARTIFACTS / "dashboard-run-beta.png"))
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
    with playwright.sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=CHROMIUM,
            args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
        )
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
