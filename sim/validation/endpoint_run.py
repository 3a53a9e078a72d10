"""A live-server run as a ``servesim measure`` folder (the same files, the same columns).

``requests.parquet`` has the simulator's columns (times in seconds from the
first scheduled arrival) plus what only a client sees: ``scheduled_arrival_s``
(the scenario's time; ``arrival_s`` is when the request was sent),
``num_chunks``, ``prompt_tokens_exact``, ``http_status`` and ``error``. A
request that failed (HTTP error, stream closed early, timeout) or was still in
flight when the run stopped has no ``finish_s`` (NaN) and its ``error``
says why; it is not counted as completed. The client cannot see the
server's queue: ``first_scheduled_s`` is NaN. ``tokens.parquet`` has one row
per content chunk of each completed request (``token_index`` = the chunk's
index: ITL is per chunk, as in vllm bench), ``steps.parquet`` is empty (no
step log from outside the server), ``timeseries.csv`` counts requests in
flight (``num_running``) and held back by the concurrency bound
(``num_waiting``). ``summary.json`` is marked ``"mode": "measured"`` with the
endpoint, model, failures and whether the run is ``partial``; ``run.json``
says the same in a few fields.
"""

from __future__ import annotations

import json
import platform
import warnings
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

import sim
from sim.metrics.itl import STEP_COLUMNS
from sim.metrics.quantiles import latency_stats_ms
from sim.metrics.report import summary_to_json, write_outputs
from sim.metrics.stats import summarize, with_request_metrics
from sim.scenario import Scenario
from sim.validation.endpoint import EndpointOptions, RunState, parse_endpoint
from sim.validation.endpoint_client import Outcome
from sim.workload.generate import RequestArrays

_NAN = float("nan")


def _row(
    index: int, out: Outcome | None, state: RunState, work: RequestArrays, origin: float
) -> dict[str, Any]:
    scheduled = float(work.arrival_s[index])
    prompt = state.prompts[index] if index < len(state.prompts) else None
    row: dict[str, Any] = {
        "request_id": index,
        "arrival_s": scheduled,
        "ready_s": scheduled,
        "first_scheduled_s": _NAN,
        "first_token_s": _NAN,
        "finish_s": _NAN,
        "num_prompt_tokens": prompt.num_tokens if prompt else int(work.num_prompt_tokens[index]),
        "num_output_tokens": int(work.num_output_tokens[index]),
        "num_generated_tokens": 0,
        "num_preemptions": 0,
        "rejection_reason": None,
        "scheduled_arrival_s": scheduled,
        "num_chunks": 0,
        "prompt_tokens_exact": bool(prompt and prompt.exact),
        "http_status": None,
        "error": "never sent: the run stopped first",
    }
    if out is None:
        return row
    if out.sent_s is not None:
        row["arrival_s"] = row["ready_s"] = out.sent_s - origin
    if out.chunk_s:
        row["first_token_s"] = out.chunk_s[0] - origin
    if out.num_prompt_tokens is not None:
        row["num_prompt_tokens"] = out.num_prompt_tokens
        row["prompt_tokens_exact"] = True
    generated = out.num_generated_tokens
    row.update(
        num_generated_tokens=len(out.chunk_s) if generated is None else generated,
        num_chunks=len(out.chunk_s),
        http_status=out.status,
        error=out.error,
    )
    if out.ok:
        row["finish_s"] = out.chunk_s[-1] - origin
    elif out.error is None:
        row["error"] = "in flight when the run stopped"
    return row


def request_frame(state: RunState, work: RequestArrays) -> pd.DataFrame:
    """One row per scenario request, in scenario order."""
    origin = state.origin_s if state.origin_s is not None else 0.0
    rows = [_row(i, out, state, work, origin) for i, out in enumerate(state.outcomes)]
    frame = pd.DataFrame(rows)
    frame["http_status"] = frame["http_status"].astype("Int64")
    frame["rejection_reason"] = frame["rejection_reason"].astype("object")
    return frame


def token_frame(state: RunState) -> pd.DataFrame:
    """Every content chunk's time (seconds from the origin) of the completed requests."""
    origin = state.origin_s if state.origin_s is not None else 0.0
    ids: list[int] = []
    index: list[int] = []
    times: list[float] = []
    for rid, out in enumerate(state.outcomes):
        if out is not None and out.ok:
            ids += [rid] * len(out.chunk_s)
            index += range(len(out.chunk_s))
            times += [t - origin for t in out.chunk_s]
    return pd.DataFrame(
        {
            "request_id": np.asarray(ids, dtype=np.int64),
            "token_index": np.asarray(index, dtype=np.int64),
            "time_s": np.asarray(times, dtype=np.float64),
        }
    )


