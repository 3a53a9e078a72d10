"""What an online engine hands the HTTP server: per step, per request, the new tokens.

Two engines stand behind ``servesim serve``: the reference engine
(``calibration.reference_engine.OnlineEngine``, a real PyTorch model) and the
simulated one (``servesim serve --simulate``, the scheduler in wall-clock time
with each step priced by the cost model). The server talks to either through
``OnlineBackend`` and knows nothing else of them; it owns tokenization and
detokenization (text in, text out), so engines deal in token ids only.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, Literal, Protocol, TypeVar

from sim.engine.request import Request

if TYPE_CHECKING:
    from sim.engine.scheduler import EngineCore

FinishReason = Literal["stop", "length", "abort"]


@dataclass(frozen=True, slots=True)
class RequestTiming:
    """A request's time in the engine so far, in seconds of the engine's clock, as
    vLLM's request stats split it: waiting (handed to the engine core to first
    scheduled), prefill (first scheduled to first token), decode (first token to
    its latest); with its preemptions and prefix-cache lookups so far (tokens
    looked up, tokens found). ``/metrics`` observes the last one a client got."""

    queue_s: float
    prefill_s: float
    decode_s: float
    num_preemptions: int
    num_prefix_query_tokens: int
    num_prefix_hit_tokens: int

    @property
    def inference_s(self) -> float:
        """First scheduled to latest token (vLLM's "running" phase)."""
        return self.prefill_s + self.decode_s


def timing_of(request: Request) -> RequestTiming | None:
    """``request``'s ``RequestTiming`` now; None before its first token."""
    scheduled, first, last = request.first_scheduled_s, request.first_token_s, request.last_token_s
    if scheduled is None or first is None or last is None:
        return None
    queued = request.ready_s if request.ready_s is not None else request.arrival_s
    return RequestTiming(
        queue_s=scheduled - queued,
        prefill_s=first - scheduled,
        decode_s=last - first,
        num_preemptions=request.num_preemptions,
        num_prefix_query_tokens=request.num_prefix_query_tokens,
        num_prefix_hit_tokens=request.num_prefix_hit_tokens,
    )


@dataclass(frozen=True, slots=True)
class Emitted:
    """One engine step's output for one request; ``finish_reason`` set on its last.

    ``token_ids`` may be empty on the last event of a request that ends without a
    new token (an abort, a request refused at admission). ``timing``: the
    request's time in the engine as of this event (``timing_of``), on events
    with tokens from engines that keep it. ``num_step_tokens``: on the first
    event an engine sends for a step (None on the others, and from engines that
    do not count them), the step's tokens as vLLM's ``IterationStats`` counts
    them for ``vllm:iteration_tokens_total``: the whole prompt of each request
    whose first token the step produced, plus every token the step generated.
    """

    token_ids: tuple[int, ...]
    finish_reason: FinishReason | None
    num_prompt_tokens: int
    num_generated_tokens: int
    timing: RequestTiming | None = None
    num_step_tokens: int | None = None

    @classmethod
    def of(
        cls,
        request: Request,
        token_ids: tuple[int, ...],
        finish_reason: FinishReason | None,
        num_step_tokens: int | None = None,
    ) -> Emitted:
        """``request``'s event now: its new ``token_ids`` (with its timing, where it has
        any), its end and its counts so far."""
        timing = timing_of(request) if token_ids else None
        n, generated = request.num_prompt_tokens, request.num_generated_tokens
        return cls(token_ids, finish_reason, n, generated, timing, num_step_tokens)


Sink = Callable[[Emitted], None]
"""Called on the engine's thread; must not block. A sink that raises ends its request."""


@dataclass(frozen=True, slots=True)
class Submission:
    """A tokenized request as the server hands it to an engine (``OnlineBackend.submit``);
    its tokens go to ``sink``, at most ``max_tokens`` of them.

    ``received_s``: when the server received it, on ``time.perf_counter``'s clock
    (None: now). The request arrives then, so that the server's own parsing and
    tokenization before ``submit`` count in its latency, as vLLM's arrival time,
    set when its API server takes a request, counts them.

    ``priority``: the request's class (``Request.priority``; lower is more urgent,
    vLLM's ``priority`` field), read by a priority policy, as the offline
    simulator's requests carry the workload's.
    """

    prompt_ids: list[int]
    max_tokens: int
    ignore_eos: bool
    sink: Sink
    received_s: float | None = None
    priority: int = 0

    def request(self, request_id: int, arrival_s: float) -> Request:
        """The engine's ``Request`` of this submission, arriving at ``arrival_s``."""
        return Request(request_id, arrival_s, len(self.prompt_ids), self.max_tokens, self.priority)


@dataclass(frozen=True, slots=True)
class EngineLoad:
    """The engine's state as Prometheus gauges report it (vLLM's names in ``/metrics``).

    The KV pool's configuration (``vllm:cache_config_info``'s labels) and, for a
    simulated engine, how far its clock is behind the wall clock: None where an
    engine does not say (then ``/metrics`` leaves that series out)."""

    num_running: int
    num_waiting: int
    kv_cache_usage: float  # fraction of KV blocks in use, 0..1
    block_size_tokens: int | None = None
    num_gpu_blocks: int | None = None
    enable_prefix_caching: bool | None = None
    # The latest committed step's lag: wall-clock time when the engine committed it
    # minus its predicted end (s; 0 when on time; sim.serving.realtime).
    simulation_lag_s: float | None = None


def load_of(core: EngineCore, num_pending: int = 0) -> EngineLoad:
    """``core``'s gauges now, ``num_pending`` more requests waiting outside it (on
    their way in). Read from any thread: a scrape may see a step half committed,
    as vLLM's gauges lag a step."""
    kv = core.kv
    return EngineLoad(
        num_running=len(core.running),
        num_waiting=len(core.waiting) + num_pending,
        kv_cache_usage=(kv.num_blocks - kv.num_free_blocks) / kv.num_blocks,
        block_size_tokens=kv.block_size_tokens,
        num_gpu_blocks=kv.num_blocks,
        enable_prefix_caching=kv.caches_prefixes,
    )


def end_early(core: EngineCore, request: Request, now_s: float) -> None:
    """Finish ``request`` before its ``max_tokens`` (its client went away, or it sampled
    EOS): out of the waiting queue, its output what it produced, its blocks freed."""
    if request in core.waiting:
        core.waiting.remove(request)
    request.num_output_tokens = request.num_generated_tokens
    if request.finish_s is None:
        core.finish(request, now_s)
        core.remove_finished()


Item = TypeVar("Item")


class Mailbox(Generic[Item]):
    """What other threads hand an engine's thread: submissions (``inbox``) and aborted
    request ids (``aborted``), each waking it (``wake``); and the requests' ids."""

    def __init__(self) -> None:
        self.inbox: queue.SimpleQueue[Item] = queue.SimpleQueue()
        self.aborted: queue.SimpleQueue[int] = queue.SimpleQueue()
        self.wake = threading.Event()
        self.num_ids = 0  # ids handed out (the next id)
        self._id_lock = threading.Lock()

    def new_id(self) -> int:
        """The next request id (from any thread)."""
        with self._id_lock:
            request_id = self.num_ids
            self.num_ids += 1
        return request_id

    def post(self, item: Item) -> None:
        """Queue a submission for the engine's thread and wake it."""
        self.inbox.put(item)
        self.wake.set()

    def abort(self, request_id: int) -> None:
        """Queue ``request_id``'s abort for the engine's thread and wake it."""
        self.aborted.put(request_id)
        self.wake.set()


class OnlineBackend(Protocol):
    """An engine the HTTP server can stream from: the module's two, and several
    simulated replicas behind a router (``sim.serving.routed``)."""

    max_model_len_tokens: int

    @property
    def error(self) -> BaseException | None:
        """What stopped the engine's loop, if anything."""

    def start(self) -> None:
        """Start the engine's loop (its own thread)."""

    def stop(self) -> None:
        """End the loop; running requests get no more tokens."""

    def submit(self, submission: Submission) -> int:
        """Queue a tokenized request (``Submission``). Returns its id."""

    def abort(self, request_id: int) -> None:
        """Stop generating for ``request_id`` (its client went away)."""

    def load(self) -> EngineLoad:
        """Running and waiting counts and KV usage now (read from any thread)."""
