"""``servesim serve --simulate``'s engine: the simulator's replica driven in wall-clock time.

An ``OnlineBackend`` (``sim.serving.stream``) whose core is the scenario's
replica (``ReplicaConfig``), driven by a thread against the wall clock: each
step is priced by the cost model, the thread sleeps until its predicted end,
commits it and hands each request its new tokens, so any client sees the
predicted GPU's TTFT and TPOT under its own load.

The loop mirrors the reference ``Replica``'s, one step per event (every token
must go out at its time). Engine times are seconds since the engine was built;
the next step starts at the previous one's *predicted* end, so sleep jitter
delays a delivery but never shifts the schedule. ``run_until(time_s)`` does
everything due by ``time_s`` and returns when the next thing is due (a test
calls it with times of its own).

A step committed more than ``LAG_WARN_S`` past its predicted end means the host,
not the predicted GPU, is measured: the latest lag is exported by ``load()``
(``servesim:simulation_lag_seconds``) and warned once per episode. A ``check``
(``sim.metrics.invariants.LiveChecks``) runs after each commit and at each
empty plan; what it raises stops the engine.

A request arrives at its ``received_s`` (so the server's own parsing and
tokenization fall inside the modelled way in, not on top); its output length is
``max_tokens`` (a simulated model never samples EOS); the way out is the
server's real one, not added. With prefix caching, prompts' full blocks are
keyed by their token ids (``block_hashes``). The ``k``-th generated token is the
byte tokenizer's id of ``"abc...z"[k % 26]``. A ``cluster:`` is several of these
behind its router (``sim.serving.routed``).
"""

from __future__ import annotations

import heapq
import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from sim.engine.request import Request
from sim.engine.scheduler import EngineCore, SchedulerOutput
from sim.errors import InvariantError
from sim.serving.replica_config import ReplicaConfig
from sim.serving.stream import (
    Emitted,
    EngineLoad,
    FinishReason,
    Mailbox,
    Sink,
    Submission,
    end_early,
    load_of,
)

# The server's byte tokenizer's ids (sim.openai.tokenizer): byte + 3.
_FIRST_BYTE_ID = 3
_LETTER_IDS = tuple(_FIRST_BYTE_ID + b for b in b"abcdefghijklmnopqrstuvwxyz")
# A server runs for days: the core's logs are dropped, while nothing is live, after
# this many steps (nothing reads them back).
_LOG_STEPS = 1 << 16
# Lag (s past a step's predicted end) that starts an episode of falling behind:
# sleep jitter is well under a millisecond, 50 ms a visible fraction of a TPOT.
LAG_WARN_S = 0.05
LOG = logging.getLogger("servesim.serve")


def token_ids(first_index: int, num_tokens: int) -> tuple[int, ...]:
    """Ids of a request's generated tokens ``first_index`` .. ``first_index + num_tokens - 1``."""
    return tuple(_LETTER_IDS[k % 26] for k in range(first_index, first_index + num_tokens))


def block_hashes(prompt_ids: list[int], block_size_tokens: int) -> tuple[int, ...]:
    """One id per full block of the prompt, equal for equal blocks (the prefix cache
    chains them, ``sim.engine.kv_blocks``)."""
    size = block_size_tokens
    return tuple(
        hash(tuple(prompt_ids[i : i + size])) for i in range(0, len(prompt_ids) - size + 1, size)
    )


@dataclass
class _Live:
    """A submitted request, its sink, and whether its client went away."""

    request: Request
    sink: Sink
    aborted: bool = False


@dataclass(frozen=True, slots=True)
class _Step:
    """The step in flight: its plan, its start and its predicted end (engine s)."""

    plan: SchedulerOutput
    start_s: float
    end_s: float