def timeseries_frame(requests: pd.DataFrame, state: RunState) -> pd.DataFrame:
    """Requests held back by the concurrency bound, and in flight, at every change."""
    origin = state.origin_s if state.origin_s is not None else 0.0
    # (time, order, d waiting, d running); at one time: queued, then sent, then ended.
    events: list[tuple[float, int, int, int]] = []
    for rid, out in enumerate(state.outcomes):
        scheduled = float(requests["scheduled_arrival_s"].iloc[rid])
        if out is None or out.sent_s is None:
            continue
        sent = out.sent_s - origin
        ended = (out.ended_s if out.ended_s is not None else state.end_s or out.sent_s) - origin
        events += [(scheduled, 0, 1, 0), (sent, 1, -1, 1), (ended, 2, 0, -1)]
    events.sort()
    times = np.asarray([e[0] for e in events], dtype=np.float64)
    waiting = np.cumsum([e[2] for e in events], dtype=np.int64)
    running = np.cumsum([e[3] for e in events], dtype=np.int64)
    return pd.DataFrame({"time_s": times, "num_waiting": waiting, "num_running": running})


def failure_counts(requests: pd.DataFrame) -> dict[str, int]:
    """Failed requests by error message (cut to 80 characters)."""
    errors = requests["error"].dropna().astype(str).str.slice(0, 80)
    return dict(Counter(errors).most_common())


@dataclass
class EndpointRun:
    """A live-server run's tables and summary; ``write`` lays out a measure folder."""

    scenario: Scenario
    requests: pd.DataFrame
    tokens: pd.DataFrame
    timeseries: pd.DataFrame
    summary: dict[str, Any]
    samples: dict[str, str]

    def write(self, out_dir: str | Path) -> list[Path]:
        """requests.parquet, summary.json, timeseries.csv, plots, steps, tokens, run.json."""
        out = Path(out_dir)
        steps = pd.DataFrame({c: np.empty(0) for c in STEP_COLUMNS})
        paths = write_outputs(
            out, self.requests, steps, self.timeseries, self.summary, slo=self.scenario.slo
        )
        for name, frame in (("steps", steps), ("tokens", self.tokens)):
            paths.append(out / f"{name}.parquet")
            frame.to_parquet(paths[-1], index=False)
        keys = ("mode", "status", "partial", "message", "endpoint", "api", "model", "completed")
        meta = {"format": "servesim-endpoint"} | {k: self.summary.get(k) for k in keys}
        meta["num_failed"] = self.summary["num_failed"]
        paths.append(out / "run.json")
        paths[-1].write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        paths.append(out / "sample_outputs.json")
        paths[-1].write_text(summary_to_json(self.samples) + "\n", encoding="utf-8")
        return paths


def endpoint_run(
    scenario: Scenario, work: RequestArrays, state: RunState, opts: EndpointOptions
) -> EndpointRun:
    """Tables and the ``vllm bench serve`` summary of a finished (or stopped) run."""
    requests = request_frame(state, work)
    tokens = token_frame(state)
    steps = pd.DataFrame({c: np.empty(0) for c in STEP_COLUMNS})
    summary: dict[str, Any] = dict(summarize(requests, steps, np.empty(0), scenario.slo))
    ordered = tokens.sort_values(["request_id", "token_index"])
    same = ordered["request_id"].to_numpy()[1:] == ordered["request_id"].to_numpy()[:-1]
    summary |= latency_stats_ms("itl", np.diff(ordered["time_s"].to_numpy())[same])
    target = parse_endpoint(opts.url, opts.api)
    num_failed = int(requests["error"].notna().sum())
    wall_s = (state.end_s or 0.0) - (state.origin_s or 0.0) if state.origin_s else 0.0
    summary.update(
        scenario=scenario.name,
        seed=scenario.seed,
        cost_model="measured",
        policy=scenario.scheduler.kind,
        num_preemptions=0,
        servesim_version=sim.__version__,
        mode="measured",
        status=state.status,
        partial=state.status != "complete",
        message=f"{state.message}; {num_failed} failed" if num_failed else state.message,
        wall_s=wall_s,
        endpoint=target.url,
        api=target.api,
        model=state.model,
        device="http",
        device_name=f"{state.model} at {target.base}",
        num_failed=num_failed,
        failures=failure_counts(requests),
        prompt_tokens=state.prompt_tokens,
        ignore_eos=state.ignore_eos_sent,
        max_concurrency=opts.max_concurrency,
        timeout_s=opts.timeout_s,
        retries=opts.retries,
        python=platform.python_version(),
    )
    done = [(i, o) for i, o in enumerate(state.outcomes) if o is not None and o.ok][:5]
    samples = {str(i): o.text[:200] for i, o in done}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # NaN latencies of failed requests
        table = with_request_metrics(requests)
    return EndpointRun(scenario, table, tokens, timeseries_frame(requests, state), summary, samples)
