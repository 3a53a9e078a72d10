"""``servesim validate``: predict measured runs with the simulator and report the error.

The headline prediction prices the run with the scenario's cost model (from
calibration microbenchmarks, never from the run being predicted); docs/validation.md
("How it works") tells the others beside it: the noise floor (a second run), an
engine-overhead fit on *another* run (``overhead_from``) and the machine's drift
(``speed_ratio``). Writes ``report.md``, ``validation.json`` and ``cdf.png``.
Importing this module does not import torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from calibration.fit import fit_engine_overhead
from sim.api import cost_model_for
from sim.cost.base import CostModel, StepShape
from sim.cost.calibrated import CalibratedCost
from sim.cost.fitted import ScaledCost
from sim.cost.label import cost_model_tag
from sim.errors import ConfigError
from sim.metrics.figure_data import caption_line
from sim.metrics.report import summary_to_json
from sim.scenario import Scenario
from sim.validation.formats.measure_dir import MeasureFolder, read_measure_folder
from sim.validation.importers import import_run, run_kind
from sim.validation.intake import ENGINE_INTAKE
from sim.validation.match import RunFacts, check_run
from sim.validation.predict import (
    Latencies,
    compare,
    measured_latencies,
    predict,
    simulated_latencies,
    within_targets,
)
from sim.validation.report import plot_cdfs, render_markdown

# Shapes inside every shipped grid's range (chunk <= 128 tokens, batch <= 8,
# context 160), so the curve prices them by interpolation, not extrapolation.
# Each is (prefill chunks as (new, cached) tokens, decode contexts).
PROBE_POINTS: dict[str, tuple[tuple[tuple[int, int], ...], tuple[int, ...]]] = {
    "prefill 128": (((128, 0),), ()),
    "decode 8 x 160": ((), (160,) * 8),
    "mixed 64 + 8 x 160": (((64, 0),), (160,) * 8),
}


def speed_ratio(probes: list[object], cost: CostModel) -> float | None:
    """Geometric mean of measured / predicted over every probe shape and time.

    Above 1: the machine ran slower around the measured run than the cost
    model says. ``probes`` are ``run_probe`` results as read back from a
    ``summary.json`` (anything else is skipped); None if nothing usable.
    """
    logs = []
    for medians in probes:
        if not isinstance(medians, dict):
            continue
        for name, measured in medians.items():
            point = PROBE_POINTS.get(str(name))
            # A true is not 1 s (bool is an int in Python): unreadable, as text is.
            readable = isinstance(measured, int | float) and not isinstance(measured, bool)
            if point is None or not readable or measured <= 0:
                continue
            chunks, contexts = point
            predicted = cost.step_s(StepShape.build(list(chunks), list(contexts)))
            logs.append(np.log(float(measured) / predicted))
    return float(np.exp(np.mean(logs))) if logs else None


DRIFT_FACT = "machine speed vs calibration (probe; >1 = slower)"


def load_measured(
    path: str | Path, assume_device: str | None = None, assume_model: str | None = None
) -> MeasureFolder:
    """A ``servesim measure`` folder, or a run in any format ``servesim import-run`` reads
    (then with a summary made of what it records, and no step log).

    ``assume_device`` / ``assume_model`` stand for what an imported run does not
    record (``validate --assume-device``): a run naming neither cannot be checked
    against a scenario (``sim.validation.match``). A run that records them keeps its own.
    """
    folder = Path(path)
    kind = run_kind(folder, "--measured")
    if kind == "measure":
        try:
            measured = read_measure_folder(folder)
        except ConfigError as error:
            raise ConfigError(f"--measured {error}") from None
        # A measure --endpoint run saw the server, not its device (RunFacts reads
        # this only where the run names none).
        if assume_device:
            measured.summary["assumed_device"] = assume_device
        if not measured.summary.get("model") and assume_model:
            measured.summary["model"] = assume_model
        return measured
    run = import_run(folder, kind)
    # What it records of itself, read as calibrate --from-run reads it (the summary's
    # keys say it again to RunFacts), the assumptions filling what it does not say.
    said = RunFacts.from_summary(run.requests, run.meta)
    summary = {
        "format": str(run.meta.get("format", "imported")),
        "completed": len(run.requests),
        "mode": run.meta.get("mode"),
        "status": run.meta.get("status"),
        "hardware": said.hardware,
        "device_name": said.device_name or assume_device,
        "model": said.model or assume_model,
        "num_failed": run.meta.get("num_failed", 0),
        "num_incomplete": said.num_incomplete,
        "num_cached_tokens": said.num_cached_tokens,  # 0 where a shared prefix is declared
        "engine_settings": said.engine_settings,
        "load": run.meta.get("load"),  # the tool's load profile: the replay drives it
        "latency_from": run.meta.get("latency_from"),  # ENGINE_INTAKE: vLLM's queued_ts
    }
    return MeasureFolder(folder, summary, run.requests, run.tokens, pd.DataFrame())


@dataclass
class Validation:
    """Comparisons (prediction name -> metrics), the noise floor and the report's facts."""

    comparisons: dict[str, dict[str, Any]]
    noise: dict[str, Any] | None
    facts: dict[str, object]
    latencies: dict[str, Latencies]
    # The figure's line (sim.metrics.figure_data.caption_line): scenario, model, GPU
    # and the base prediction's cost model, measured or a guess.
    caption: str = ""
    # Why the errors may say more about the set-up than the simulator (one line each),
    # in report.md, validation.json and the command's warnings.
    caveats: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "facts": self.facts,
            "caveats": self.caveats,
            "predictions": self.comparisons,
            "noise_floor": self.noise,
            "within_targets": {name: within_targets(c) for name, c in self.comparisons.items()},
        }


