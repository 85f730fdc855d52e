"""The embedded LLM server's footprint and duplicated LLM work.

    python bench/llm_footprint.py footprint [--conversations 4] [--turns 6] [--concurrency 4]
    python bench/llm_footprint.py duplicates [--units 2] [--requests 3] [--timeout 2.5]

``footprint`` starts the embedded llama.cpp server (SmolLM2-135M) and drives a trees-like
workload through ``OpenAILLMClient``: ``conversations`` dialogues with the shop's tool list,
each growing for ``turns`` turns (a required tool call, its result, an answer in words, the
user's next line) and branching once into two at turn 2, all in flight together, so the
server keeps many different prompt prefixes (as the assistant, the user simulator and the
branches of a tree do). While it runs, the server's resident memory is sampled from
``/proc`` (restarts included). Prints the peak RSS beside the 1 GB target, and the requests
the client sent against the ones the server computed (``COMPUTED_MARK`` lines in its log):
a request computed twice because the client stopped waiting shows up as computed > sent
answers.

``duplicates`` measures the client alone against a single-slot server that does not stop
computing when the client goes away (tests/fakes/llm_server.py with ``slots=1``, as
llama.cpp's server): ``units`` threads (as the thread task runner runs units of work), each
with its own client (``max_concurrency`` 2, the default) sending ``requests`` requests at
once, each taking ``delay`` s to compute, under a ``timeout`` shorter than the queue they
form. Prints requests sent (retries
included), computed and answered, and the duplicated work (computed - answered, target 0).

Both run with whatever ``trajsynth`` is on the path, so the figures before a change come
from running the same script against the old checkout (``PYTHONPATH=<old>/src``).
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # fakes.llm_server

try:
    from trajsynth.llm.client import OpenAILLMClient
except ImportError:  # an old checkout (the figures before a change) keeps the client in agents/
    from trajsynth.agents.llm import OpenAILLMClient
from trajsynth.mcp_servers.registry import get_cluster  # noqa: E402
from trajsynth.schemas import AgentRole, LLMConfig, LLMError, Message, MessageRole  # noqa: E402

TARGET_RSS_MB = 1024
COMPUTED_MARK = "trajsynth-chat-computed"  # chat_handler.COMPUTED_MARK (absent before it)


def _rss_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


class _RssSampler(threading.Thread):
    """Samples the server's RSS every 0.2 s (its pid may change when it is restarted)."""

    def __init__(self, server: Any) -> None:
        super().__init__(daemon=True)
        self.server = server
        self.peak_mb = 0.0
        self.samples: list[float] = []
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.wait(0.2):
            proc = getattr(self.server, "_proc", None)
            if proc is not None:
                mb = _rss_mb(proc.pid)
                self.samples.append(mb)
                self.peak_mb = max(self.peak_mb, mb)

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=5)


def _counting_http(counter: dict[str, int]) -> httpx.AsyncClient:
    async def on_request(request: httpx.Request) -> None:
        if request.url.path.endswith("/chat/completions"):
            counter["sent"] += 1

    return httpx.AsyncClient(timeout=None, event_hooks={"request": [on_request]})


# -- footprint ---------------------------------------------------------------------------------


async def _dialogue(
    client: OpenAILLMClient, tools: list[dict], messages: list[Message], turns: int, seed: int
) -> int:
    """One branch of a tree: grows ``messages`` for ``turns`` turns; returns answers got."""
    answered = 0
    for turn in range(turns):
        call = await client.chat(
            messages, role=AgentRole.ASSISTANT, tools=tools, tool_choice="required", seed=seed
        )
        answered += 1
        messages.append(call.message)
        for c in call.message.tool_calls or []:
            result = f'{{"results": [{{"sku": "SKU-{seed}-{turn}", "price": {turn + 3}.99}}]}}'
            messages.append(
                Message(
                    role=MessageRole.TOOL, content=result, tool_call_id=c.id, name=c.function.name
                )
            )
        words = await client.chat(
            messages, role=AgentRole.ASSISTANT, tools=tools, tool_choice="none", seed=seed + 1
        )
        answered += 1
        messages.append(Message(role=MessageRole.ASSISTANT, content=words.message.content or "ok"))
        messages.append(
            Message(
                role=MessageRole.USER, content=f"Thanks. Now look for item {seed}-{turn}, please."
            )
        )
        if turn == 1 and seed < 1000:  # branch once: a sibling grows from this prefix
            sibling = await _dialogue(client, tools, list(messages), turns - 2, seed + 1000)
            answered += sibling
    return answered


