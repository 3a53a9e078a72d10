"""What an online engine hands the HTTP server: per step, per request, the new tokens.

The server talks to either engine behind ``servesim serve`` (the PyTorch
``calibration.reference_engine.OnlineEngine``, or ``--simulate``'s) through
``OnlineBackend``; it owns (de)tokenization, so engines deal in token ids only.
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
    """A request's time in the engine so far (s), as vLLM's request stats split it:
    queued (ready to first scheduled), prefill (to first token), decode (to its
    latest); with its preemptions and prefix-cache tokens looked up and found."""

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
    """One engine step's output for one request; ``finish_reason`` set on its last
    (whose ``token_ids`` may be empty: an abort, a refusal).

    ``timing``: as of this event, on events with tokens. ``num_step_tokens``: on a
    step's first event only, the step's tokens as vLLM's ``IterationStats`` counts
    them: the whole prompt of each request it gave a first token, plus every token
    it generated.
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
        """``request``'s event now, with its new ``token_ids``."""
        timing = timing_of(request) if token_ids else None
        n, generated = request.num_prompt_tokens, request.num_generated_tokens
        return cls(token_ids, finish_reason, n, generated, timing, num_step_tokens)


Sink = Callable[[Emitted], None]
"""Called on the engine's thread; must not block. A sink that raises ends its request."""


@dataclass(frozen=True, slots=True)
class Submission:
    """A tokenized request as the server hands it to an engine; at most
    ``max_tokens`` tokens go to ``sink``.

    ``received_s``: when the server received it (``time.perf_counter``; None: now),
    its arrival, as vLLM's. ``priority``: vLLM's field (lower is more urgent).
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
    """The engine's state as ``/metrics``' gauges report it; None: the engine does
    not say (the series is left out)."""

    num_running: int
    num_waiting: int
    kv_cache_usage: float  # fraction of KV blocks in use, 0..1
    block_size_tokens: int | None = None
    num_gpu_blocks: int | None = None
    enable_prefix_caching: bool | None = None
    simulation_lag_s: float | None = None


def load_of(core: EngineCore, num_pending: int = 0) -> EngineLoad:
    """``core``'s gauges now, with ``num_pending`` requests on their way in (read from
    any thread: a scrape may see a step half committed)."""
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
    """Submissions and aborted ids other threads hand an engine's thread, each waking
    it; and the requests' ids."""

    def __init__(self) -> None:
        self.inbox: queue.SimpleQueue[Item] = queue.SimpleQueue()
        self.aborted: queue.SimpleQueue[int] = queue.SimpleQueue()
        self.wake = threading.Event()
        self.num_ids = 0  # ids handed out (the next id)
        self._id_lock = threading.Lock()

    def new_id(self) -> int:
        with self._id_lock:
            request_id = self.num_ids
            self.num_ids += 1
        return request_id

    def post(self, item: Item) -> None:
        self.inbox.put(item)
        self.wake.set()

    def abort(self, request_id: int) -> None:
        self.aborted.put(request_id)
        self.wake.set()


class OnlineBackend(Protocol):
    """An engine the HTTP server can stream from (also several simulated replicas
    behind a router, ``sim.serving.routed``): ``error`` is what stopped its loop;
    ``submit`` returns the request's id; ``load`` is read from any thread."""

    max_model_len_tokens: int

    @property
    def error(self) -> BaseException | None: ...

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def submit(self, submission: Submission) -> int: ...

    def abort(self, request_id: int) -> None: ...

    def load(self) -> EngineLoad: ...