def validate(
    scenario: Scenario,
    measured: MeasureFolder,
    *,
    second: MeasureFolder | None = None,
    overhead_from: MeasureFolder | None = None,
    cost: CostModel | None = None,
    base_dir: Path | None = None,
) -> Validation:
    """Predict ``measured`` (and compare with ``second``, if given).

    A run of another model, hardware, engine settings or request set than
    the scenario's is refused, listing what differs (``sim.validation.match``).
    """
    unrecorded: list[str] = []  # what a run could not say of itself, one caveat each
    for run in (measured, second):
        if run is not None:
            said = RunFacts.from_summary(run.requests, run.summary)
            unrecorded += check_run(scenario, said, base_dir, f"--measured {run.path}")
    base_cost = cost if cost is not None else cost_model_for(scenario)
    meas = measured_latencies(measured.requests, measured.tokens)
    again = None if second is None else measured_latencies(second.requests, second.tokens)
    if second is not None and again is not None and again.per_request.equals(meas.per_request):
        raise ConfigError(  # its noise floor would be 0: no two runs differ so little
            f"--measured {second.path}: the same run as {measured.path} (every request's "
            "latencies equal); the noise floor compares two runs of the scenario"
        )
    latencies = {"measured": meas}
    predictions: dict[str, CostModel] = {"microbenchmarks": base_cost}
    if overhead_from is not None:
        if overhead_from.path.resolve() == measured.path.resolve():
            raise ConfigError("--overhead-from must be another run than the one predicted")
        if overhead_from.steps is None or overhead_from.steps.empty:
            raise ConfigError(
                f"--overhead-from {overhead_from.path}: no step log (measure runs only)"
            )
        predictions["microbenchmarks + engine overhead"] = fit_engine_overhead(
            overhead_from.steps, base_cost, source=overhead_from.path.name
        )
    drift = _probe_drift(measured.summary, base_cost)
    if drift is not None:
        # The machine's speed around this run (probe microbenchmarks, not the run).
        predictions["microbenchmarks x machine drift"] = ScaledCost(base_cost, drift["both"])
    comparisons = {}
    from_intake = measured.summary.get("latency_from") == ENGINE_INTAKE
    for name, model in predictions.items():
        result = predict(scenario, measured.requests, model, measured.summary.get("load"))
        lat = simulated_latencies(result, from_intake)
        latencies[f"predicted: {name}"] = lat
        comparisons[f"{name} — {model.label}"] = compare(meas, lat)
    noise = None
    if second is not None and again is not None:
        latencies["measured (run 2)"] = again
        noise = compare(meas, again)
    s = measured.summary
    facts: dict[str, object] = {
        "scenario": scenario.name,
        "measured": f"{measured.path} ({s.get('completed')} requests, {s.get('device_name')}, "
        f"{s.get('threads')} thread(s), torch {s.get('torch_version')}, status {s.get('status')})",
        "request throughput (req/s)": round(float(s.get("request_throughput") or 0.0), 3),
    }
    if "format" in s:  # imported from another tool: no device, threads or throughput recorded
        facts["measured"] = f"{measured.path} ({s['completed']} requests, {s['format']} format)"
        del facts["request throughput (req/s)"]
    if drift is not None:
        facts[DRIFT_FACT] = f"x{drift['before']:.3f} before the run, x{drift['after']:.3f} after"
    if second is not None:
        facts["noise floor"] = f"{second.path} vs {measured.path}"
    caption = caption_line(
        f"scenario {scenario.name}",
        scenario.model.name,
        scenario.hardware.name,
        cost_model_tag(base_cost.label),
    )
    cpu_caveat = calibration_cpu_caveat(base_cost, s)
    caveats = unrecorded + ([] if cpu_caveat is None else [cpu_caveat])
    return Validation(comparisons, noise, facts, latencies, caption, caveats)


