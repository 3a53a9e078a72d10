"""Black-box calibration: fit a cost model's free parameters to measured runs.

docs/validation.md ("Black-box calibration", "The engine's CPU work and the way
in") tells what is fitted, the objective, the optimiser and the folds. Each
evaluation replays every training run's exact requests with the base cost
adjusted (``FitRun.adjusted_cost``) and scores it::

    objective = mean over (run, metric in {TTFT, TPOT}, q in {p50, p90, p99}) of
                log(predicted_q / measured_q) ** 2

plus a weak pull towards the start (``PRIOR_WEIGHT``, ``CPU_PRIOR_WEIGHT``) for what
the runs do not inform. Errors are signed percentages,
``(predicted - measured) / measured * 100``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Generic, TypeVar

import numpy as np
import pandas as pd

from sim.config import FloatArray
from sim.cost.base import CostModel
from sim.cost.engine_cpu import EngineCpu, EngineCpuConfig, EngineCpuCost
from sim.cost.fitted import FitParameters, FittedCost
from sim.cost.fitted_cpu import EngineCpuFitValues
from sim.scenario import Scenario
from sim.validation.optimize import nelder_mead
from sim.validation.predict import per_request_latencies, predict, simulated_latencies

# The free parameters of sim.cost.fitted.FitParameters, in the order fits report them.
PARAMETERS = ("step_overhead_s", "prefill_multiplier", "decode_multiplier")
# --fit engine-cpu: sim.cost.engine_cpu.EngineCpuConfig's coefficients and the way in.
CPU_PARAMETERS = (
    "per_step_s",
    "scheduler_per_seq_s",
    "sampling_per_seq_s",
    "per_token_s",
    "non_overlapped_s",
)
WAY_IN = "way_in_s_per_request"
ENGINE_CPU_PARAMETERS = (*CPU_PARAMETERS, WAY_IN)
# The scheduler's part per sequence stays at its measured value: a run prices only the sum
# of the two per-sequence parts (structural_problem).
DEFAULT_CPU_FREE = ("per_step_s", "sampling_per_seq_s", "non_overlapped_s")
FIT_MODES = ("multipliers", "engine-cpu")  # --fit-kind: PARAMETERS or ENGINE_CPU_PARAMETERS
# One unit of the search per coefficient (s): the first simplex moves each by one unit.
CPU_UNITS_S = {
    "per_step_s": 1e-3,
    "scheduler_per_seq_s": 1e-5,
    "sampling_per_seq_s": 1e-5,
    "per_token_s": 1e-6,
    "non_overlapped_s": 1e-3,
    WAY_IN: 1e-2,
}
_MAX_CPU_UNITS = 100.0
# A weak pull (per unit squared) towards the start, the vLLM version's estimate, so that a
# coefficient the runs do not inform (CPU work hidden behind the GPU step) stays there.
CPU_PRIOR_WEIGHT = 1e-6
DEFAULT_MAX_EVALUATIONS = 120
METRICS = ("ttft_s", "tpot_s")
QUANTILES = {"p50": 50.0, "p90": 90.0, "p99": 99.0}
PRIOR_WEIGHT = 1e-4
OBJECTIVE = "mean squared log error of p50/p90/p99 TTFT and TPOT"
OPTIMISER = "Nelder-Mead (scipy, via sim.validation.optimize), box-bounded"
_LOG_MULTIPLIER_BOUND = float(np.log(20.0))  # multipliers within 1/20 .. 20
# A coefficient within this fraction of its search box's width of a limit ends at it: the
# runs' best lies beyond the box, so the fit does not identify it (``at_search_limit``).
LIMIT_TOLERANCE = 1e-3
_MAX_OVERHEAD_IN_SCALES = 100.0
# Common multipliers tried before the simplex search: 1/8 .. 8 in steps of sqrt(2).
START_SCALES = tuple(float(2.0 ** (k / 2)) for k in range(-6, 7))


# The CPU coefficients of a whole-step base, where only the way in can be fitted.
ZERO_CPU = EngineCpuConfig(
    per_step_s=0.0,
    scheduler_per_seq_s=0.0,
    sampling_per_seq_s=0.0,
    per_token_s=0.0,
    non_overlapped_s=0.0,
)
Adjustment = FitParameters | EngineCpuFitValues


@dataclass(frozen=True)
class FitRun:
    """A measured run ready to replay: scenario, requests, measured latencies, base cost."""

    name: str
    scenario: Scenario
    requests: pd.DataFrame
    base: CostModel  # GPU-only where the scenario's cost prices GPU work only
    # The scenario's engine CPU work when ``base`` prices GPU work only (kernel tables,
    # roofline); None when it times whole steps (a calibrated curve): no CPU fit then.
    engine_cpu: EngineCpu | None = None
    # Whether the run's arrival times are the clients' send times (the way in included).
    arrivals_include_way_in: bool = False
    # The load that drove the run (run.json's ``load``): its replay drives it too
    # (``sim.validation.predict.replay_work``); None: at the measured send times.
    load: Mapping[str, Any] | None = None
    # Whether the run's latencies count from the engine's intake (run.json's
    # ``latency_from: engine_intake``, vLLM's ``queued_ts``): the replay's count from its own.
    from_intake: bool = False

    @property
    def measured(self) -> pd.DataFrame:
        """Measured ``ttft_s``, ``tpot_s`` of completed requests, by request id."""
        return per_request_latencies(self.requests)

    def simulate(self, params: Adjustment) -> pd.DataFrame:
        """Predicted per-request latencies with ``params`` on the base cost."""
        scenario, cost = self.scenario, self.adjusted_cost(params)
        if isinstance(params, EngineCpuFitValues) and params.way_in_s_per_request is not None:
            frontend = scenario.frontend.model_copy(update={WAY_IN: params.way_in_s_per_request})
            scenario = scenario.model_copy(update={"frontend": frontend})
        result = predict(scenario, self.requests, cost, self.load)
        return simulated_latencies(result, self.from_intake).per_request

    def adjusted_cost(self, params: Adjustment) -> CostModel:
        """The base with ``params``: multipliers, or the fitted engine CPU work around it."""
        if isinstance(params, FitParameters):
            return FittedCost(self.base, params)
        if self.engine_cpu is None:
            if params.cpu == ZERO_CPU:  # only the way in fitted, on a whole-step base
                return self.base
            raise ValueError(f"{self.name}: the base times whole steps; no engine CPU to fit")
        return EngineCpuCost(
            self.base, EngineCpu(params.cpu, self.engine_cpu.async_scheduling, "fit")
        )


@dataclass(frozen=True)
class Target:
    """The latencies of one run that a fold scores: all, or these request ids."""

    run: int
    request_ids: tuple[int, ...] | None = None
    label: str = "all"


@dataclass(frozen=True)
class Fold:
    """Fit on ``train``, score ``test``."""

    name: str
    train: tuple[Target, ...]
    test: tuple[Target, ...]


def half_split(requests: pd.DataFrame) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Request ids of the first and second half by arrival (first half gets the odd one out)."""
    ordered = requests.sort_values(["arrival_s", "request_id"], kind="stable")
    ids = tuple(int(i) for i in ordered["request_id"])
    middle = (len(ids) + 1) // 2
    return ids[:middle], ids[middle:]


