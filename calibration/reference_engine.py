"""The reference engine: the simulator's scheduler driving a real model, in wall-clock time.

One scheduler, two executors: ``sim.engine.scheduler.EngineCore`` and the scenario's
policy decide every step, unchanged; ``StepExecutor`` runs the decision on the
calibration model as one ``forward_step``. The KV cache has one slot per running
request (taken when first scheduled, given back on finish or preemption). A scheduled
request whose cache holds every token but the last sampled one *decodes* it; any other
runs a *prefill chunk* of its next tokens (after a recompute preemption, the tokens
already generated too), so a recomputed request continues from exactly the tokens it
emitted.

``WallClockEngine`` (``servesim measure``) replays a scenario's request list: each
step injects the requests that have arrived (tokenized, then ``EngineCore.add``),
plans, runs the plan and commits it. Times are seconds since the run started
(``time.perf_counter``); a step runs from when it is scheduled until its sampled ids
are on the host (after a CUDA synchronisation), so consecutive steps tile the busy
time as the simulator's step durations do. Ctrl-C, out of memory or
``max_duration_s`` stop the run early, keeping what was measured (``status``).
Async scheduling plans step N+1 as vLLM's ``AsyncScheduler`` would while step N ran
(seeing only requests ready when N started, ``visible_until``), so the run and its
prediction make the same decisions; only the scheduler's CPU time is not hidden.

``OnlineEngine`` (``servesim serve``, docs/validation.md) is a
``sim.serving.stream.OnlineBackend``: a thread owns the core and the executor, and
hands each emitted token to its request's sink as one ``Emitted``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import torch
from tqdm import tqdm

from calibration.model import DecodeItem, LlamaModel, PrefillChunk
from calibration.sampling import SamplingParams
from sim.api import core_config_for
from sim.cost.base import SHAPE_FIELDS
from sim.engine.records import reason_column
from sim.engine.request import Request
from sim.engine.scheduler import EngineCore, SchedulerOutput
from sim.openai.tokenizer import NUM_SPECIAL, ByteTokenizer
from sim.scenario import Scenario
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
from sim.serving.submission import prefix_describer
from sim.validation.endpoint_prompts import word_text
from sim.workload.generate import RequestArrays


class StepExecutor:
    """Cache slots and token lists of the running requests, and the model."""

    def __init__(
        self,
        model: LlamaModel,
        num_slots: int,
        max_len_tokens: int,
        sampling: SamplingParams,
        seed: int = 0,
    ) -> None:
        self.model = model
        self.cache = model.new_cache(num_slots, max_len_tokens, seed=seed + 1)
        self.sampling = sampling
        self.generator = torch.Generator(device=model.device_).manual_seed(seed)
        self._free_slots = list(range(num_slots - 1, -1, -1))
        self.slot_of: dict[int, int] = {}
        # Prompt then generated ids of every live request (kept across preemption).
        self.token_ids: dict[int, list[int]] = {}

    def add(self, request_id: int, prompt_ids: list[int]) -> None:
        """Remember a tokenized request's prompt."""
        self.token_ids[request_id] = list(prompt_ids)

    def forget(self, request_id: int) -> None:
        """Drop a finished request: its slot and its token ids."""
        self.release(request_id)
        self.token_ids.pop(request_id, None)

    def release(self, request_id: int) -> None:
        """Give back a request's slot, if it holds one (finish or preemption)."""
        slot = self.slot_of.pop(request_id, None)
        if slot is not None:
            self.cache.lengths[slot] = 0
            self._free_slots.append(slot)

    def sync_slots(self, running: Iterable[Request]) -> None:
        """Free the slots of requests that left the running set (preempted)."""
        live = {r.request_id for r in running}
        for request_id in [i for i in self.slot_of if i not in live]:
            self.release(request_id)

    def _slot(self, request: Request) -> int:
        slot = self.slot_of.get(request.request_id)
        if slot is None:
            if not self._free_slots:
                raise RuntimeError("no free KV slot: more running requests than slots")
            slot = self._free_slots.pop()
            self.slot_of[request.request_id] = slot
            self.cache.lengths[slot] = 0
        if int(self.cache.lengths[slot]) != request.num_computed_tokens:
            raise RuntimeError(
                f"request {request.request_id}: cache holds {int(self.cache.lengths[slot])} "
                f"tokens but the scheduler counts {request.num_computed_tokens}"
            )
        return slot

    def inputs(
        self, plan: SchedulerOutput
    ) -> tuple[list[PrefillChunk], list[DecodeItem], list[int]]:
        """The model's inputs for ``plan``, and the ids of the requests that sample, in order."""
        prefill: list[PrefillChunk] = []
        decode: list[DecodeItem] = []
        prefill_ids: list[int] = []
        decode_ids: list[int] = []
        for request, num_new in plan.scheduled:
            slot = self._slot(request)
            ids = self.token_ids[request.request_id]
            computed = request.num_computed_tokens
            end = computed + num_new
            samples = end == request.num_prompt_tokens + request.num_generated_tokens
            if num_new == 1 and samples and request.num_generated_tokens > 0:
                decode.append(DecodeItem(slot, ids[computed]))
                decode_ids.append(request.request_id)
            else:
                prefill.append(PrefillChunk(slot, ids[computed:end], sample=samples))
                if samples:
                    prefill_ids.append(request.request_id)
        return prefill, decode, prefill_ids + decode_ids

    def run(self, plan: SchedulerOutput) -> dict[int, int]:
        """Run ``plan``'s step on the model; the sampled token of each request that samples."""
        prefill, decode, sampling_ids = self.inputs(plan)
        out = self.model.forward_step(
            self.cache, prefill, decode, sampling=self.sampling, generator=self.generator
        )
        sampled = dict(zip(sampling_ids, out.next_token_ids, strict=True))
        for request_id, token in sampled.items():
            self.token_ids[request_id].append(token)
        return sampled

    def warm_up(self, num_tokens: int = 64) -> None:
        """A prefill and a few decodes in a scratch slot (first calls allocate and dispatch)."""
        slot = self._free_slots[-1]
        num_tokens = max(1, min(num_tokens, self.cache.max_len_tokens - 3))
        ids = list(range(3, 3 + num_tokens))
        out = self.model.forward_step(self.cache, [PrefillChunk(slot, ids)])
        token = out.next_token_ids[0]
        for _ in range(3):
            step = self.model.forward_step(self.cache, decode=[DecodeItem(slot, token)])
            token = step.next_token_ids[0]
        self.cache.lengths[slot] = 0