def calibration_cpu_caveat(cost: CostModel, summary: dict[str, Any]) -> str | None:
    """A line when ``cost`` was timed on another CPU model than the run in ``summary``
    was measured on (its ``device_name`` on a ``device: cpu`` run), else None.

    A calibrated curve is the step time of one CPU model: on another, every step
    can be tens of percent faster or slower, an error that is the machine's, not
    the simulator's (recalibrating on the measuring machine removes it).
    """
    if not isinstance(cost, CalibratedCost) or cost.timed_on is None:
        return None
    if cost.timed_on.device != "cpu" or summary.get("device") != "cpu":
        return None
    run_cpu = summary.get("device_name")
    if not run_cpu or run_cpu == cost.timed_on.cpu_model:
        return None
    return (
        f"the cost model ({cost.label}) was timed on CPU {cost.timed_on.cpu_model!r}, the run "
        f"measured on {run_cpu!r}: expect step-time errors from the machine alone; calibrate "
        "on the measuring machine (servesim calibrate --device cpu) to predict it"
    )


def write_validation(validation: Validation, out_dir: str | Path, title: str) -> list[Path]:
    """report.md, validation.json and cdf.png in ``out_dir``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    report = out / "report.md"
    caveats = {f"caveat {i + 1}": text for i, text in enumerate(validation.caveats)}
    report.write_text(
        render_markdown(
            title,
            {**validation.facts, **caveats},
            validation.comparisons,
            validation.noise,
            notes="![CDFs](cdf.png)",
        ),
        encoding="utf-8",
    )
    data = out / "validation.json"
    data.write_text(summary_to_json(validation.to_json()) + "\n", encoding="utf-8")
    plot = plot_cdfs(validation.latencies, out / "cdf.png", title, validation.caption)
    return [report, data, plot]


def _probe_drift(summary: dict[str, Any], cost: CostModel) -> dict[str, float] | None:
    """Measured / predicted probe times before, after and over both; None without probes."""
    probes = summary.get("probe_s")
    if not isinstance(probes, dict) or not {"before", "after"} <= probes.keys():
        return None
    before = speed_ratio([probes["before"]], cost)
    after = speed_ratio([probes["after"]], cost)
    both = speed_ratio([probes["before"], probes["after"]], cost)
    if before is None or after is None or both is None:
        return None
    return {"before": before, "after": after, "both": both}