def cv_folds(runs: Sequence[FitRun]) -> list[Fold]:
    """Leave-one-run-out with 2+ runs; first half -> second half with one (the replay
    serves the whole run; only the scored latencies are split)."""
    if not runs:
        raise ValueError("no runs to split")
    if len(runs) == 1:
        first, second = half_split(runs[0].requests)
        if not first or not second:
            raise ValueError("one run needs at least two requests to split in halves")
        return [
            Fold(
                f"{runs[0].name}: first half -> second half",
                (Target(0, first, "first half"),),
                (Target(0, second, "second half"),),
            )
        ]
    everything = range(len(runs))
    return [
        Fold(
            f"leave out {runs[k].name}",
            tuple(Target(i) for i in everything if i != k),
            (Target(k),),
        )
        for k in everything
    ]


def in_flight_at_arrival(requests: pd.DataFrame) -> pd.Series:
    """Per request id: how many requests of the measured run were in flight (arrived before
    it, not yet finished) when it arrived; a request never served counts as none."""
    arrival = requests["arrival_s"].to_numpy(dtype=np.float64)
    finish = requests["finish_s"].to_numpy(dtype=np.float64)
    finish = np.where(np.isfinite(finish), finish, arrival)
    arrived = np.searchsorted(np.sort(arrival), arrival, side="left")
    finished = np.searchsorted(np.sort(finish), arrival, side="left")
    counts = np.maximum(arrived - finished, 0)
    return pd.Series(counts, index=requests["request_id"].to_numpy(dtype=np.int64))


