"""``servesim measure``: serve a scenario on the real model and write what was measured.

The engine and what it runs: docs/validation.md, "How it works". Writes the
same per-request table and ``summary.json`` as a simulated run, marked
``"mode": "measured"`` with the device, threads and torch version, plus
``steps.parquet`` (every step's shape, batch, start, end) and
``tokens.parquet`` (every output token's time); ITL in the summary comes
from the real gaps between a request's tokens.

A shared CPU host's speed wanders: on this project's 2-core cloud machine a
128-token prefill of SmolLM2-135M took 233-280 ms over two minutes, and a
measured run can go 10 % slower or faster than the calibration made minutes
before it. Hence the probe (``run_probe``): three fixed step shapes timed
just before and just after the run, which ``servesim validate`` compares
with the cost model (``calibration.compare_measured.speed_ratio``).
"""

from __future__ import annotations

import platform
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd
import torch

import sim
from calibration.compare_measured import PROBE_POINTS
from calibration.model import TORCH_DTYPES, LlamaModel
from calibration.profile import GridPoint, cpu_model, free_memory_bytes, time_step
from calibration.reference_engine import MeasuredRun, StepExecutor, WallClockEngine
from calibration.sampling import SamplingParams
from sim.api import core_config_for, summary_header
from sim.engine.records import RequestTable
from sim.errors import ConfigError
from sim.metrics.stats import with_request_metrics
from sim.scenario import Scenario
from sim.validation.formats.measure_dir import write_measure_folder
from sim.validation.predict import measured_summary, with_request_spec
from sim.workload.generate import ClosedLoopWorkload, generate_open_loop

Device = Literal["cpu", "cuda"]

REFERENCE_LAYOUT = {
    "tensor_parallel_size": 1,
    "pipeline_parallel_size": 1,
    "data_parallel_size": 1,
    "expert_parallel_size": 1,
}
"""The reference engine's parallel layout, in ``sim.validation.match.LAYOUT_SETTINGS``'
names: one process, the whole model on one device (no tensor, pipeline, data or
expert parallelism)."""


@dataclass
class Measurement:
    """A measured run and its summary (``requests`` has the latency columns)."""

    scenario: Scenario
    run: MeasuredRun
    requests: pd.DataFrame
    summary: dict[str, Any]

    def write(self, out_dir: str | Path) -> list[Path]:
        """requests.parquet, summary.json, timeseries.csv, plots, steps and tokens."""
        run, sample = self.run, {str(k): v[:200] for k, v in list(self.run.outputs.items())[:5]}
        return write_measure_folder(
            Path(out_dir),
            self.requests,
            run.core_steps,
            run.timeseries,
            self.summary,
            self.scenario.slo,
            run.steps,
            run.tokens,
            sample,
        )


def _check_fits(scenario: Scenario, device: torch.device, dtype: torch.dtype) -> None:
    """A one-line ConfigError if the model's weights cannot fit on ``device``."""
    spec = scenario.model
    need = spec.num_params * torch.finfo(dtype).bits // 8
    free = free_memory_bytes(device)
    if need > 0.8 * free:
        raise ConfigError(
            f"model {spec.name!r}: {need / 1e9:.1f} GB of weights do not fit in "
            f"{free / 1e9:.1f} GB free on {device.type}; measure a small model "
            "(e.g. model: tiny) on CPU"
        )


