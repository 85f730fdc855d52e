"""The embedded server's record of answered requests: a try whose request
was answered, by this process or by the one before a restart, is answered from the record
and computes nothing."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

from trajsynth.llm.answered import HEADER, AnsweredRequests


def _app(computed: list[str]) -> Starlette:
    async def chat(request: Request) -> JSONResponse:
        body = await request.json()
        computed.append(body["say"])
        if body["say"] == "fail":
            return JSONResponse({"error": "busy"}, status_code=503)
        return JSONResponse({"said": body["say"], "n": len(computed)})

    async def stream(request: Request) -> StreamingResponse:
        computed.append("stream")
        return StreamingResponse(iter([b"data: 1\n\n"]), media_type="text/event-stream")

    return Starlette(
        routes=[
            Route("/v1/chat/completions", chat, methods=["POST"]),
            Route("/v1/stream", stream, methods=["POST"]),
        ]
    )


def _post(
    app: AnsweredRequests, say: str, request_id: str | None, path: str = "/v1/chat/completions"
) -> httpx.Response:
    async def go() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://llm") as client:
            headers = {HEADER: request_id} if request_id else {}
            return await client.post(path, json={"say": say}, headers=headers)

    return asyncio.run(go())


def test_a_retry_of_an_answered_request_is_answered_from_the_record(tmp_path: Path) -> None:
    computed: list[str] = []
    server = AnsweredRequests(_app(computed), tmp_path)
    first = _post(server, "hello", "req-1")
    again = _post(server, "hello", "req-1")
    assert first.status_code == again.status_code == 200
    assert again.json() == first.json() == {"said": "hello", "n": 1}
    assert again.headers["content-type"] == first.headers["content-type"]
    assert computed == ["hello"]
    # the restarted server (a new process, the same folder) answers it too
    restarted = AnsweredRequests(_app(computed), tmp_path)
    assert _post(restarted, "hello", "req-1").json() == {"said": "hello", "n": 1}
    assert computed == ["hello"]


def test_other_ids_no_id_failures_and_streams_are_computed(tmp_path: Path) -> None:
    computed: list[str] = []
    server = AnsweredRequests(_app(computed), tmp_path)
    _post(server, "a", "req-a")
    _post(server, "b", "req-b")
    _post(server, "c", None)
    _post(server, "c", None)
    assert _post(server, "fail", "req-f").status_code == 503
    assert _post(server, "fail", "req-f").status_code == 503  # an error is not an answer
    _post(server, "s", "req-s", path="/v1/stream")
    _post(server, "s", "req-s", path="/v1/stream")
    assert computed == ["a", "b", "c", "c", "fail", "fail", "stream", "stream"]


def test_the_record_keeps_the_newest_answers(tmp_path: Path) -> None:
    computed: list[str] = []
    server = AnsweredRequests(_app(computed), tmp_path, keep=3)
    for i in range(6):
        _post(server, str(i), f"req-{i}")
    assert len(list(tmp_path.glob("*.json"))) == 3
    _post(server, "5", "req-5")  # kept
    _post(server, "0", "req-0")  # dropped: computed again
    assert computed == ["0", "1", "2", "3", "4", "5", "0"]