def phase_split(requests: pd.DataFrame) -> tuple[Target, Target]:
    """Target 0's low-load and saturated phases: the requests that arrived with at most
    the median number of requests in flight (``in_flight_at_arrival``), and the rest."""
    counts = in_flight_at_arrival(requests)
    median = float(np.median(counts.to_numpy()))
    low = tuple(int(i) for i in counts.index[counts.to_numpy() <= median])
    high = tuple(int(i) for i in counts.index[counts.to_numpy() > median])
    if not low or not high:
        raise ValueError(
            f"one run needs requests both at and above its median load ({median:g} in flight) "
            "to split in phases"
        )
    return (
        Target(0, low, f"low load (<= {median:g} in flight)"),
        Target(0, high, f"saturated (> {median:g} in flight)"),
    )


def phase_folds(runs: Sequence[FitRun]) -> list[Fold]:
    """Leave-one-run-out with 2+ runs; with one, leave one phase out (``phase_split``):
    fit on the low-load phase and score the saturated one, and the reverse."""
    if len(runs) != 1:
        return cv_folds(runs)
    low, high = phase_split(runs[0].requests)
    name = runs[0].name
    return [
        Fold(f"{name}: {low.label} -> {high.label}", (low,), (high,)),
        Fold(f"{name}: {high.label} -> {low.label}", (high,), (low,)),
    ]


def _positive(latencies: pd.DataFrame, ids: tuple[int, ...] | None, metric: str) -> FloatArray:
    """The finite, positive values of ``metric`` a target scores (all rows, or ``ids``)."""
    table = latencies if ids is None else latencies.loc[latencies.index.intersection(list(ids))]
    values = table[metric].to_numpy(dtype=np.float64)
    return values[np.isfinite(values) & (values > 0)]


def _quantiles(latencies: pd.DataFrame, ids: tuple[int, ...] | None) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for metric in METRICS:
        values = _positive(latencies, ids, metric)
        out[metric] = {
            stat: float(np.percentile(values, q)) if values.size else float("nan")
            for stat, q in QUANTILES.items()
        }
    return out


def log_errors(
    predicted: pd.DataFrame, measured: pd.DataFrame, ids: tuple[int, ...] | None
) -> dict[str, dict[str, float]]:
    """``log(predicted_q / measured_q)`` per metric and quantile (nan where either is absent)."""
    p, m = _quantiles(predicted, ids), _quantiles(measured, ids)
    return {
        metric: {stat: float(np.log(p[metric][stat] / m[metric][stat])) for stat in QUANTILES}
        for metric in METRICS
    }


def score(
    runs: Sequence[FitRun], targets: Sequence[Target], params: Adjustment
) -> list[dict[str, dict[str, float]]]:
    """Log errors of every target, each run replayed once."""
    measured: dict[int, pd.DataFrame] = {}
    predicted: dict[int, pd.DataFrame] = {}
    out = []
    for target in targets:
        if target.run not in predicted:
            predicted[target.run] = runs[target.run].simulate(params)
            measured[target.run] = runs[target.run].measured
        out.append(log_errors(predicted[target.run], measured[target.run], target.request_ids))
    return out


def flat_errors(errors: Sequence[dict[str, dict[str, float]]]) -> FloatArray:
    """``score``'s log errors as one array, by target, metric and quantile."""
    return np.array([v for e in errors for by_stat in e.values() for v in by_stat.values()])