STEP_FIELDS = ("start_s", "forward_start_s", "end_s", "done_s", "forward_cpu_s", *SHAPE_FIELDS)
TOKEN_DTYPES = {
    "request_id": np.int64,
    "token_index": np.int64,
    "time_s": np.float64,
    "token_id": np.int64,
}


@dataclass
class MeasuredRun:
    """What a measured run recorded (frames as ``sim.serving.simulation.RawResult`` plus tokens)."""

    requests: pd.DataFrame
    core_steps: pd.DataFrame
    steps: pd.DataFrame
    tokens: pd.DataFrame
    timeseries: pd.DataFrame
    status: str  # "complete", "interrupted", "out of memory", "time limit"
    message: str
    wall_s: float
    outputs: dict[int, str] = field(default_factory=dict)


def _is_oom(error: BaseException) -> bool:
    if isinstance(error, MemoryError | torch.OutOfMemoryError):
        return True
    return isinstance(error, RuntimeError) and "out of memory" in str(error).lower()


def prompt_text(num_tokens: int, rng: np.random.Generator) -> str:
    """ASCII text of exactly ``num_tokens`` characters, so as many byte tokens: random
    words of the one word list (``word_text``), cut. Every word has 2 characters or
    more, so ``n // 3 + 2`` words with their spaces are at least ``n + 3`` long."""
    if num_tokens <= 0:
        return ""
    return word_text(num_tokens // 3 + 2, rng)[:num_tokens]


class WallClockEngine:
    """An ``EngineCore`` driven by a ``StepExecutor`` in real time."""

    def __init__(
        self,
        core: EngineCore,
        executor: StepExecutor,
        work: RequestArrays,
        seed: int = 0,
        sync: bool = False,
    ) -> None:
        self.core = core
        self.executor = executor
        self.work = work
        self.sync = sync
        # Async scheduling, asked for by the policy (the core read it when built).
        self.async_scheduling = core.async_scheduling
        self._describe = prefix_describer(work)  # None unless requests share prefixes
        priority = work.priority
        self._priorities = None if priority is None else priority.tolist()
        self.tokenizer = ByteTokenizer()
        rng = np.random.default_rng(seed)
        # Prompt texts are made before the clock starts: generating them is not serving.
        self.texts = [prompt_text(int(n), rng) for n in work.num_prompt_tokens]
        self.outputs: dict[int, list[str]] = {}
        # Rows of steps.parquet (STEP_FIELDS; the batches apart) and tokens.parquet.
        self.step_rows: list[tuple[float, ...]] = []
        self.batches: list[str] = []
        self.token_rows: list[tuple[int, int, float, int]] = []
        self._origin = 0.0

    def _now(self) -> float:
        return time.perf_counter() - self._origin

    def _request(self, index: int, num_prompt_tokens: int) -> Request:
        """Request ``index`` of the workload, with its priority and prefix fields."""
        request = Request(
            index,
            float(self.work.arrival_s[index]),
            num_prompt_tokens,
            int(self.work.num_output_tokens[index]),
        )
        if self._priorities is not None:
            request.priority = self._priorities[index]
        if self._describe is not None:
            self._describe(request)
        return request

    def _inject(self, index: int) -> None:
        ids = self.tokenizer.encode(self.texts[index])
        request = self._request(index, len(ids))
        self.executor.add(index, ids)
        self.outputs[index] = []
        if not self.core.add(request, self._now()):
            self.executor.forget(index)

    def _step(self, plan: SchedulerOutput, start_s: float) -> None:
        core, executor = self.core, self.executor
        executor.sync_slots(core.running)
        before = {r.request_id: r.num_generated_tokens for r, _ in plan.scheduled}
        shape = core.step_shape(plan)  # before update: a shape walks the pre-step counters
        cpu_start = time.thread_time()
        forward_start = self._now()
        sampled = executor.run(plan)
        if self.sync:
            torch.cuda.synchronize()
        end = self._now()
        # CPU time this thread got during the forward pass: below the wall time
        # when another process took the core (contention, not the model).
        forward_cpu = time.thread_time() - cpu_start
        for request_id, token in sampled.items():
            self.outputs[request_id].append(self.tokenizer.decode([token]))
        core.update(plan, end)  # started at start_s, when scheduled
        for request, _ in plan.scheduled:
            rid = request.request_id
            if request.num_generated_tokens > before[rid]:
                self.token_rows.append((rid, request.num_generated_tokens - 1, end, sampled[rid]))
            if request.finish_s is not None:
                executor.forget(rid)
        times = (start_s, forward_start, end, self._now(), forward_cpu)
        self.step_rows.append((*times, *shape))  # SHAPE_FIELDS, in order
        self.batches.append(" ".join(f"{r.request_id}:{n}" for r, n in plan.scheduled))

    def run(self, progress: bool = True, max_duration_s: float | None = None) -> MeasuredRun:
        """Serve every request (or stop early); return what was measured."""
        arrivals = self.work.arrival_s.tolist()
        total = len(arrivals)
        status, message = "complete", f"served {total} requests"
        self.executor.warm_up()
        next_index = 0
        # Async scheduling: the start of the step just run; the next plan sees
        # only requests ready by then (vLLM made it while that step ran).
        visible_until: float | None = None
        self._origin = time.perf_counter()
        bar = tqdm(total=total, unit="req", desc="measure", disable=not progress)
        try:
            while self.core.num_done < total:
                now = self._now()
                if max_duration_s is not None and now > max_duration_s:
                    status, message = "time limit", f"stopped at the {max_duration_s:g} s limit"
                    break
                while next_index < total and arrivals[next_index] <= now:
                    self._inject(next_index)
                    next_index += 1
                start = self._now()
                plan = self.core.schedule(start, visible_until)
                deferred = self.async_scheduling and self.core.num_deferred_at_plan > 0
                visible_until = None
                if plan.is_empty:
                    if deferred:
                        continue  # vLLM plans again once the step's output is in
                    if next_index >= total:
                        break  # pragma: no cover - only rejected requests were left
                    time.sleep(max(0.0, arrivals[next_index] - self._now()))
                    continue
                self._step(plan, start)
                if self.async_scheduling:
                    visible_until = start
                bar.update(self.core.num_done - bar.n)
        except KeyboardInterrupt:
            status, message = "interrupted", "interrupted (Ctrl-C): kept what was measured"
        except Exception as error:
            if not _is_oom(error):
                raise
            status = "out of memory"
            message = f"out of memory after {self.core.num_done} requests: {error}"
        finally:
            bar.close()
        wall_s = self._now()
        if status != "complete":
            for index in range(next_index, total):  # never sent: recorded unfinished
                num_prompt_tokens = int(self.work.num_prompt_tokens[index])
                self.core.waiting.append(self._request(index, num_prompt_tokens))
        return self._result(status, message, wall_s)

    def _result(self, status: str, message: str, wall_s: float) -> MeasuredRun:
        core = self.core
        core.flush_unfinished()
        requests = core.records.frame().sort_values("request_id", ignore_index=True)
        requests["rejection_reason"] = reason_column(requests["request_id"], core.rejections)
        steps = pd.DataFrame(self.step_rows, columns=list(STEP_FIELDS))
        steps["batch"] = self.batches
        tokens = pd.DataFrame(self.token_rows, columns=list(TOKEN_DTYPES)).astype(TOKEN_DTYPES)
        series = core.series.frame()
        series["kv_cache_usage"] = series["num_kv_blocks_used"] / core.kv.num_blocks
        return MeasuredRun(
            requests=requests,
            core_steps=core.steps.frame(),
            steps=steps,
            tokens=tokens,
            timeseries=series,
            status=status,
            message=message,
            wall_s=wall_s,
            outputs={i: "".join(parts) for i, parts in self.outputs.items()},
        )


EOS_ID = NUM_SPECIAL - 1  # sim.openai.tokenizer: 2 = end of sequence


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
        num_slots = policy.step_seq_bound()
        model = LlamaModel(scenario.model, dtype=dtype, device=device, seed=0)
        self.executor = StepExecutor(
            model, num_slots, self.max_model_len_tokens, SamplingParams(), seed=scenario.seed
        )
        # The same core the simulator's replicas and `servesim measure` build.
        self.core = core_config_for(scenario, reference_engine=True).new_core()
        self._mail: Mailbox[tuple[Request, list[int], _Live]] = Mailbox()
        self._stop = threading.Event()
        self._live: dict[int, _Live] = {}
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
        self._mail.wake.set()
        self._thread.join(timeout=10)

    def submit(self, submission: Submission) -> int:
        """Queue a tokenized request (``OnlineBackend.submit``); returns its id."""
        request_id = self._mail.new_id()
        now_s = self._now()
        received_s = submission.received_s
        arrival_s = now_s if received_s is None else min(now_s, received_s - self._origin)
        request = submission.request(request_id, arrival_s)
        live = _Live(request, submission.sink, submission.ignore_eos)
        self._mail.post((request, list(submission.prompt_ids), live))
        return request_id

    def abort(self, request_id: int) -> None:
        """Stop generating for ``request_id`` (its client went away, or a stop string)."""
        self._mail.abort(request_id)

    def load(self) -> EngineLoad:
        """Running and waiting counts and KV usage now (``sim.serving.stream.load_of``)."""
        return load_of(self.core)

    def _intake(self) -> None:
        while not self._mail.inbox.empty():
            request, ids, live = self._mail.inbox.get()
            self.executor.add(request.request_id, ids)
            self._live[request.request_id] = live
            if not self.core.add(request, self._now()):
                self._finish(request.request_id, (), "abort")
        while not self._mail.aborted.empty():
            request_id = self._mail.aborted.get()
            gone = self._live.get(request_id)
            if gone is not None:
                self._end_early(gone.request)

    def _end_early(self, request: Request) -> None:
        """Finish ``request`` before ``max_tokens`` (EOS or abort); free its blocks."""
        end_early(self.core, request, self._now())
        self.executor.forget(request.request_id)
        self._live.pop(request.request_id, None)

    def _finish(self, request_id: int, token_ids: tuple[int, ...], reason: FinishReason) -> None:
        live = self._live.pop(request_id)
        self.executor.forget(request_id)
        self._send(live, token_ids, reason)

    def _send(self, live: _Live, token_ids: tuple[int, ...], reason: FinishReason | None) -> None:
        """Hand one output to a request's sink; a sink that fails ends its request
        (its client is gone), never the engine loop that serves the others."""
        request = live.request
        try:
            live.sink(Emitted.of(request, token_ids, reason))
        except Exception:
            if request.request_id in self._live:
                self._end_early(request)

    def _step(self, plan: SchedulerOutput, start_s: float) -> None:
        core, executor = self.core, self.executor
        executor.sync_slots(core.running)
        before = {r.request_id: r.num_generated_tokens for r, _ in plan.scheduled}
        sampled = executor.run(plan)
        core.update(plan, self._now())  # started at start_s, when scheduled
        for request, _ in plan.scheduled:
            rid = request.request_id
            if request.num_generated_tokens == before[rid]:
                continue  # a prefill chunk that did not reach the prompt's end
            token = sampled[rid]
            live = self._live[rid]
            if request.finish_s is not None:
                self._finish(rid, (token,), "length")
            elif token == EOS_ID and not live.ignore_eos:
                self._end_early(request)
                self._send(live, (token,), "stop")
            else:
                self._send(live, (token,), None)

    def _loop(self) -> None:
        # Per thread: OpenMP's thread count set in the main thread does not carry over,
        # and a second spinning thread on a shared CPU makes every step several times slower.
        torch.set_num_threads(self.threads)
        try:
            while not self._stop.is_set():
                self._mail.wake.clear()
                self._intake()
                start = self._now()
                plan = self.core.schedule(start)
                if plan.is_empty:
                    # Idle: sleep until a submission (with work queued that cannot
                    # be scheduled yet, look again shortly).
                    self._mail.wake.wait(0.01 if self._live else None)
                    continue
                self._step(plan, start)
        except BaseException as error:  # a crashed engine must not leave clients waiting
            self.error = error
            for request_id in list(self._live):
                self._finish(request_id, (), "abort")
