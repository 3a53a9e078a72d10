"""``servesim serve --simulate``'s engine: the simulator's replica driven in wall-clock time.

An ``OnlineBackend`` (``sim.serving.stream``) whose engine core is the one
the simulator's replica runs (the scenario's ``ReplicaConfig``: policy, KV
pool, length limit, cost model with the engine's CPU work, way in), driven by
a thread against the wall clock instead of SimPy's. Real requests arrive
through the HTTP server; each step's plan is priced by the scenario's cost
model, the thread sleeps until the step's predicted end, commits it and hands
each request its new tokens. So any client (a benchmark, a gateway, an
autoscaler) sees the predicted GPU's TTFT and TPOT under its own load.

**The loop mirrors the reference ``Replica``'s** (one step per event; a
real-time engine must emit every token at its time, so there is no
skip-ahead): plan at ``now``, end = ``now + step_s(shape) + extra_s``, update
the core at that end, plan the next step at that same end. With
async scheduling the plan made after step N sees only requests ready by
step N's start (``visible_until_s``), as the simulator's. Engine times are
the simulator's virtual times, seconds since the engine was built: the next
step starts at the previous one's *predicted* end, not when the thread woke
up, so sleep jitter delays a token's delivery but never shifts the
schedule, and drift cannot accumulate. A thread that falls behind (a stalled
process) catches up at once. ``run_until(time_s)`` does everything due by
``time_s`` and returns when the next thing is due; the thread calls it with
the clock's time and sleeps until that deadline (or a submission), and a test
calls it with times of its own choosing.

**Falling behind.** When the thread commits a step later than its predicted
end by more than ``LAG_WARN_S`` (a client that reads slowly holding the GIL,
a host CPU shared with a load generator), the tokens reach clients late and a
benchmark measures the host, not the predicted GPU. The lag (wall-clock time
at the commit minus the step's predicted end) is the latest step's, exported
by ``load()`` (``servesim:simulation_lag_seconds`` in ``/metrics``); the log
says so once per episode: one warning when the lag first passes
``LAG_WARN_S``, none again until a step is back within it.

**Invariants.** ``servesim serve`` passes a ``check`` (``sim.metrics.invariants.
LiveChecks``) that the loop calls with its core after each commit, before the
step's tokens go out, and at each empty plan: a broken invariant stops the
engine (``error``), its requests end by abort, and the log says it once.

**Arrivals and lengths.** A request arrives when ``submit`` is called (after
the server parsed and tokenized it: its prompt length is the server's token
count); its output length is ``max_tokens``; its class for a priority policy is
the client's ``priority`` (vLLM's field), as the offline simulator's requests
carry the workload's. A simulated model never samples
an end-of-sequence token, so ``ignore_eos`` changes nothing: every request
ends by length (or by ``abort``, or refused at admission).

**The frontend.** The scenario's way in (``FrontendConfig.way_in_one_s``: vLLM's
API server, IPC to the engine core, tokenization; ~10 ms by default) runs from
when the server received the request (``received_s``, passed by the server):
the request becomes ready to schedule that long after its receipt. The
server's own HTTP parsing and tokenization before ``submit`` (about a
millisecond, docs/validation.md) thus fall inside the modelled way in instead
of adding to it; only a receipt that took longer than the modelled way in
delays a request past it. The way out is *not* added: the server's
real output path (the engine thread's hand-over, JSON, the socket) stands for
the modelled one (``output_step_s + detokenize_s_per_token`` per output, ~0.2
ms), which it matches in kind and roughly in size.

**Prefix caching** (when the scenario enables it): each prompt's full blocks
are keyed by their token ids (``block_hashes``), so requests whose prompts
share a prefix hit the simulated cache as they would vLLM's.

**Tokens.** Token ids are deterministic: the ``k``-th generated token of every
request is the byte tokenizer's id of the letter ``"abc...z"[k % 26]`` (id =
byte + 3; never a special id), so a stream reads ``abcdef...``.

One replica; a scenario's ``cluster:`` of replicas is several of these engines
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

# The server's byte tokenizer's ids (sim.openai.tokenizer, a layer above this
# one): byte + 3; 0, 1, 2 are padding, BOS and EOS, never emitted here.
_FIRST_BYTE_ID = 3
_LETTER_IDS = tuple(_FIRST_BYTE_ID + b for b in b"abcdefghijklmnopqrstuvwxyz")
# A server runs for days: the core's step log, queue series, records and gap
# lists grow a row a step or a request. They are dropped, while nothing is live,
# after this many steps (nothing reads them back: policies only append to the log).
_LOG_STEPS = 1 << 16
# A step committed this late (s, wall clock past its predicted end) starts an
# episode of falling behind (module doc). Sleep jitter is well under a
# millisecond; 50 ms is a token delivered a visible fraction of a TPOT late.
LAG_WARN_S = 0.05
LOG = logging.getLogger("servesim.serve")


def token_ids(first_index: int, num_tokens: int) -> tuple[int, ...]:
    """Ids of a request's generated tokens ``first_index`` .. ``first_index + num_tokens - 1``."""
    return tuple(_LETTER_IDS[k % 26] for k in range(first_index, first_index + num_tokens))