def objective_value(errors: Sequence[dict[str, dict[str, float]]]) -> float:
    """Mean squared log error; a missing quantile (nothing completed) counts as inf."""
    values = flat_errors(errors)
    if values.size == 0 or not np.all(np.isfinite(values)):
        return float("inf")
    return float(np.mean(values**2))


P = TypeVar("P", FitParameters, EngineCpuFitValues)


@dataclass(frozen=True)
class FitOutcome(Generic[P]):
    """Fitted parameters, the objective there and with the base model, and the simulations."""

    params: P
    value: float
    base_value: float
    num_evaluations: int
    # One line per free coefficient the fit ends at a search limit (``at_search_limit``).
    at_limit: tuple[str, ...] = ()


def _outcome(
    runs: Sequence[FitRun],
    targets: Sequence[Target],
    params: P,
    base: Adjustment,
    num: int,
    at_limit: tuple[str, ...],
) -> FitOutcome[P]:
    """``params`` as a fit's answer: the objective there and at ``base``, after ``num``
    simulations, and what ends at a search limit."""
    value, base_value = (objective_value(score(runs, targets, at)) for at in (params, base))
    return FitOutcome(params, value, base_value, num, at_limit)


def at_search_limit(
    free: Sequence[str], x: FloatArray, lower: Sequence[float], upper: Sequence[float]
) -> tuple[str, ...]:
    """Why each ``free`` coefficient at search point ``x`` is not identified, in one line:
    it ends within ``LIMIT_TOLERANCE`` of the box's width of a limit, where the runs' best
    lies beyond the box. A lower limit of 0 is the coefficient's own floor (no negative
    overhead or CPU time), not the box's."""
    lines = []
    for name, value, low, high in zip(free, x.tolist(), lower, upper, strict=True):
        near = LIMIT_TOLERANCE * (high - low)
        low_side = low != 0.0 and value <= low + near
        side = "upper" if value >= high - near else "lower" if low_side else None
        if side is not None:
            lines.append(
                f"{name} is not identified: the fit ends at its {side} search limit, so the "
                "runs' best lies beyond it; the base cost is too far off to adjust (check "
                "--scenario, --hardware and the run)"
            )
    return tuple(lines)


def overhead_scale_s(runs: Sequence[FitRun], targets: Sequence[Target]) -> float:
    """A natural size for the overhead: the median measured TPOT of the training requests."""
    values = [_positive(runs[t.run].measured, t.request_ids, "tpot_s") for t in targets]
    joined = np.concatenate(values) if values else np.empty(0)
    return float(np.median(joined)) if joined.size else 1e-3


def params_from_vector(x: FloatArray, free: Sequence[str], scale_s: float) -> FitParameters:
    """The overhead in units of ``scale_s``, multipliers as logarithms; fixed ones at identity."""
    values = dict(zip(free, x.tolist(), strict=True))
    return FitParameters(
        step_overhead_s=max(0.0, values.get("step_overhead_s", 0.0)) * scale_s,
        prefill_multiplier=float(np.exp(values.get("prefill_multiplier", 0.0))),
        decode_multiplier=float(np.exp(values.get("decode_multiplier", 0.0))),
    )


def starting_point(
    objective: Callable[[FloatArray], float], free: Sequence[str]
) -> tuple[FloatArray, int]:
    """Where Nelder-Mead starts: identity, or one common multiplier from ``START_SCALES``.

    When the base model is several times off (a machine slower than its
    microbenchmarks), a simplex started at identity can wander along the
    overhead axis and stall there; one scale for every free multiplier, the
    best of a coarse log grid, starts it in the right basin. Returns the start
    and the simulations spent.
    """
    is_multiplier = np.array([name != "step_overhead_s" for name in free])
    if not is_multiplier.any():
        return np.zeros(len(free)), 0
    candidates = [np.where(is_multiplier, np.log(scale), 0.0) for scale in START_SCALES]
    values = [objective(x) for x in candidates]
    return candidates[int(np.argmin(values))], len(candidates)