async def _footprint_workload(server: Any, args: argparse.Namespace) -> dict[str, Any]:
    counter = {"sent": 0}
    config = LLMConfig(
        base_url=server.base_url,
        max_tokens=args.max_tokens,
        max_concurrency=args.concurrency,
        timeout_s=args.timeout,
        max_retries=2,
    )
    client = OpenAILLMClient(config, http_client=_counting_http(counter))
    tools = [t.to_openai() for t in get_cluster("shop").tools]
    system = Message(role=MessageRole.SYSTEM, content="You are a shop assistant. Use the tools.")
    dialogues = [
        [system, Message(role=MessageRole.USER, content=f"Find me a red mug, size {i}.")]
        for i in range(args.conversations)
    ]
    failed = 0
    results = await asyncio.gather(
        *(_dialogue(client, tools, d, args.turns, i) for i, d in enumerate(dialogues)),
        return_exceptions=True,
    )
    answered = sum(r for r in results if isinstance(r, int))
    failed = sum(1 for r in results if isinstance(r, BaseException))
    for r in results:
        if isinstance(r, LLMError):
            print(f"  a dialogue failed: {r}")
        elif isinstance(r, BaseException):
            raise r
    await client.aclose()
    return {"sent": counter["sent"], "answered": answered, "failed_dialogues": failed}


def footprint(args: argparse.Namespace) -> None:
    try:
        from trajsynth.llm.embedded import EmbeddedLLMServer
    except ImportError:  # an old checkout keeps the embedded server in agents/
        from trajsynth.agents.embedded import EmbeddedLLMServer

    options: dict[str, Any] = {"n_ctx": args.ctx}
    if "cache_mb" in inspect.signature(EmbeddedLLMServer).parameters:
        options["cache_mb"] = args.cache_mb
    server = EmbeddedLLMServer(**options)
    started = time.perf_counter()
    server.start()
    sampler = _RssSampler(server)
    sampler.start()
    try:
        counts = asyncio.run(_footprint_workload(server, args))
        log = Path(server._log_file.name).read_text(errors="replace") if server._log_file else ""
    finally:
        sampler.stop()
        server.stop()
    wall = time.perf_counter() - started
    computed = log.count(COMPUTED_MARK) if COMPUTED_MARK in log else None
    restarts = getattr(server, "restarts", [])
    print(
        f"embedded server footprint ({args.conversations} dialogues x {args.turns} turns, "
        f"1 branch each, concurrency {args.concurrency}, n_ctx {args.ctx}, "
        f"cache {options.get('cache_mb', 'stock 2048')} MB)"
    )
    verdict = "ok" if sampler.peak_mb <= TARGET_RSS_MB else "OVER"
    print(
        f"  peak RSS           {sampler.peak_mb:8.0f} MB   target <= {TARGET_RSS_MB} MB  {verdict}"
    )
    last = sampler.samples[-1] if sampler.samples else 0.0
    print(f"  RSS at the end     {last:8.0f} MB")
    print(f"  requests sent      {counts['sent']:8d}     (client, retries included)")
    print(f"  answers received   {counts['answered']:8d}")
    if computed is None:
        print("  requests computed       n/a     (this server logs no per-request line)")
    else:
        dup = computed - counts["answered"]
        print(f"  requests computed  {computed:8d}     duplicated work {dup} (target 0)")
    print(f"  failed dialogues   {counts['failed_dialogues']:8d}")
    print(f"  server restarts    {len(restarts):8d}     {restarts}")
    print(f"  wall               {wall:8.1f} s")


