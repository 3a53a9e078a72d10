"""Serve a scenario's requests on the real model, in wall-clock time.

The loop, once per step::

    inject every request whose arrival time has passed (tokenize its prompt,
        then EngineCore.add at the time tokenization ended)
    plan = core.schedule(now, visible_until)     # the scenario's policy, unchanged
    empty plan -> sleep until the next arrival (async: plan again if work was deferred)
    else       -> StepExecutor.run(plan)         # one forward_step, real sampling
                  detokenize the emitted tokens
                  core.commit(plan, start, [end])

Times are seconds since the run started (``time.perf_counter``); a step runs
from the moment it is scheduled to the moment its sampled ids are on the
host (after a CUDA synchronisation on GPU), so consecutive steps tile the
time the engine is busy and the simulator's step durations mean the same.
Every emitted token's time is kept (this is the measured side). Ctrl-C, an
out-of-memory error or ``max_duration_s`` stop the run early; what was
measured so far is kept and the run's ``status`` says why it ended.

Async scheduling (when the policy asks for it, as the simulator's replica
does): the real engine still runs steps one after the other, but plans step
N+1 as vLLM's ``AsyncScheduler`` would have while step N ran. The core sees
only requests that were ready when step N started (``visible_until``), and
requests finishing in step N keep their slot and blocks for that plan
(``EngineCore.pipelined``). So the measured run and its prediction make the
same decisions; only the scheduler's CPU time is not hidden behind the step.
Requests carry the workload's priority and shared-prefix fields, as in the
simulator.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
import pandas as pd
import torch
from tqdm import tqdm

from calibration.step_executor import StepExecutor
from calibration.tokenizer import ByteTokenizer, prompt_text
from sim.cost.base import SHAPE_FIELDS
from sim.engine.kv_cache import prefix_describer
from sim.engine.request import Request
from sim.engine.scheduler import EngineCore, StepPlan
from sim.workload.generate import RequestArrays

STEP_FIELDS = (
    "start_s",
    "forward_start_s",
    "end_s",
    "done_s",
    "forward_cpu_s",
    *SHAPE_FIELDS,
)


@dataclass
class MeasuredRun:
    """What a measured run recorded (frames as ``sim.serving.simulation.RawResult`` plus tokens)."""

    requests: pd.DataFrame
    core_steps: pd.DataFrame
    steps: pd.DataFrame
    tokens: pd.DataFrame
    timeseries: pd.DataFrame
    extra_itl_s: npt.NDArray[np.float64]
    status: str  # "complete", "interrupted", "out of memory", "time limit"
    message: str
    wall_s: float
    outputs: dict[int, str] = field(default_factory=dict)


@dataclass
class _Log:
    """Per-step rows and per-token rows, appended as the run goes."""

    steps: list[tuple[float, ...]] = field(default_factory=list)
    batches: list[str] = field(default_factory=list)
    token_request: list[int] = field(default_factory=list)
    token_index: list[int] = field(default_factory=list)
    token_time: list[float] = field(default_factory=list)
    token_id: list[int] = field(default_factory=list)


def _is_oom(error: BaseException) -> bool:
    if isinstance(error, MemoryError | torch.OutOfMemoryError):
        return True
    return isinstance(error, RuntimeError) and "out of memory" in str(error).lower()


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
        self.pipelined = core.pipelined
        self._describe = prefix_describer(work)  # None unless requests share prefixes
        priority = work.priority
        self._priorities = None if priority is None else priority.tolist()
        self.tokenizer = ByteTokenizer()
        rng = np.random.default_rng(seed)
        # Prompt texts are made before the clock starts: generating them is not serving.
        self.texts = [prompt_text(int(n), rng) for n in work.num_prompt_tokens]
        self.outputs: dict[int, list[str]] = {}
        self.log = _Log()
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

    def _step(self, plan: StepPlan, start_s: float) -> None:
        core, executor, log = self.core, self.executor, self.log
        executor.sync_slots(core.running)
        before = {r.request_id: r.num_generated_tokens for r, _ in plan.scheduled}
        shape = plan.shape()  # before commit: a shape walks the pre-step counters
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
        core.commit(plan, start_s, [end])
        for request, _ in plan.scheduled:
            rid = request.request_id
            if request.num_generated_tokens > before[rid]:
                log.token_request.append(rid)
                log.token_index.append(request.num_generated_tokens - 1)
                log.token_time.append(end)
                log.token_id.append(sampled[rid])
            if request.finish_s is not None:
                executor.forget(rid)
        log.steps.append(
            (
                start_s,
                forward_start,
                end,
                self._now(),
                forward_cpu,
                shape.num_prefill_seqs,
                shape.num_prefill_tokens,
                shape.prefill_attention_pairs,
                shape.prefill_kv_read_tokens,
                shape.num_decode_seqs,
                shape.num_decode_context_tokens,
            )
        )
        log.batches.append(" ".join(f"{r.request_id}:{n}" for r, n in plan.scheduled))

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
                deferred = self.pipelined and self.core.num_deferred_at_plan > 0
                visible_until = None
                if plan.is_empty:
                    if deferred:
                        continue  # vLLM plans again once the step's output is in
                    if next_index >= total:
                        break  # pragma: no cover - only rejected requests were left
                    time.sleep(max(0.0, arrivals[next_index] - self._now()))
                    continue
                self._step(plan, start)
                if self.pipelined:
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
                self._record_unsent(index)
        return self._result(status, message, wall_s)

    def _record_unsent(self, index: int) -> None:
        self.core.waiting.append(self._request(index, int(self.work.num_prompt_tokens[index])))

    def _result(self, status: str, message: str, wall_s: float) -> MeasuredRun:
        core, log = self.core, self.log
        core.flush_unfinished()
        requests = core.records.frame().sort_values("request_id", ignore_index=True)
        requests["rejection_reason"] = requests["request_id"].map(core.rejections)
        steps = pd.DataFrame(log.steps, columns=list(STEP_FIELDS))
        steps["batch"] = log.batches
        tokens = pd.DataFrame(
            {
                "request_id": np.asarray(log.token_request, dtype=np.int64),
                "token_index": np.asarray(log.token_index, dtype=np.int64),
                "time_s": np.asarray(log.token_time, dtype=np.float64),
                "token_id": np.asarray(log.token_id, dtype=np.int64),
            }
        )
        series = core.series.frame()
        series["kv_cache_usage"] = series["num_kv_blocks_used"] / core.kv.num_blocks
        return MeasuredRun(
            requests=requests,
            core_steps=core.steps.frame(),
            steps=steps,
            tokens=tokens,
            timeseries=series,
            extra_itl_s=np.asarray(core.extra_itl_s, dtype=np.float64),
            status=status,
            message=message,
            wall_s=wall_s,
            outputs={i: "".join(parts) for i, parts in self.outputs.items()},
        )