def fit(
    runs: Sequence[FitRun],
    targets: Sequence[Target],
    free: Sequence[str] = PARAMETERS,
    max_evaluations: int = DEFAULT_MAX_EVALUATIONS,
) -> FitOutcome[FitParameters]:
    """Minimise the objective over the ``free`` parameters (the others stay at identity)."""
    unknown = [name for name in free if name not in PARAMETERS]
    if unknown or not free:
        raise ValueError(f"free parameters must be a non-empty subset of {PARAMETERS}")
    scale_s = overhead_scale_s(runs, targets)
    multipliers = [name for name in free if name != "step_overhead_s"]

    def penalised(x: FloatArray) -> float:
        params = params_from_vector(x, free, scale_s)
        values = asdict(params)
        logs = [float(np.log(values[name])) for name in multipliers]
        prior = PRIOR_WEIGHT * sum(v * v for v in logs)
        return objective_value(score(runs, targets, params)) + prior

    n = len(free)
    lower = [0.0 if name == "step_overhead_s" else -_LOG_MULTIPLIER_BOUND for name in free]
    upper = [
        _MAX_OVERHEAD_IN_SCALES if name == "step_overhead_s" else _LOG_MULTIPLIER_BOUND
        for name in free
    ]
    start, num_start_evaluations = starting_point(penalised, free)
    # First simplex: 10 % of the TPOT scale as overhead, 10 % on each multiplier.
    found = nelder_mead(
        penalised, start, np.full(n, 0.1), lower, upper, max_evaluations=max_evaluations
    )
    params = params_from_vector(found.x, free, scale_s)
    num = num_start_evaluations + found.num_evaluations
    limits = at_search_limit(free, found.x, lower, upper)
    return _outcome(runs, targets, params, FitParameters(), num, limits)


def is_engine_cpu_fit(free: Sequence[str]) -> bool:
    """Whether ``free`` names engine-CPU parameters (else multipliers); mixing is refused."""
    if free and all(name in ENGINE_CPU_PARAMETERS for name in free):
        return True
    if free and all(name in PARAMETERS for name in free):
        return False
    raise ValueError(
        f"free parameters must be a non-empty subset of {PARAMETERS} or of {ENGINE_CPU_PARAMETERS}"
    )


def structural_problem(
    runs: Sequence[FitRun], free: Sequence[str]
) -> tuple[tuple[str, str], str] | None:
    """Which two of the ``free`` coefficients can never be told apart in these runs,
    whatever their latencies (the price takes only their sum), and why in one line; or
    None. ``sim.validation.identify`` checks what the runs' latencies themselves inform."""
    if "scheduler_per_seq_s" in free and "sampling_per_seq_s" in free:
        return ("sampling_per_seq_s", "scheduler_per_seq_s"), (
            "scheduler_per_seq_s and sampling_per_seq_s are not identified together: both "
            "multiply a step's sequences, so a run prices only their sum; fit "
            "sampling_per_seq_s with the scheduler's held at its measured value"
        )
    synchronous = all(run.engine_cpu is None or not run.engine_cpu.async_scheduling for run in runs)
    if synchronous and "per_step_s" in free and "non_overlapped_s" in free:
        return ("per_step_s", "non_overlapped_s"), (
            "per_step_s and non_overlapped_s are not identified together: every run is "
            "synchronous, where both are added to every step; fit one"
        )
    return None


def engine_cpu_start(runs: Sequence[FitRun]) -> EngineCpuFitValues:
    """Where an engine-CPU fit starts, and what it leaves fixed: the first run's CPU
    estimate (its vLLM version's, or its scenario's ``engine.cpu``; none on a whole-step
    base) and its scenario's way in."""
    first = runs[0]
    cpu = first.engine_cpu.config if first.engine_cpu is not None else ZERO_CPU
    return EngineCpuFitValues(cpu, first.scenario.frontend.way_in_s_per_request)


def fit_start(runs: Sequence[FitRun], free: Sequence[str]) -> EngineCpuFitValues:
    """``engine_cpu_start``, with the way in at 0 when it is free and the runs set none."""
    start = engine_cpu_start(runs)
    if WAY_IN in free:
        return EngineCpuFitValues(start.cpu, start.way_in_s_per_request or 0.0)
    return start


