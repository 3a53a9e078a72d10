"""What measured runs tell of the engine's CPU coefficients: identification and intervals.

docs/validation.md ("Identification", "Intervals") gives the rules and how to read
them. ``jacobian`` takes the scored log errors' change per coefficient by finite
differences of one search unit (``CPU_UNITS_S``), central where the box allows,
forward at its bound at 0: ``2p`` replays of every run for ``p`` coefficients. What
no runs can tell apart (terms the price only sums) is
``sim.validation.fit.structural_problem``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from sim.config import FloatArray
from sim.cost.fitted_cpu import CoefficientInterval, EngineCpuFitValues
from sim.errors import ConfigError
from sim.validation.fit import (
    CPU_UNITS_S,
    DEFAULT_CPU_FREE,
    ENGINE_CPU_PARAMETERS,
    PARAMETERS,
    WAY_IN,
    FitRun,
    Target,
    engine_cpu_values,
    fit_start,
    flat_errors,
    score,
    start_vector,
    structural_problem,
)

# A column-scaled Jacobian whose singular values spread wider than this is taken as
# rank-deficient: the runs inform only a combination of the coefficients.
MIN_SINGULAR_RATIO = 1e-2
# A column this small (log error per search unit) moves no scored latency.
ZERO_COLUMN = 1e-9
# Search units per finite difference.
STEP_UNITS = 1.0
CONFIDENCE = 0.95
INTERVAL_METHOD = (
    "95 % Student-t interval from Gauss-Newton standard errors: the scored log-quantile "
    "errors' Jacobian by finite differences of one search unit at the fit, "
    "s2 = SSR / (m - p); low end kept at 0"
)


def residuals(
    runs: Sequence[FitRun], targets: Sequence[Target], values: EngineCpuFitValues
) -> FloatArray:
    """The log errors a fit scores, one per (target, metric, quantile)."""
    return flat_errors(score(runs, targets, values))


def jacobian(
    runs: Sequence[FitRun],
    targets: Sequence[Target],
    free: Sequence[str],
    start: EngineCpuFitValues,
    x: FloatArray,
) -> tuple[FloatArray, FloatArray]:
    """The residuals at search point ``x`` and their Jacobian (per search unit), ``m x p``."""
    at = residuals(runs, targets, engine_cpu_values(x, free, start))
    columns = []
    for j in range(len(free)):
        up = x.copy()
        up[j] += STEP_UNITS
        above = residuals(runs, targets, engine_cpu_values(up, free, start))
        if x[j] >= STEP_UNITS:
            down = x.copy()
            down[j] -= STEP_UNITS
            below = residuals(runs, targets, engine_cpu_values(down, free, start))
            columns.append((above - below) / (2.0 * STEP_UNITS))
        else:  # at the box's bound: forward
            columns.append((above - at) / STEP_UNITS)
    return at, np.column_stack(columns)


def _unit_text(name: str) -> str:
    unit = CPU_UNITS_S[name]
    return f"{unit * 1e3:g} ms" if unit >= 1e-3 else f"{unit * 1e6:g} us"


Problem = tuple[tuple[str, ...], str]  # the terms it names, and the line that says why


def jacobian_problems(free: Sequence[str], jac: FloatArray) -> list[Problem]:
    """The module's identification rule on one Jacobian: one line per problem."""
    if not np.all(np.isfinite(jac)):
        why = "the replays completed no request at some quantile: nothing is identified"
        return [(tuple(free), why)]
    norms = np.linalg.norm(jac, axis=0)
    problems: list[Problem] = []
    for name, norm in zip(free, norms, strict=True):
        if norm < ZERO_COLUMN:
            why = (
                "the CPU work hides behind the GPU step in every step of these runs"
                if name != WAY_IN
                else "no scored request waits on it"
            )
            problems.append(
                (
                    (name,),
                    f"{name} is not identified: {_unit_text(name)} more or less moves no "
                    f"scored latency ({why})",
                )
            )
    live = [j for j, norm in enumerate(norms) if norm >= ZERO_COLUMN]
    if len(live) >= 2:
        scaled = jac[:, live] / norms[live]
        _, singular, vt = np.linalg.svd(scaled, full_matrices=False)
        if singular[-1] < MIN_SINGULAR_RATIO * singular[0]:
            weights = np.abs(vt[-1])
            names = [free[live[k]] for k in np.argsort(-weights) if weights[k] > 0.3]
            problems.append(
                (
                    tuple(names),
                    f"{' and '.join(names)} are not identified apart: they move the scored "
                    f"latencies alike (singular value ratio {singular[-1] / singular[0]:.1e}),"
                    " the runs inform only their combination; fit one",
                )
            )
    return problems


def identification_problems(
    runs: Sequence[FitRun], targets: Sequence[Target], free: Sequence[str]
) -> list[Problem]:
    """Why the ``free`` coefficients are not identified by these runs at the fit's start
    (the structural rule first; then the module's, ``2p`` replays per run); empty when
    they are."""
    problem = structural_problem(runs, free)
    if problem is not None:
        return [(problem[0], problem[1])]
    start = fit_start(runs, free)
    _, jac = jacobian(runs, targets, free, start, start_vector(start, free))
    return jacobian_problems(free, jac)