def _load_average() -> float | None:
    """The 1-minute load average (Linux), to see whether the machine was busy."""
    try:
        return float(Path("/proc/loadavg").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def run_probe(model: LlamaModel, num_repeats: int = 5) -> dict[str, float]:
    """Median wall time (s) per probe shape: ``num_repeats`` runs after one untimed run."""
    medians: dict[str, float] = {}
    with torch.inference_mode():
        for name, (chunks, contexts) in PROBE_POINTS.items():
            point = GridPoint("mixed", chunks, contexts)
            cache = model.new_cache(point.num_slots, point.max_len_tokens + 1)
            prefill, decode = point.inputs(
                [[3 + j % 250 for j in range(c)] for c, _ in chunks], [7] * len(contexts)
            )
            # As in the profiler: a timed step follows one of the same shape.
            times = [
                time_step(model, cache, point, prefill, decode) for _ in range(num_repeats + 1)
            ]
            medians[name] = float(np.median(times[1:]))
    return medians


def measure(
    scenario: Scenario,
    device: Device = "cpu",
    *,
    base_dir: Path | None = None,
    dtype: str | None = None,
    threads: int = 1,
    sampling: SamplingParams | None = None,
    progress: bool = True,
    max_duration_s: float | None = None,
    probe: bool = True,
) -> Measurement:
    """Serve ``scenario``'s requests on the real model; summarise what was measured
    (with ``probe``: the module docstring's probe, before and after the run)."""
    if isinstance(scenario.workload, ClosedLoopWorkload):
        raise ConfigError("workload: servesim measure replays open-loop workloads only")
    if scenario.workload.max_concurrency is not None:
        raise ConfigError(
            "workload.max_concurrency: the in-process measure sends every request at its "
            "arrival time; measure a capped load on a server (--endpoint)"
        )
    if device == "cuda" and not torch.cuda.is_available():
        raise ConfigError("--device cuda: no CUDA device is available here")
    # The simulator's own core factory; raises for what the reference engine cannot run.
    core_config = core_config_for(scenario, reference_engine=True)
    dtype_name = dtype or ("fp32" if device == "cpu" else "bf16")
    if dtype_name not in TORCH_DTYPES:
        raise ConfigError(f"--dtype {dtype_name!r}: expected one of {', '.join(TORCH_DTYPES)}")
    torch_device = torch.device(device)
    if device == "cpu":
        torch.set_num_threads(threads)
    _check_fits(scenario, torch_device, TORCH_DTYPES[dtype_name])
    work = generate_open_loop(scenario.workload, np.random.default_rng(scenario.seed), base_dir)
    policy = scenario.scheduler
    num_slots = policy.step_seq_bound()
    num_slots = max(1, min(num_slots, len(work.arrival_s)))
    longest = int((work.num_prompt_tokens + work.num_output_tokens).max(initial=2))
    max_len = min(longest, scenario.engine.max_model_len_tokens)
    model = LlamaModel(scenario.model, dtype=TORCH_DTYPES[dtype_name], device=torch_device, seed=0)
    sampling = sampling or SamplingParams()
    executor = StepExecutor(model, num_slots, max_len, sampling, seed=scenario.seed)
    core = core_config.new_core()
    engine = WallClockEngine(core, executor, work, seed=scenario.seed, sync=device == "cuda")
    probes = {"before": run_probe(model)} if probe else {}
    run = engine.run(progress=progress, max_duration_s=max_duration_s)
    if probe:
        probes["after"] = run_probe(model)
    table = RequestTable.from_frame(run.requests)
    summary: dict[str, Any] = dict(measured_summary(table, run.tokens, scenario.slo))
    steps = run.steps
    forward_wall = float((steps["end_s"] - steps["forward_start_s"]).sum())
    cpu_share = float(steps["forward_cpu_s"].sum()) / forward_wall if forward_wall > 0 else None
    cuda = device == "cuda"
    device_name = torch.cuda.get_device_name(torch_device) if cuda else cpu_model()
    header = summary_header(scenario, core_config, "measured")
    # What the layout check reads (sim.validation.match): this process ran the whole
    # model, one replica on one device, whatever the scenario's parallelism says.
    header["engine_settings"] |= REFERENCE_LAYOUT
    summary.update(
        **header,
        num_preemptions=int(run.requests["num_preemptions"].sum()),
        servesim_version=sim.__version__,
        mode="measured",
        status=run.status,
        message=run.message,
        wall_s=run.wall_s,
        num_steps=len(run.steps),
        device=device,
        device_name=device_name,
        dtype=dtype_name,
        threads=torch.get_num_threads(),
        torch_version=torch.__version__,
        python=platform.python_version(),
        sampling=sampling.model_dump(),
        # On CPU: the share of the forward passes' wall time this thread was
        # running (1.0 = the core was ours; lower = another process took it).
        forward_cpu_share=None if cuda else cpu_share,
        load_average_after=_load_average(),
    )
    requests = with_request_metrics(with_request_spec(run.requests, work))
    if probes:
        # Median seconds per probe shape; calibration.compare_measured.speed_ratio reads them.
        summary["probe_s"] = probes
    return Measurement(scenario, run, requests, summary)