def start_vector(start: EngineCpuFitValues, free: Sequence[str]) -> FloatArray:
    """``start``'s ``free`` values in units of ``CPU_UNITS_S`` (the search's coordinates)."""
    fixed = {"way_in": start.way_in_s_per_request, **start.cpu.model_dump()}
    return np.array([fixed["way_in" if n == WAY_IN else n] / CPU_UNITS_S[n] for n in free])


def engine_cpu_values(
    x: FloatArray, free: Sequence[str], start: EngineCpuFitValues
) -> EngineCpuFitValues:
    """The candidate at search point ``x`` (units of ``CPU_UNITS_S``); the rest at ``start``."""
    values = {
        name: max(0.0, v) * CPU_UNITS_S[name] for name, v in zip(free, x.tolist(), strict=True)
    }
    way_in = values.pop(WAY_IN, start.way_in_s_per_request)
    return EngineCpuFitValues(start.cpu.model_copy(update=values), way_in)


def fit_engine_cpu(
    runs: Sequence[FitRun],
    targets: Sequence[Target],
    free: Sequence[str],
    max_evaluations: int = DEFAULT_MAX_EVALUATIONS,
) -> FitOutcome[EngineCpuFitValues]:
    """Minimise the objective over the ``free`` engine-CPU coefficients and the way in,
    the base's kernel prices kept as they are; the others stay at ``engine_cpu_start``.

    Refused (ValueError) where the runs cannot inform what is asked: CPU coefficients on
    a base that times whole steps, the way in on runs whose arrivals exclude it.
    """
    if not is_engine_cpu_fit(free):
        raise ValueError(f"free parameters must be a non-empty subset of {ENGINE_CPU_PARAMETERS}")
    for run in runs:
        if run.engine_cpu is None and any(name in CPU_PARAMETERS for name in free):
            raise ValueError(
                f"{run.name}: its cost ({run.base.label}) times whole steps, the engine's CPU "
                f"work included; fit only {WAY_IN} on it"
            )
        if WAY_IN in free and not run.arrivals_include_way_in:
            raise ValueError(
                f"{run.name}: its arrivals are the engine's queue times, after the way in; "
                f"{WAY_IN} cannot be fitted from it"
            )
    problem = structural_problem(runs, free)
    if problem is not None:
        raise ValueError(problem[1])
    start = fit_start(runs, free)
    x0 = start_vector(start, free)

    def penalised(x: FloatArray) -> float:
        prior = CPU_PRIOR_WEIGHT * float(np.sum((x - x0) ** 2))
        return objective_value(score(runs, targets, engine_cpu_values(x, free, start))) + prior

    lower, upper = [0.0] * len(free), [_MAX_CPU_UNITS] * len(free)
    found = nelder_mead(
        penalised, x0, np.ones(len(free)), lower, upper, max_evaluations=max_evaluations
    )
    params = engine_cpu_values(found.x, free, start)
    limits = at_search_limit(free, found.x, lower, upper)
    return _outcome(runs, targets, params, start, found.num_evaluations, limits)


def fit_free(
    runs: Sequence[FitRun],
    targets: Sequence[Target],
    free: Sequence[str],
    max_evaluations: int = DEFAULT_MAX_EVALUATIONS,
) -> FitOutcome[FitParameters] | FitOutcome[EngineCpuFitValues]:
    """``fit_engine_cpu`` or the multipliers' ``fit``, as ``free`` names their parameters."""
    if is_engine_cpu_fit(free):
        return fit_engine_cpu(runs, targets, free, max_evaluations)
    return fit(runs, targets, free, max_evaluations)


def base_of(runs: Sequence[FitRun], free: Sequence[str]) -> Adjustment:
    """What a fit's errors are compared with: the base alone, or its CPU estimate."""
    return engine_cpu_start(runs) if is_engine_cpu_fit(free) else FitParameters()


_NAMES = {"ttft_s": "TTFT", "tpot_s": "TPOT"}


