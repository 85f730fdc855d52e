"""Prefect's ephemeral API started in the background and waited for by us: a start that fails
or takes too long is one line naming what to do, never Prefect's bare traceback."""

from __future__ import annotations

import pytest

from trajsynth.flows import api


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(api, "_start", None)
    monkeypatch.setattr(api, "_ephemeral", lambda: True)


def test_a_start_that_fails_is_one_line(fresh: None, monkeypatch: pytest.MonkeyPatch) -> None:
    class Failing:
        def start(self, timeout: int) -> None:
            raise RuntimeError("Timed out while attempting to connect.\nstdout: ...")

    monkeypatch.setattr(api, "_server", Failing)
    api.start_api()
    with pytest.raises(api.PrefectAPIUnavailable) as caught:
        api.wait_api()
    message = str(caught.value)
    assert "\n" not in message and "Timed out while attempting to connect." in message
    assert "PREFECT_API_URL" in message


def test_a_start_that_hangs_is_reported_after_our_budget(
    fresh: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading

    release = threading.Event()

    class Hanging:
        def start(self, timeout: int) -> None:
            release.wait(30)

    monkeypatch.setattr(api, "_server", Hanging)
    try:
        with pytest.raises(api.PrefectAPIUnavailable, match="did not start in 0 s"):
            api.wait_api(timeout_s=0.2)
    finally:
        release.set()


def test_a_configured_server_is_left_to_prefect(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(api, "_start", None)
    # (not through the environment: Prefect fixes its settings when it is first imported)
    monkeypatch.setattr(api, "_ephemeral", lambda: False)
    api.wait_api(timeout_s=0.1)  # returns at once: nothing of ours to wait for
    assert not api.api_started()


@pytest.mark.slow
def test_the_real_server_starts_in_the_background_and_answers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import httpx

    monkeypatch.setattr(api, "_start", None)
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    api.start_api()
    api.wait_api(timeout_s=180)
    server = api._server()
    assert httpx.get(f"{server.api_url}/health", timeout=10).status_code == 200
