"""The startup check (`GET /v1/models`) sends the API key, as the run's requests do."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator

import pytest
from pydantic import SecretStr

from trajsynth.cli.run_command import check_reachable
from trajsynth.schemas import InputError

KEY = "sk-test-needed"


class _KeyedModels(http.server.BaseHTTPRequestHandler):
    """/v1/models that answers 401 unless the bearer key is KEY (a hosted API's behaviour)."""

    seen: list[str | None] = []

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        auth = self.headers.get("Authorization")
        type(self).seen.append(auth)
        ok = auth == f"Bearer {KEY}"
        body = b'{"object":"list","data":[]}' if ok else b'{"error":"missing key"}'
        self.send_response(200 if ok else 401)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def keyed_server() -> Iterator[str]:
    _KeyedModels.seen = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _KeyedModels)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


def test_the_check_sends_the_key_and_passes(keyed_server: str) -> None:
    check_reachable(keyed_server, SecretStr(KEY))
    assert _KeyedModels.seen == [f"Bearer {KEY}"]


def test_a_refused_key_is_one_line_naming_the_setting(keyed_server: str) -> None:
    with pytest.raises(InputError) as err:
        check_reachable(keyed_server, SecretStr("sk-wrong"))
    message = str(err.value)
    assert "refused the API key given (HTTP 401" in message and "SYNTH_LLM__API_KEY" in message
    assert "sk-wrong" not in message  # the key itself is never printed
    with pytest.raises(InputError, match="refused no API key"):
        check_reachable(keyed_server, None)
    assert _KeyedModels.seen[-1] is None


def test_nothing_listening_is_still_its_own_line() -> None:
    import socket

    with socket.socket() as s:  # a port nothing listens on (bound, never listening)
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        with pytest.raises(InputError, match="nothing answers"):
            check_reachable(f"http://127.0.0.1:{port}/v1", None, timeout_s=2)