class SimulatedEngine:
    """A replica's engine core, priced by its cost model, in wall-clock time (module doc)."""

    def __init__(
        self,
        config: ReplicaConfig,
        clock: Callable[[], float] = time.perf_counter,
        check: Callable[[EngineCore], None] | None = None,
    ) -> None:
        """``clock``: seconds, monotonic. ``check``: see the module doc."""
        self.config = config
        self._check = check
        self.cost = config.cost
        self.max_model_len_tokens = config.core.max_model_len_tokens
        self.core = config.core.new_core()
        self.async_scheduling = self.core.async_scheduling
        core_config = config.core
        self._block_size_tokens = (
            core_config.block_size_tokens if core_config.enable_prefix_caching else None
        )
        self.error: BaseException | None = None
        self._clock = clock
        self._origin_s = clock()
        # The engine's clock minus perf_counter's (the server's receipt times).
        self._perf_to_clock_s = clock() - time.perf_counter()
        # Filled by other threads, drained by the engine thread.
        self._mail: Mailbox[_Live] = Mailbox()
        self._stop = threading.Event()
        # Engine-thread state. Requests still on their way in, by ready time.
        self._pending: list[tuple[float, int, _Live]] = []
        self._live: dict[int, _Live] = {}
        self._to_end: list[_Live] = []  # aborted, to end at the next plan
        self._step: _Step | None = None
        # When the next plan is made (engine s); None while idle.
        self._plan_at_s: float | None = None
        self._idle_since_s = 0.0  # when the last empty plan was made (engine s)
        self._wake_at_s: float | None = None  # an idle policy's wake-up time
        self._visible_until_s: float | None = None  # async scheduling (module doc)
        self._steps_since_logs = 0
        self._lag_s = 0.0  # the latest committed step's lag (s; module doc)
        self._behind = False  # in an episode of lag over LAG_WARN_S (warned once)
        self._thread = threading.Thread(target=self._loop, name="servesim-simulated", daemon=True)

    # -- OnlineBackend -------------------------------------------------------
    def now_s(self) -> float:
        """Engine time now: seconds since the engine was built."""
        return self._clock() - self._origin_s

    def start(self) -> None:
        """Start the engine's thread."""
        self._thread.start()

    def stop(self) -> None:
        """End the loop; running requests get no more tokens."""
        self._stop.set()
        self._mail.wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)

    def submit(self, submission: Submission) -> int:
        """Queue a tokenized request, arriving at its ``received_s`` (module doc)."""
        request_id = self._mail.new_id()
        now_s = self.now_s()
        arrival_s, received_s = now_s, submission.received_s
        if received_s is not None:
            # On the engine's clock; never later than now.
            arrival_s = min(now_s, received_s + self._perf_to_clock_s - self._origin_s)
        request = submission.request(request_id, arrival_s)
        if self._block_size_tokens is not None:
            request.block_hash_ids = block_hashes(submission.prompt_ids, self._block_size_tokens)
        self._mail.post(_Live(request, submission.sink))
        return request_id

    def abort(self, request_id: int) -> None:
        """Stop generating for ``request_id`` (its client went away); no event follows."""
        self._mail.abort(request_id)

    def load(self) -> EngineLoad:
        """Running and waiting counts (those on the way in too) and KV usage."""
        return replace(load_of(self.core, len(self._pending)), simulation_lag_s=self._lag_s)

    # -- the executor ---------------------------------------------------------
    def run_until(self, time_s: float) -> float:
        """Do everything due by engine time ``time_s``: take in submissions, commit
        the step in flight if it has ended, plan the next. Returns when the next
        thing is due (engine s; inf: nothing until a submission)."""
        self._intake()
        core = self.core
        while True:
            step = self._step
            if step is not None:
                if step.end_s > time_s:
                    return step.end_s
                self._step = None
                if time_s < math.inf:  # inf: a test running everything, no wall clock
                    self._note_lag(time_s - step.end_s)
                self._commit(step)
                self._plan_at_s = step.end_s
                self._visible_until_s = step.start_s if self.async_scheduling else None
            now = self._plan_at_s
            if now is None:  # idle: until a request is ready, or the policy's wake-up
                wake_s = math.inf if self._wake_at_s is None else self._wake_at_s
                due = min(self._pending[0][0] if self._pending else math.inf, wake_s)
                if due > time_s or due == math.inf:
                    if self._to_end:  # a waiting request's client left while idle
                        at_s = time_s if time_s < math.inf else self._idle_since_s
                        self._end_aborted(max(at_s, self._idle_since_s))
                    return due
                # Never before the empty plan: a submission taken in just after
                # it may carry an arrival a hair earlier (another thread's clock).
                now = max(due, self._idle_since_s)
                self._wake_at_s = None
            self._end_aborted(now)
            self._admit_ready(now)
            plan = core.schedule(now, self._visible_until_s)
            deferred = self.async_scheduling and core.num_deferred_at_plan > 0
            self._visible_until_s = None
            if plan.is_empty:
                if deferred:  # vLLM plans again once step N's output is in
                    self._plan_at_s = now
                    continue
                self._plan_at_s = None
                self._idle_since_s = now
                self._wake_at_s = core.wake_at_s()
                if self._check is not None:  # before the logs it reads may be dropped
                    self._check(core)
                self._drop_logs_if_idle()
                continue
            # As Replica.run_step: the same float operations, so the same ends.
            end_s = now + (self.cost.step_s(core.step_shape(plan)) + plan.extra_s)
            self._step = _Step(plan, now, end_s)
            self._plan_at_s = None

    def _note_lag(self, lag_s: float) -> None:
        """Keep the committed step's lag; warn once when an episode of lag starts."""
        self._lag_s = max(lag_s, 0.0)
        behind = lag_s > LAG_WARN_S
        if behind and not self._behind:
            LOG.warning(
                "servesim serve --simulate: the engine is %.3f s behind real time (a client or "
                "the host CPU is the bottleneck): tokens come later than the predicted GPU "
                "would send them (servesim:simulation_lag_seconds in /metrics)",
                lag_s,
            )
        self._behind = behind

    def _intake(self) -> None:
        """Move submissions to the way in (ready at arrival + way in), note aborts."""
        way_in = self.config.frontend.way_in_one_s
        while not self._mail.inbox.empty():
            live = self._mail.inbox.get()
            request = live.request
            self._live[request.request_id] = live
            ready_s = request.arrival_s + way_in(request.num_prompt_tokens)
            heapq.heappush(self._pending, (ready_s, request.request_id, live))
        while not self._mail.aborted.empty():
            gone = self._live.get(self._mail.aborted.get())
            if gone is not None and not gone.aborted:
                self._abort(gone)

    def _abort(self, live: _Live) -> None:
        """Mark ``live`` to be ended at the next plan (a step in flight is not cut)."""
        live.aborted = True
        self._to_end.append(live)

    def _admit_ready(self, now_s: float) -> None:
        """Hand the core every request ready by ``now_s``, each at its ready time."""
        pending = self._pending
        while pending and pending[0][0] <= now_s:
            ready_s, _, live = heapq.heappop(pending)
            if live.aborted:
                self._live.pop(live.request.request_id, None)
                continue
            if not self.core.add(live.request, ready_s):  # can never fit the KV pool
                self._send(live, (), "abort")

    def _end_aborted(self, now_s: float) -> None:
        """End the requests whose client went away (between steps: none is in flight)."""
        for live in self._to_end:
            request = live.request
            if self._live.pop(request.request_id, None) is None or request.ready_s is None:
                continue  # still on its way in: dropped from the heap when due
            end_early(self.core, request, now_s)
        self._to_end.clear()

    def _commit(self, step: _Step) -> None:
        """Commit ``step`` at its predicted end; hand each request its new tokens."""
        plan = step.plan
        before = [(request, request.num_generated_tokens) for request, _ in plan.scheduled]
        self.core.update(plan, step.end_s)  # it started at step.start_s, when scheduled
        if self._check is not None:
            self._check(self.core)
        self._steps_since_logs += 1
        # vLLM's tokens of this step (Emitted.num_step_tokens).
        num_step_tokens: int | None = sum(
            request.num_generated_tokens
            - generated
            + (request.num_prompt_tokens if generated == 0 < request.num_generated_tokens else 0)
            for request, generated in before
        )
        for request, generated in before:
            num_new = request.num_generated_tokens - generated
            live = self._live.get(request.request_id)
            if num_new == 0 or live is None:
                continue  # a prefill chunk short of the prompt's end
            if live.aborted:  # its client is gone: nothing to send
                if request.finish_s is not None:
                    self._live.pop(request.request_id)
                continue
            ids = token_ids(generated, num_new)
            reason: FinishReason | None = "length" if request.finish_s is not None else None
            self._send(live, ids, reason, num_step_tokens)
            num_step_tokens = None  # on the step's first event sent only

    def _send(
        self,
        live: _Live,
        ids: tuple[int, ...],
        reason: FinishReason | None,
        num_step_tokens: int | None = None,
    ) -> None:
        """Hand one output to a request's sink (its last, with ``reason``); a sink that
        fails ends its request, never the loop."""
        if reason is not None:
            self._live.pop(live.request.request_id, None)
        try:
            live.sink(Emitted.of(live.request, ids, reason, num_step_tokens))
        except Exception:
            if reason is None:
                self._abort(live)

    def _drop_logs_if_idle(self) -> None:
        """Forget the core's logs when nothing is live and they have grown (``_LOG_STEPS``)."""
        if self._steps_since_logs >= _LOG_STEPS and not self._live and not self._pending:
            core = self.core
            core.new_logs()
            for kept in (core.rejections, core.later_runs, core.extra_itl_s, core.extra_itl_from_s):
                kept.clear()
            self._steps_since_logs = 0

    # -- the thread -------------------------------------------------------------
    def _loop(self) -> None:
        try:
            while not self._stop.is_set():
                self._mail.wake.clear()
                due_s = self.run_until(self.now_s())
                # Until the next deadline; a submission or abort wakes it early.
                wait_s = due_s - self.now_s()
                if wait_s > 0:
                    self._mail.wake.wait(None if math.isinf(wait_s) else wait_s)
        except BaseException as error:  # a crashed engine must not leave clients waiting
            self.error = error
            # Once, as vLLM's engine core reports its death (a traceback but for invariants).
            LOG.error(
                "servesim serve --simulate: the engine stopped: %s",
                error,
                exc_info=not isinstance(error, InvariantError),
            )
            for live in list(self._live.values()):
                self._send(live, (), "abort")