def block_hashes(prompt_ids: list[int], block_size_tokens: int) -> tuple[int, ...]:
    """One id per full block of the prompt, equal for equal blocks: the core's
    prefix cache chains them (``sim.engine.kv_blocks``), so block ``j`` is shared
    only when every token up to its end agrees, as vLLM's block hashes."""
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
        """``clock``: seconds, monotonic (a test passes its own and calls ``run_until``).
        ``check``: called with the core after each commit, before the step's tokens
        go out, and at each empty plan; what it raises stops the engine (the face
        passes ``sim.metrics.invariants.LiveChecks``, a layer above this one)."""
        self.config = config
        self._check = check
        self.cost = config.cost
        self.max_model_len_tokens = config.core.max_model_len_tokens
        # The simulator's own factory, in its reference (step-by-step) mode.
        self.core = config.core.new_core()
        self.async_scheduling = self.core.async_scheduling
        # Prefix caching: prompts are keyed by their blocks' token ids, so that
        # clients whose prompts share a prefix hit the simulated cache.
        core_config = config.core
        self._block_size_tokens = (
            core_config.block_size_tokens if core_config.enable_prefix_caching else None
        )
        self.error: BaseException | None = None
        self._clock = clock
        self._origin_s = clock()
        # The engine's clock minus perf_counter's: converts the server's receipt
        # times (perf_counter) to the engine's clock (0 for the default clock).
        self._perf_to_clock_s = clock() - time.perf_counter()
        # Filled by other threads, drained by the engine thread.
        self._mail: Mailbox[_Live] = Mailbox()
        self._stop = threading.Event()
        # Engine-thread state. Requests still on their way in, by ready time.
        self._pending: list[tuple[float, int, _Live]] = []
        self._live: dict[int, _Live] = {}
        self._to_end: list[_Live] = []  # aborted, to end at the next plan
        self._step: _Step | None = None
        # When the next plan is made (engine s): the end of the step just
        # committed; None while idle (then the next ready time or wake-up).
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
        """Queue a tokenized request; ``max_tokens`` tokens go to its sink (``ignore_eos``
        is moot: a simulated model never samples EOS). It arrives at its ``received_s``:
        the modelled way in then runs from the moment the server received it, so the
        server's real parsing and tokenization are part of it rather than on top
        (module doc)."""
        request_id = self._mail.new_id()
        now_s = self.now_s()
        arrival_s, received_s = now_s, submission.received_s
        if received_s is not None:
            # On the engine's clock; never later than now (a test clock need not
            # run with perf_counter: then the offset below is meaningless, but the
            # tests that drive one submit without received_s).
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
        the step in flight if it has ended (emitting its tokens), plan the next.
        Returns when the next thing is due (engine s; inf: nothing until a
        submission). Called on one thread only."""
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
        """Hand the core every request ready by ``now_s``, in ready order, each at its
        ready time (async scheduling hides those ready after the last step's start)."""
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
        # vLLM's tokens of this step (Emitted.num_step_tokens): each request's whole
        # prompt when the step gave its first token, plus the tokens it generated.
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
        """Hand one output to a request's sink (its last, with ``reason``: the request
        leaves); a sink that fails ends its request (its client is gone), never the
        loop that serves the others."""
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
                # Sleep until the next deadline; a submission or abort wakes it early
                # (it is taken in at once, acted on when due).
                wait_s = due_s - self.now_s()
                if wait_s > 0:
                    self._mail.wake.wait(None if math.isinf(wait_s) else wait_s)
        except BaseException as error:  # a crashed engine must not leave clients waiting
            self.error = error
            # Once, as vLLM's engine core reports its death: a broken invariant in its
            # one line, any other error with the traceback that says where.
            LOG.error(
                "servesim serve --simulate: the engine stopped: %s",
                error,
                exc_info=not isinstance(error, InvariantError),
            )
            for live in list(self._live.values()):
                self._send(live, (), "abort")
