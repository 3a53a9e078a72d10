"""The reference engine serving requests as they come: the engine behind ``servesim serve``.

``WallClockEngine`` (``calibration.engine_loop``) replays a request list it
knows in advance; a server learns of each request when it arrives. Here a
thread owns the ``EngineCore`` (the scenario's policy and KV pool) and the
``StepExecutor`` (the calibration model), and loops::

    take the requests submitted since the last step (EngineCore.add)
    plan = core.schedule(now)
    empty plan -> wait for a submission
    else       -> StepExecutor.run(plan); core.commit(plan, start, [end])
                  hand each emitted token to its request's sink

A sink is called on the engine thread with one ``Emitted`` per engine step
that produced a token for its request (so a stream has one chunk per step
output), the last one with ``finish_reason`` set. A request stops at
``max_tokens`` (``"length"``), or at the end-of-sequence id unless
``ignore_eos`` (``"stop"``), or when ``abort`` is called (a client gone).
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from calibration.model import LlamaModel
from calibration.sampling import SamplingParams
from calibration.step_executor import StepExecutor
from calibration.tokenizer import NUM_SPECIAL, ByteTokenizer
from sim.api import core_config_for
from sim.engine.request import Request
from sim.engine.scheduler import StepPlan
from sim.scenario import Scenario

EOS_ID = NUM_SPECIAL - 1  # calibration.tokenizer: 2 = end of sequence


@dataclass(frozen=True)
class Emitted:
    """One step's output for one request (``finish_reason`` on its last)."""

    text: str
    finish_reason: str | None
    num_prompt_tokens: int
    num_generated_tokens: int


Sink = Callable[[Emitted], None]


@dataclass
class _Live:
    request: Request
    sink: Sink
    ignore_eos: bool


class OnlineEngine:
    """The scenario's scheduler and KV pool with the calibration model, in a thread."""

    def __init__(
        self, scenario: Scenario, dtype: torch.dtype, device: torch.device, threads: int = 1
    ) -> None:
        self.threads = threads
        engine = scenario.engine
        policy = scenario.scheduler
        self.max_model_len_tokens = engine.max_model_len_tokens
        num_slots = int(getattr(policy, "max_num_seqs", getattr(policy, "max_batch_size", 1)))
        model = LlamaModel(scenario.model, dtype=dtype, device=device, seed=0)
        self.executor = StepExecutor(
            model, num_slots, self.max_model_len_tokens, SamplingParams(), seed=scenario.seed
        )
        # The same core the simulator's replicas and `servesim measure` build.
        self.core = core_config_for(scenario, reference_engine=True).new_core()
        self.tokenizer = ByteTokenizer()
        self._inbox: queue.SimpleQueue[tuple[Request, list[int], _Live]] = queue.SimpleQueue()
        self._aborted: queue.SimpleQueue[int] = queue.SimpleQueue()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._live: dict[int, _Live] = {}
        self._next_id = 0
        self._id_lock = threading.Lock()
        self._origin = time.perf_counter()
        self._thread = threading.Thread(target=self._loop, name="servesim-engine", daemon=True)
        self.error: BaseException | None = None  # what stopped the loop, if anything

    def _now(self) -> float:
        return time.perf_counter() - self._origin

    def start(self) -> None:
        """Warm the model up (first calls allocate), then start the loop."""
        self.executor.warm_up()
        self._thread.start()

    def stop(self) -> None:
        """End the loop (requests still running get no more tokens)."""
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout=10)

    def submit(self, prompt_ids: list[int], max_tokens: int, ignore_eos: bool, sink: Sink) -> int:
        """Queue a tokenized request; its tokens go to ``sink``. Returns its id."""
        with self._id_lock:
            request_id = self._next_id
            self._next_id += 1
        request = Request(request_id, self._now(), len(prompt_ids), max_tokens)
        self._inbox.put((request, list(prompt_ids), _Live(request, sink, ignore_eos)))
        self._wake.set()
        return request_id

    def abort(self, request_id: int) -> None:
        """Stop generating for ``request_id`` (its client went away)."""
        self._aborted.put(request_id)
        self._wake.set()

    def _intake(self) -> None:
        while not self._inbox.empty():
            request, ids, live = self._inbox.get()
            self.executor.add(request.request_id, ids)
            self._live[request.request_id] = live
            if not self.core.add(request, self._now()):
                self._finish(request.request_id, "", "abort")
        while not self._aborted.empty():
            request_id = self._aborted.get()
            gone = self._live.get(request_id)
            if gone is not None:
                self._end_early(gone.request)

    def _end_early(self, request: Request) -> None:
        """Finish ``request`` before ``max_tokens`` (EOS or abort); free its blocks."""
        core = self.core
        if request in core.waiting:
            core.waiting.remove(request)
        request.num_output_tokens = request.num_generated_tokens  # what it produced
        if request.finish_s is None:
            core.finish(request, self._now())
            core.remove_finished()
        self.executor.forget(request.request_id)
        self._live.pop(request.request_id, None)

    def _finish(self, request_id: int, text: str, reason: str) -> None:
        live = self._live.pop(request_id)
        self.executor.forget(request_id)
        self._send(live, text, reason)

    def _send(self, live: _Live, text: str, reason: str | None) -> None:
        """Hand one output to a request's sink; a sink that fails ends its request
        (its client is gone), never the engine loop that serves the others."""
        request = live.request
        try:
            live.sink(
                Emitted(text, reason, request.num_prompt_tokens, request.num_generated_tokens)
            )
        except Exception:
            if request.request_id in self._live:
                self._end_early(request)

    def _step(self, plan: StepPlan, start_s: float) -> None:
        core, executor = self.core, self.executor
        executor.sync_slots(core.running)
        before = {r.request_id: r.num_generated_tokens for r, _ in plan.scheduled}
        sampled = executor.run(plan)
        core.commit(plan, start_s, [self._now()])
        for request, _ in plan.scheduled:
            rid = request.request_id
            if request.num_generated_tokens == before[rid]:
                continue  # a prefill chunk that did not reach the prompt's end
            token = sampled[rid]
            # Every token streams as text: special ids would decode to "" (no chunk).
            text = self.tokenizer.decode([token]) or "\ufffd"
            live = self._live[rid]
            if request.finish_s is not None:
                self._finish(rid, text, "length")
            elif token == EOS_ID and not live.ignore_eos:
                self._end_early(request)
                self._send(live, text, "stop")
            else:
                self._send(live, text, None)

    def _loop(self) -> None:
        # Per thread: OpenMP's thread count set in the main thread does not carry over,
        # and a second spinning thread on a shared CPU makes every step several times slower.
        torch.set_num_threads(self.threads)
        try:
            while not self._stop.is_set():
                self._wake.clear()
                self._intake()
                start = self._now()
                plan = self.core.schedule(start)
                if plan.is_empty:
                    # Idle: sleep until a submission (with work queued that cannot
                    # be scheduled yet, look again shortly).
                    self._wake.wait(0.01 if self._live else None)
                    continue
                self._step(plan, start)
        except BaseException as error:  # a crashed engine must not leave clients waiting
            self.error = error
            for request_id in list(self._live):
                self._finish(request_id, "", "abort")