# -- duplicates --------------------------------------------------------------------------------


async def _unit(base_url: str, args: argparse.Namespace, unit: int, counter: dict) -> list:
    """One unit of work: its own client (as ``flows.units`` builds one per unit)."""
    config = LLMConfig(
        base_url=base_url,
        max_concurrency=args.concurrency,
        timeout_s=args.timeout,
        max_retries=2,
        logprobs=False,
    )
    client = OpenAILLMClient(config, http_client=_counting_http(counter))
    user = [Message(role=MessageRole.USER, content=f"hello from unit {unit}")]
    results = await asyncio.gather(
        *(client.chat(user, role=AgentRole.ASSISTANT, seed=i) for i in range(args.requests)),
        return_exceptions=True,
    )
    await client.aclose()
    return results


def duplicates(args: argparse.Namespace) -> None:
    from fakes.llm_server import FakeLLMServer

    with FakeLLMServer(delay_s=args.delay, slots=1) as server:
        try:  # a server this process runs declares its one slot (llm.embedded does)
            try:
                from trajsynth.llm.endpoints import register_endpoint
            except ImportError:  # an old checkout keeps it in agents/
                from trajsynth.agents.endpoints import register_endpoint

            register_endpoint(server.base_url, slots=1)
        except ImportError:  # before endpoints existed
            pass
        counter = {"sent": 0}
        results: list[Any] = []
        lock = threading.Lock()

        def run_unit(unit: int) -> None:
            got = asyncio.run(_unit(server.base_url, args, unit, counter))
            with lock:
                results.extend(got)

        started = time.perf_counter()
        threads = [threading.Thread(target=run_unit, args=(u,)) for u in range(args.units)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.perf_counter() - started
        # the server goes on computing what the client abandoned: let it finish
        deadline = time.monotonic() + args.delay * (counter["sent"] + 2)
        while server.faults.in_flight and time.monotonic() < deadline:
            time.sleep(0.05)
        computed = server.faults.computed
    answered = sum(1 for r in results if not isinstance(r, BaseException))
    dup = computed - answered
    print(
        f"duplicated work against a single-slot server ({args.units} units x {args.requests} "
        f"requests at once, {args.delay:.1f} s each, timeout {args.timeout:.1f} s, "
        f"max_concurrency {args.concurrency} per client)"
    )
    print(f"  requests sent      {counter['sent']:6d}   (retries included)")
    print(f"  computed           {computed:6d}")
    print(f"  answered           {answered:6d}   failed {len(results) - answered}")
    print(f"  duplicated work    {dup:6d}   target 0  {'ok' if dup == 0 else 'OVER'}")
    print(f"  wall               {wall:6.1f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="mode", required=True)
    fp = sub.add_parser("footprint")
    fp.add_argument("--conversations", type=int, default=4)
    fp.add_argument("--turns", type=int, default=6)
    fp.add_argument("--concurrency", type=int, default=4)
    fp.add_argument("--max-tokens", type=int, default=48)
    fp.add_argument("--timeout", type=float, default=120.0)
    fp.add_argument("--ctx", type=int, default=4096)
    fp.add_argument("--cache-mb", type=int, default=256)
    dp = sub.add_parser("duplicates")
    dp.add_argument("--units", type=int, default=2, help="threads, a client each")
    dp.add_argument("--requests", type=int, default=3, help="requests at once per unit")
    dp.add_argument("--delay", type=float, default=1.0)
    dp.add_argument("--timeout", type=float, default=2.5)
    dp.add_argument("--concurrency", type=int, default=2, help="max_concurrency per client")
    args = parser.parse_args()
    footprint(args) if args.mode == "footprint" else duplicates(args)


if __name__ == "__main__":
    main()