def gauss_newton_errors(at: FloatArray, jac: FloatArray) -> list[float | None]:
    """The standard errors (in the Jacobian's units) of a least-squares fit with residuals
    ``at`` and Jacobian ``jac`` there: ``sqrt(diag(s2 * inv(J'J)))``, ``s2 = SSR / (m - p)``;
    None each where they are not defined (``m <= p``, a singular ``J'J``, a non-finite
    value). For residuals linear in the parameters these are OLS's standard errors."""
    m, p = jac.shape
    dof = m - p
    if dof <= 0 or not (np.all(np.isfinite(jac)) and np.all(np.isfinite(at))):
        return [None] * p
    gram = jac.T @ jac
    if np.linalg.matrix_rank(gram) < p:
        return [None] * p
    s2 = float(at @ at) / dof
    diagonal = np.diag(np.linalg.inv(gram)) * s2
    return [math.sqrt(v) if v >= 0 else None for v in diagonal.tolist()]


def intervals(
    runs: Sequence[FitRun],
    targets: Sequence[Target],
    free: Sequence[str],
    fitted: EngineCpuFitValues,
) -> list[CoefficientInterval]:
    """Each free coefficient's value at the fit with its standard error and interval (the
    module's Gauss-Newton rule); an error of None where the Jacobian there is singular."""
    from scipy.stats import t as student_t  # only when a fit reports

    start = fit_start(runs, free)
    x = start_vector(fitted, free)
    at, jac = jacobian(runs, targets, free, start, x)
    dof = jac.shape[0] - jac.shape[1]
    errors = gauss_newton_errors(at, jac)
    quantile = float(student_t.ppf(0.5 + CONFIDENCE / 2.0, dof)) if dof > 0 else math.inf
    out = []
    for name, value, error_units in zip(free, x.tolist(), errors, strict=True):
        value_s = value * CPU_UNITS_S[name]
        error = None if error_units is None else error_units * CPU_UNITS_S[name]
        out.append(
            CoefficientInterval(
                name=name,
                value_s=value_s,
                std_error_s=error,
                low_s=None if error is None else max(0.0, value_s - quantile * error),
                high_s=None if error is None else value_s + quantile * error,
                degrees_of_freedom=dof,
            )
        )
    return out


def identified(free: Sequence[str], problems: Sequence[Problem]) -> tuple[str, ...]:
    """``free`` less what ``problems`` name: a term that moves nothing, and all but the
    first named of terms the runs cannot tell apart (the structural rule names the one
    to keep first: the fitted rest before the measured scheduler)."""
    dropped: set[str] = set()
    for names, _ in problems:
        if len(names) == 1:
            dropped.add(names[0])
        else:
            dropped.update(names[1:])
    return tuple(name for name in free if name not in dropped)


def free_parameters(
    fit_kind: str, free_given: str | None, runs: Sequence[FitRun]
) -> tuple[str, ...]:
    """``--free`` (``free_given``), or the mode's default for these runs; ConfigError when
    it mixes modes. An engine-CPU set is then checked for what the runs identify
    (``identified_free``)."""
    choices = ENGINE_CPU_PARAMETERS if fit_kind == "engine-cpu" else PARAMETERS
    if free_given is not None:
        free = tuple(name.strip() for name in free_given.split(",") if name.strip())
        if not free or any(name not in choices for name in free):
            raise ConfigError(
                f"--free {free_given!r} with --fit-kind {fit_kind}: "
                f"choose from {', '.join(choices)}"
            )
        return free
    if fit_kind == "multipliers":
        return PARAMETERS
    way_in = (WAY_IN,) if all(run.arrivals_include_way_in for run in runs) else ()
    if all(run.engine_cpu is None for run in runs):
        if not way_in:
            raise ConfigError(
                f"--fit-kind engine-cpu: {runs[0].base.label} times whole steps (no engine CPU "
                "to fit) and the runs' arrivals are the engine's queue times (no way in)"
            )
        return way_in
    return (*DEFAULT_CPU_FREE, *way_in)


def identified_free(
    runs: Sequence[FitRun],
    free: tuple[str, ...],
    free_given: str | None,
    note: Callable[[str], None],
) -> tuple[str, ...]:
    """The engine-CPU ``free`` set the runs identify: a set given with ``--free``
    (``free_given``) must be, else ConfigError naming the term and why; the default set
    loses what is not, each said to ``note`` in one line. Every refusal reads
    ``--from-run: ...`` (a ConfigError is a ValueError, as a fit of none raises)."""
    everything = [Target(i) for i in range(len(runs))]
    try:
        problems = identification_problems(runs, everything, free)
        if not problems:
            return free
        if free_given is not None:
            raise ConfigError(f"--free {free_given}: {problems[0][1]}")
        kept = identified(free, problems)
        for _, why in problems:
            note(f"not fitted: {why}")
        if not kept:
            raise ConfigError("--fit-kind engine-cpu: the runs identify none of " + ", ".join(free))
    except ValueError as error:
        raise ConfigError(f"--from-run: {error}") from None
    return kept


def coefficient_table(
    rows: Sequence[CoefficientInterval], held: dict[str, float], held_source: str
) -> list[str]:
    """Markdown: every CPU coefficient, fitted with its interval, or held with its source."""
    lines = [
        "| coefficient | value | std error | 95 % interval | source |",
        "|---|---|---|---|---|",
    ]
    for row in rows:
        error = "n/a" if row.std_error_s is None else f"{row.std_error_s * 1e6:.2f} us"
        span = (
            "n/a"
            if row.low_s is None or row.high_s is None
            else f"{row.low_s * 1e6:.2f} .. {row.high_s * 1e6:.2f} us"
        )
        lines.append(
            f"| {row.name} | {row.value_s * 1e6:.2f} us | {error} | {span} | "
            f"fitted ({row.degrees_of_freedom} degrees of freedom) |"
        )
    for name, value in held.items():
        lines.append(f"| {name} | {value * 1e6:.2f} us | — | — | held: {held_source} |")
    return lines