def percent(log_error: float) -> float | None:
    """A log error as a signed percentage (None when undefined)."""
    return None if not math.isfinite(log_error) else round(100.0 * math.expm1(log_error), 2)


def params_json(params: Adjustment) -> dict[str, float | None]:
    """The parameters by name (an engine-CPU fit's way in None when not fitted)."""
    if isinstance(params, EngineCpuFitValues):
        return {**params.cpu.model_dump(), WAY_IN: params.way_in_s_per_request}
    return {name: float(value) for name, value in asdict(params).items()}  # PARAMETERS


def target_rows(
    runs: Sequence[FitRun],
    targets: Sequence[Target],
    fitted: Adjustment,
    base: Adjustment | None = None,
) -> list[dict[str, Any]]:
    """Per target and metric: base and fitted % errors at p50/p90/p99 (``base``: the
    multipliers' identity, unless given)."""
    base_errors = score(runs, targets, FitParameters() if base is None else base)
    fitted_errors = score(runs, targets, fitted)
    rows = []
    for target, old, new in zip(targets, base_errors, fitted_errors, strict=True):
        for metric in METRICS:
            rows.append(
                {
                    "run": runs[target.run].name,
                    "requests": target.label,
                    "metric": _NAMES[metric],
                    "base_err_pct": {s: percent(old[metric][s]) for s in QUANTILES},
                    "fitted_err_pct": {s: percent(new[metric][s]) for s in QUANTILES},
                }
            )
    return rows


def cross_validate(
    runs: Sequence[FitRun], free: Sequence[str], max_evaluations: int
) -> list[dict[str, Any]]:
    """Every fold (``phase_folds`` for engine CPU, else ``cv_folds``): its fitted
    parameters and the held-out rows."""
    out = []
    cpu = is_engine_cpu_fit(free)
    base = base_of(runs, free)
    for fold in phase_folds(runs) if cpu else cv_folds(runs):
        outcome = fit_free(runs, fold.train, free, max_evaluations)
        out.append(
            {
                "fold": fold.name,
                "parameters": params_json(outcome.params),
                "train_objective": outcome.value,
                "num_evaluations": outcome.num_evaluations,
                "held_out": target_rows(runs, fold.test, outcome.params, base),
            }
        )
    return out


def _cells(errors: dict[str, float | None]) -> str:
    return " / ".join("n/a" if e is None else f"{e:+.1f} %" for e in errors.values())


def render_rows(rows: Sequence[dict[str, Any]]) -> list[str]:
    """A markdown table: run, requests, metric, base and fitted errors."""
    header = "| run | requests | metric | base err p50 / p90 / p99 | fitted err p50 / p90 / p99 |"
    return [header, "|---|---|---|---|---|"] + [
        f"| {row['run']} | {row['requests']} | {row['metric']} | "
        f"{_cells(row['base_err_pct'])} | {_cells(row['fitted_err_pct'])} |"
        for row in rows
    ]


def _params_text(params: dict[str, Any]) -> str:
    if "per_step_s" in params:
        way_in = params.get(WAY_IN)
        text = ", ".join(f"{name} {params[name] * 1e6:.1f} us" for name in CPU_PARAMETERS)
        return text + ("" if way_in is None else f", way in {way_in * 1e3:.2f} ms/request")
    return (
        f"overhead {params['step_overhead_s'] * 1e3:.3f} ms/step, prefill "
        f"x{params['prefill_multiplier']:.3f}, decode x{params['decode_multiplier']:.3f}"
    )


def render(errors: dict[str, Any]) -> str:
    """Markdown: the held-out errors of every fold, then the final fit in sample."""
    lines: list[str] = []
    for fold in errors.get("cross_validation", []):
        lines += [f"Held out ({fold['fold']}; fitted {_params_text(fold['parameters'])}):", ""]
        lines += [*render_rows(fold["held_out"]), ""]
    final = errors["in_sample"]
    lines += [f"In sample (all runs; fitted {_params_text(final['parameters'])}):", ""]
    lines += [*render_rows(final["rows"]), ""]
    return "\n".join(lines)
