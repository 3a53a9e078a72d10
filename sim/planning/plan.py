"""The configuration search: the cheapest deployment that meets the SLOs at a target rate.

A ``Candidate`` is one deployment unit: a GPU, a tensor-parallel degree, batch limits
and, optionally, a disaggregated ``P:D`` unit. Its capacity search
(:mod:`sim.planning.capacity`) sizes a fleet of ``ceil(R / capacity)`` units, priced per
GPU-hour; ``PlanResult.ranked`` orders the fleets. docs/capacity.md ("How it avoids
brute force") tells how the search is kept small: refusals before any run
(``_prepare``), an optimistic bound per candidate (:mod:`sim.planning.plan_bound`),
best first with branch and bound (``_run``, ``_cannot_beat``), batch limits coarse then
refined (``representatives``, ``_defer_far_groups``, ``refined_candidates``) and runs
sized for what decided (``run_length``, ``_search_candidate``). The answer leaves out
the network, the balancer's imbalance, autoscaling and failures.
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from pydantic import ValidationError

from sim.api.build import cost_model_for, kv_blocks_for
from sim.cost.base import CostModel
from sim.cost.config import auto_choice
from sim.cost.label import cost_model_tag
from sim.cost.model_error import ModelError, model_error_for
from sim.errors import ConfigError, format_error
from sim.hardware.specs import HARDWARE_PRESETS, HardwareSpec, hardware_preset
from sim.metrics.slo_targets import SloTarget, per_request_slo, targets_from_mapping
from sim.planning.capacity import (
    SERVED,
    CapacitySearch,
    LoadPoint,
    Searcher,
    check_target_rate,
    require_targets,
    search,
    served_num_requests_needed,
    tail_requests,
)
from sim.planning.capacity_report import (
    fleet_for,
    has_interval,
    output_tokens_per_request,
    units_for,
)
from sim.planning.plan_bound import (
    QUANTILES,
    LengthStats,
    Limits,
    bound_holds,
    length_stats,
    optimistic_rate_per_s,
)
from sim.planning.plan_file import PlanConfig
from sim.planning.pricing import gpu_price_per_hour
from sim.planning.sweep_exec import Record, Task, default_jobs, execute, task_for
from sim.scenario import Scenario, scenario_from_dict

REFINE_MARGIN = 0.25
"""A group is refined when its best fleet costs at most this much above the cheapest."""
MIN_PLAN_REQUESTS = 200
"""Requests per run at least, whatever the SLOs' percentiles need (the served check)."""
MAX_SEARCHES = 3
"""Capacity searches of one candidate at most: its first, then on longer runs."""
RESIZE_HEADROOM = 1.25
"""Longer runs get this much more than the served check needed where it failed: the
next search's failing load is higher, with more requests in the system (Little)."""
RESIZE_ROUND = 100
"""Resized run lengths are multiples of this (requests)."""
NOT_SERVING_GPUS = frozenset({"cpu-2core"})
"""Presets left out of the default GPU list: the calibration machine serves no fleet."""


@dataclass(frozen=True)
class Candidate:
    """One deployment unit to search (module docstring)."""

    gpu: str
    tensor_parallel_size: int
    max_num_seqs: int
    max_num_batched_tokens: int
    chunked_prefill: bool
    split: tuple[int, int] | None = None  # (prefill, decode) replicas; None: aggregated

    @property
    def group(self) -> tuple[str, int, tuple[int, int] | None]:
        """The (GPU, TP, split) group whose batch limits are refined together."""
        return self.gpu, self.tensor_parallel_size, self.split

    @property
    def scheduler_fields(self) -> dict[str, Any]:
        """The batch limits it sets in a scenario's ``scheduler``."""
        return {
            "max_num_seqs": self.max_num_seqs,
            "max_num_batched_tokens": self.max_num_batched_tokens,
            "chunked_prefill": self.chunked_prefill,
        }

    def parallelism(self, given: dict[str, Any] | None) -> dict[str, Any]:
        """A scenario's ``parallelism`` at its TP degree (``link`` dropped: the GPU's own)."""
        kept = {k: v for k, v in (given or {}).items() if k != "link"}
        return {**kept, "tensor_parallel_size": self.tensor_parallel_size}

    @property
    def label(self) -> str:
        """Short name, e.g. ``h100 tp1 seqs=256 tokens=2048 chunked``."""
        split = "" if self.split is None else f" P:D={self.split[0]}:{self.split[1]}"
        chunk = "chunked" if self.chunked_prefill else "unchunked"
        return (
            f"{self.gpu} tp{self.tensor_parallel_size}{split} seqs={self.max_num_seqs} "
            f"tokens={self.max_num_batched_tokens} {chunk}"
        )


@dataclass
class Outcome:
    """What happened to one candidate: searched (``record``), skipped or refused (``reason``)."""

    candidate: Candidate
    # Final: searched, skipped (pruned, infeasible by its bound, or stopped where it
    # already lost) or refused (does not split or fit); pending and running meanwhile.
    status: Literal["pending", "running", "searched", "skipped", "refused"]
    reason: str = ""
    cost_model: str = ""  # its cost model's label as every face words it (cost_model_tag)
    cost_model_detail: str = ""  # auto's whole choice line: which tables, or why none
    model_error: ModelError | None = None  # the cost source's validated error (None: not built)
    # The rate its fleet is sized for: the target plus the headroom (the plan's
    # --headroom, else this configuration's own model error; None: not priced).
    sized_rate_per_s: float | None = None
    price_per_gpu_hour: float | None = None
    bound_rate_per_s: float | None = None
    bound_usd_per_hour: float | None = None
    record: Record | None = None
    scenario_doc: dict[str, Any] | None = None  # one unit's scenario, as searched
    # GPUs one unit occupies (its scenario's ``num_gpus``); None: its scenario is refused.
    num_gpus: int | None = None

    @property
    def usd_per_hour(self) -> float | None:
        """The fleet's cost for the target rate (None: no capacity found)."""
        return None if self.record is None else self.record.get("usd_per_hour")


@dataclass
class PlanResult:
    """Every candidate's outcome, the search's counts and its wall time."""

    target_rate_per_s: float
    targets: tuple[SloTarget, ...]
    outcomes: list[Outcome] = field(default_factory=list)
    num_requests: int = 0
    seeds: int = 0
    wall_s: float = 0.0
    workers: int = 1
    executor: str = "local"  # or "ray" (sim.planning.sweep_exec)
    # --headroom in percent; None: each configuration sized for its own model error.
    headroom_pct: float | None = 0.0
    warnings: list[str] = field(default_factory=list)  # distinct: the bounds', the searches'

    @property
    def searched(self) -> list[Outcome]:
        """Candidates whose capacity was searched."""
        return [o for o in self.outcomes if o.status == "searched"]

    @property
    def num_simulations(self) -> int:
        """Simulations run in all."""
        return sum(int((o.record or {}).get("num_simulations", 0)) for o in self.outcomes)

    @property
    def max_requests_per_run(self) -> int:
        """The longest runs any search used (``num_requests``, or longer where the served
        check needed them: ``_search_candidate``)."""
        sizes = [int((o.record or {}).get("requests_per_run", 0)) for o in self.outcomes]
        return max([self.num_requests, *sizes])

    def ranked(self) -> list[Outcome]:
        """Searched candidates with a fleet, cheapest first (then most capacity per GPU)."""
        feasible = [o for o in self.searched if o.usd_per_hour is not None]

        def key(o: Outcome) -> tuple[float, float]:
            record = o.record or {}
            return (float(record["usd_per_hour"]), -float(record["capacity_per_gpu"]))

        return sorted(feasible, key=key)

    @property
    def best(self) -> Outcome | None:
        """The cheapest fleet meeting the SLOs, if any."""
        ranked = self.ranked()
        return ranked[0] if ranked else None


def run_length(targets: Sequence[SloTarget]) -> int:
    """Requests per run: enough for ``MIN_TAIL_SAMPLES`` beyond every percentile target."""
    needed = [tail_requests(QUANTILES[t.stat]) for t in targets if t.stat in QUANTILES]
    return max([MIN_PLAN_REQUESTS, *needed])


def resolve_gpus(config: PlanConfig) -> list[HardwareSpec]:
    """The plan's GPUs: named presets and inline specs; by default every serving preset,
    one per distinct spec (``h100-sxm`` is ``h100`` under another name)."""
    if config.gpus is None:
        seen: set[tuple[Any, ...]] = set()
        out = []
        for spec in HARDWARE_PRESETS.values():
            if spec.name in NOT_SERVING_GPUS:
                continue
            shape = tuple(v for k, v in spec.model_dump().items() if k != "name")
            if shape not in seen:
                seen.add(shape)
                out.append(spec)
        return out
    out = []
    for index, entry in enumerate(config.gpus):
        if isinstance(entry, str):
            try:
                out.append(hardware_preset(entry))
            except ConfigError as error:
                raise ConfigError(f"plan: gpus[{index}]: {error}") from None
        else:
            doc = entry
            if "preset" in entry:
                base = hardware_preset(str(entry["preset"])).model_dump()
                doc = {**base, **{k: v for k, v in entry.items() if k != "preset"}}
            try:
                out.append(HardwareSpec.model_validate(doc))
            except ValidationError as error:
                raise ConfigError(format_error("plan", error, doc, f"gpus[{index}]")) from None
    names = [g.name for g in out]
    if len(set(names)) != len(names):
        raise ConfigError(f"plan: gpus: a GPU is listed twice ({', '.join(names)})")
    return out


@dataclass
class _Space:
    """What every candidate of one plan shares."""

    base_doc: dict[str, Any]
    base: Scenario  # base_doc validated: its folder (base_dir) is every candidate's
    config: PlanConfig
    targets: tuple[SloTarget, ...]
    target_rate_per_s: float
    prices: dict[str, float]
    hardware: dict[str, HardwareSpec]
    lengths: LengthStats
    num_requests: int
    headroom: float | None = 0.0  # plan()'s headroom_pct as a fraction
    costs: dict[tuple[str, int], tuple[CostModel, str, str]] = field(default_factory=dict)
    warnings: dict[str, None] = field(default_factory=dict)  # distinct, in order met

    def doc_for(self, candidate: Candidate, rate_per_s: float | None = None) -> dict[str, Any]:
        """The candidate's scenario document (one unit; the load at ``rate_per_s``)."""
        doc = {k: v for k, v in self.base_doc.items() if k != "cluster"}
        spec = self.hardware[candidate.gpu]
        preset = HARDWARE_PRESETS.get(spec.name)
        doc["hardware"] = spec.name if preset == spec else spec.model_dump(mode="json")
        doc["parallelism"] = candidate.parallelism(doc.get("parallelism"))
        doc["scheduler"] = {**doc["scheduler"], **candidate.scheduler_fields}
        if self.roofline and doc["cost"].get("kind") != "roofline":
            doc["cost"] = {"kind": "roofline"}  # the scenario's own roofline block is kept
        if candidate.split is not None:
            split = self.config.disaggregation
            assert split is not None
            doc["cluster"] = {
                "num_replicas": candidate.split[0] + candidate.split[1],
                "disaggregation": {
                    "num_prefill_replicas": candidate.split[0],
                    "num_decode_replicas": candidate.split[1],
                    "kv_transfer_bandwidth_bytes_per_s": split.kv_transfer_bandwidth_bytes_per_s,
                    "kv_transfer_latency_s": split.kv_transfer_latency_s,
                },
            }
        if rate_per_s is not None:
            doc["workload"] = {
                **doc["workload"],
                "arrival": {**doc["workload"]["arrival"], "rate_per_s": rate_per_s},
            }
        return doc

    @property
    def roofline(self) -> bool:
        """Every GPU on the roofline: the plan file says so, or the scenario does."""
        return self.config.cost_model == "roofline" or self.base_doc["cost"]["kind"] == "roofline"

    def scenario(self, candidate: Candidate) -> Scenario:
        """The candidate's validated scenario (ConfigError naming the candidate)."""
        return scenario_from_dict(
            self.doc_for(candidate), f"plan: {candidate.label}", self.base.base_dir
        )

    def cost(self, candidate: Candidate, scenario: Scenario) -> tuple[CostModel, str, str]:
        """The candidate's cost model, its label as every face words it
        (``cost_model_tag``: measured or a guess) and auto's choice line (why that
        source), built once per (GPU, TP); the warnings building it gives (extrapolated
        tables) are kept once."""
        key = (candidate.gpu, candidate.tensor_parallel_size)
        if key not in self.costs:
            forced = self.roofline
            layout = scenario.parallelism if scenario.parallelism.num_gpus > 1 else None
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                choice = (
                    "roofline" if forced else auto_choice(scenario.model, scenario.hardware, layout)
                )
                model = cost_model_for(scenario)
            self.warnings.update(dict.fromkeys(str(w.message) for w in caught))
            self.costs[key] = (model, cost_model_tag(model.label), choice)
        return self.costs[key]


def _nice(value: float) -> float:
    """``value`` to two significant digits: start loads read as numbers a person would pick."""
    if not value > 0 or not math.isfinite(value):
        return 1.0
    digits = 1 - math.floor(math.log10(value))
    return round(value, digits)


def fleet_usd_per_hour(
    rate_per_s: float, target_rate_per_s: float, gpus: int, price: float
) -> float:
    """Dollars per hour of ``ceil(target / rate)`` units of ``gpus`` GPUs."""
    if not rate_per_s > 0:
        return math.inf
    return units_for(target_rate_per_s, rate_per_s) * gpus * price


def search_candidate(task: Task) -> Record:
    """One candidate's capacity search, its fleet and the SLO statistics at the target
    load (``target / units`` per unit): the executors' point function for ``plan``."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        record = _search_candidate(task)
    # One copy of each: a cost model warns once per run, and a search runs dozens.
    record["warnings"] = list(dict.fromkeys(str(w.message) for w in caught))
    return record


class _CannotBeat(Exception):
    """Raised from a search's callback: the candidate failed where its fleet already loses."""

    def __init__(self, load: float) -> None:
        super().__init__(load)
        self.load = load


def _served_too_noisy(point: LoadPoint, num_requests: int) -> int | None:
    """Requests per run the served check needs at ``point`` when it decided the load
    (binding) on runs of ``num_requests`` too short to tell overload from noise; else None."""
    if point.binding != SERVED:
        return None
    needed = served_num_requests_needed(point)
    return needed if needed is not None and needed > num_requests else None


def _search_candidate(task: Task) -> Record:
    started = time.perf_counter()
    doc = task["scenario"]
    targets = targets_from_mapping(task["slo"], "plan")
    stop_below = task.get("stop_below_rate_per_s")
    sizes: list[int] = []  # requests per run of each search, the last one answering

    def on_point(point: LoadPoint, _: CapacitySearch) -> None:
        # A confident fail at load x puts the capacity below x (statistics grow with
        # load); at or under stop_below the fleet would cost at least the cheapest's.
        # A served check too noisy at this run length is no fail: runs get longer.
        lost = stop_below is not None and point.status == "fail" and point.load <= stop_below
        if lost and _served_too_noisy(point, sizes[-1]) is None:
            raise _CannotBeat(point.load)

    num_sims = 0
    while True:
        sizes.append(int(doc["workload"]["num_requests"]))
        scenario = scenario_from_dict(doc, task["label"], Path(task["base_dir"]))
        searcher = Searcher(
            scenario,
            targets,
            task["seeds"],
            jobs=1,
            on_point=on_point,
            bound_rate_per_s=task.get("bound_rate_per_s"),  # a capacity above it is refused
        )
        try:
            result = search(searcher, task["rel_width"], task["max_sims"])
        except _CannotBeat as stop:
            return {
                "abandoned_at_rate_per_s": stop.load,
                "num_loads": len(searcher.result.points),
                "num_simulations": num_sims + searcher.result.num_sims,
                "requests_per_run": sizes[-1],
                "wall_s": time.perf_counter() - started,
            }
        # Size the runs for the statistic that decided: where the served check bound
        # the answer on runs too short to measure it, search again on longer runs,
        # starting where this search ended (an unclear load is simulated more, never
        # taken for a fail).
        failed = next((p for p in result.points if p.load == result.cell[1]), None)
        needed = None if failed is None else _served_too_noisy(failed, sizes[-1])
        if needed is None or len(sizes) >= MAX_SEARCHES:
            break
        num_sims += result.num_sims
        num_requests = RESIZE_ROUND * math.ceil(RESIZE_HEADROOM * needed / RESIZE_ROUND)
        rate = result.estimate or doc["workload"]["arrival"]["rate_per_s"]
        doc = {
            **doc,
            "workload": {
                **doc["workload"],
                "num_requests": num_requests,
                "arrival": {**doc["workload"]["arrival"], "rate_per_s": _nice(rate)},
            },
        }
    target_rate_per_s = task["target_rate_per_s"]
    fleet = fleet_for(
        result, target_rate_per_s, task["num_gpus"], task["price"], task["sized_rate_per_s"]
    )
    low, high = result.interval
    record: Record = {
        "capacity_rate_per_s": result.estimate,
        "ci95_lower": low if has_interval(result) else None,
        "ci95_upper": high if has_interval(result) else None,
        "bracket_lower": low,
        "bracket_upper": high,
        # The search's budget is the plan file's max_loads (x seeds), not a flag.
        "stop_reason": result.stop_reason.replace(
            f"--max-sims {task['max_sims']}",
            f"max_loads x seeds ({task['max_sims']} simulations)",
        ),
        "binding_constraint": result.binding,
        "caveats": list(result.caveats),
        "cost_model_run": next(
            (r.get("cost_model") for p in result.points for r in p.records), None
        ),
        "num_loads": len(result.points),
    }
    if fleet is not None and fleet.usd_per_hour is not None:
        # The traffic each unit serves: the target's share (the headroom is spare).
        per_unit_rate = target_rate_per_s / fleet.num_replicas
        known = {p.load: p for p in result.points}
        point = known.get(per_unit_rate) or searcher.evaluate(per_unit_rate)
        tokens = output_tokens_per_request(result.at_estimate)
        record |= {
            "num_units": fleet.num_replicas,
            "num_units_at_lower_bound": fleet.num_replicas_at_lower_bound,
            "num_gpus_total": fleet.num_gpus,
            "usd_per_hour": fleet.usd_per_hour,
            "usd_per_million_output_tokens": fleet.usd_per_million_output_tokens,
            "capacity_per_gpu": fleet.capacity_rate_per_s / task["num_gpus"],
            "output_tokens_per_request": tokens,
            "per_unit_rate_per_s": per_unit_rate,
            "at_target_status": point.status,
            # Means within every limit (and served): the SLOs hold on average there.
            "at_target_within_slos": point.ratio <= 1.0,
            "at_target_mean": dict(point.means),
            "at_target_ci95_half_width": dict(point.half_widths),
            "at_target_served_ratio": point.served[0] if point.served is not None else None,
            "at_target_served_ci95_half_width": (
                point.served[1] if point.served is not None else None
            ),
        }
    record["num_simulations"] = num_sims + result.num_sims
    record["requests_per_run"] = sizes[-1]
    record["requests_per_run_searched"] = sizes
    record["wall_s"] = time.perf_counter() - started
    return record


def _task(space: _Space, outcome: Outcome) -> Task:
    """A pending candidate's search, as ``search_candidate`` reads it."""
    candidate = outcome.candidate
    # It starts at half its optimistic bound: its answer is the same whatever ran
    # before it (or on how many workers).
    start_rate_per_s = _nice(0.5 * (outcome.bound_rate_per_s or 0.0))
    return {
        **task_for(space.doc_for(candidate, start_rate_per_s), space.base),
        "label": f"plan: {candidate.label}",
        "slo": {t.name: t.limit_ms for t in space.targets},
        "seeds": space.config.seeds,
        "rel_width": space.config.rel_width,
        "max_sims": space.config.max_loads * space.config.seeds,
        "target_rate_per_s": space.target_rate_per_s,
        "sized_rate_per_s": outcome.sized_rate_per_s or space.target_rate_per_s,
        "num_gpus": outcome.num_gpus,
        "price": outcome.price_per_gpu_hour or 0.0,
        "bound_rate_per_s": outcome.bound_rate_per_s,
    }


def coarse_candidates(space: _Space) -> list[Candidate]:
    """The coarse grid over every GPU, TP, batch limits and split."""
    config = space.config
    splits: list[tuple[int, int] | None] = [None]
    if config.disaggregation is not None:
        splits += list(config.disaggregation.pairs())
    max_len = int(space.base_doc.get("engine", {}).get("max_model_len_tokens") or 0)
    out = []
    for gpu in space.hardware:
        for tp in config.tensor_parallel_sizes:
            for split in splits:
                for chunked in config.chunked_prefill:
                    for seqs in config.max_num_seqs:
                        for tokens in config.max_num_batched_tokens:
                            if tokens < seqs or (not chunked and tokens < max_len):
                                continue  # vLLM refuses these limits (Scenario._check)
                            out.append(Candidate(gpu, tp, seqs, tokens, chunked, split))
    why = (
        "max_num_batched_tokens must be at least max_num_seqs, and at least "
        f"max_model_len_tokens {max_len} without chunked prefill"
    )
    if not out:
        raise ConfigError(
            f"plan: max_num_seqs {config.max_num_seqs}, max_num_batched_tokens "
            f"{config.max_num_batched_tokens}, chunked_prefill {config.chunked_prefill}: no "
            f"combination vLLM accepts ({why})"
        )
    for name in ("max_num_seqs", "max_num_batched_tokens", "chunked_prefill"):
        # A level in no combination is searched nowhere: said, not dropped in silence.
        left = [v for v in getattr(config, name) if v not in {getattr(c, name) for c in out}]
        if left:
            levels = ", ".join(str(v) for v in left)
            space.warnings[f"plan: {name} {levels}: in no combination vLLM accepts ({why})"] = None
    return out


def _halfway(levels: Sequence[int], value: int) -> list[int]:
    """Geometric halfway values between ``value`` and its neighbours among ``levels``
    (below the lowest: half of it; above the highest: twice it)."""
    ordered = sorted(set(levels))
    index = ordered.index(value)
    below = ordered[index - 1] if index > 0 else value // 2
    above = ordered[index + 1] if index + 1 < len(ordered) else value * 2
    out = {round(math.sqrt(value * below)), round(math.sqrt(value * above))}
    return sorted(v for v in out if v >= 1 and v not in ordered)


def refined_candidates(space: _Space, result: PlanResult) -> list[Candidate]:
    """Halfway batch limits around the best of each group near the cheapest (docstring)."""
    best = result.best
    if best is None or best.usd_per_hour is None:
        return []
    groups: dict[Any, Outcome] = {}
    for outcome in result.ranked():
        groups.setdefault(outcome.candidate.group, outcome)
    tried = {o.candidate for o in result.outcomes}
    out: list[Candidate] = []
    for outcome in groups.values():
        assert outcome.usd_per_hour is not None
        if outcome.usd_per_hour > (1 + REFINE_MARGIN) * best.usd_per_hour:
            continue
        c, levels = outcome.candidate, space.config
        options = [
            replace(c, max_num_seqs=s) for s in _halfway(levels.max_num_seqs, c.max_num_seqs)
        ]
        tokens = _halfway(levels.max_num_batched_tokens, c.max_num_batched_tokens)
        options += [replace(c, max_num_batched_tokens=t) for t in tokens]
        for option in options:
            if option in tried or option.max_num_batched_tokens < option.max_num_seqs:
                continue
            tried.add(option)
            out.append(option)
    return out


def _prepare(space: _Space, candidate: Candidate) -> Outcome:
    """Refusal or the candidate's bound. Validating its scenario refuses heads that do not
    split (``layout_problem``); sizing its KV pool (``kv_blocks_for``) refuses weights that
    do not fit and a pool that holds no ``max_model_len`` request, as vLLM would."""
    price = space.prices[candidate.gpu]
    outcome = Outcome(candidate, "refused", price_per_gpu_hour=price)
    try:
        scenario = space.scenario(candidate)
    except ConfigError as error:
        outcome.reason = str(error).removeprefix(f"plan: {candidate.label}: ")
        return outcome
    outcome.num_gpus = scenario.num_gpus
    try:
        blocks = kv_blocks_for(scenario)
    except ConfigError as error:
        outcome.reason = str(error).removeprefix("model, hardware: ")
        return outcome
    kv_tokens = blocks * scenario.engine.block_size_tokens
    cost, label, choice = space.cost(candidate, scenario)
    limits = Limits(
        candidate.max_num_seqs,
        candidate.max_num_batched_tokens,
        candidate.chunked_prefill,
        candidate.split,
    )
    outcome.cost_model, outcome.cost_model_detail = label, choice
    outcome.model_error = model_error_for(cost)
    headroom = outcome.model_error.headroom if space.headroom is None else space.headroom
    outcome.sized_rate_per_s = space.target_rate_per_s * (1 + headroom)
    outcome.status = "pending"
    if not bound_holds(scenario):  # searched without a bound: none prunes or caps it
        return outcome
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        bound = optimistic_rate_per_s(cost, limits, kv_tokens, space.lengths, space.targets)
    space.warnings.update(dict.fromkeys(str(w.message) for w in caught))
    outcome.bound_rate_per_s = bound.rate_per_s
    outcome.bound_usd_per_hour = fleet_usd_per_hour(
        bound.rate_per_s, outcome.sized_rate_per_s, scenario.num_gpus, price
    )
    if bound.infeasible:
        outcome.status, outcome.reason = "skipped", f"infeasible at any load: {bound.infeasible}"
    return outcome


def _cannot_beat(outcome: Outcome, best: Outcome) -> str | None:
    """Why ``outcome`` cannot outrank ``best`` even at its optimistic bound (``ranked``:
    a cheaper fleet, or as cheap with more capacity per GPU), or None when it might."""
    bound_usd, bound_rate = outcome.bound_usd_per_hour, outcome.bound_rate_per_s or 0.0
    best_usd = best.usd_per_hour
    assert bound_usd is not None and best_usd is not None and outcome.num_gpus is not None
    beaten = (
        f"cannot beat ${best_usd:.2f}/h ({best.candidate.label}): even at its optimistic "
        f"bound of {bound_rate:.3g} req/s per unit the fleet costs ${bound_usd:.2f}/h"
    )
    if bound_usd > best_usd * (1 + 1e-9):
        return beaten
    # As cheap: the tie goes to more capacity per GPU, which the bound caps too.
    best_per_gpu = float((best.record or {})["capacity_per_gpu"])
    bound_per_gpu = bound_rate / outcome.num_gpus
    if bound_usd >= best_usd * (1 - 1e-9) and bound_per_gpu <= best_per_gpu:
        return (
            f"{beaten}, a tie, at most {bound_per_gpu:.3g} req/s per GPU to its {best_per_gpu:.3g}"
        )
    return None


def _run(
    space: _Space,
    outcomes: list[Outcome],
    result: PlanResult,
    workers: int | None,
    on_done: Callable[[Outcome, PlanResult], None] | None,
    executor: str = "local",
    address: str | None = None,
) -> None:
    """Search the pending outcomes best first, skipping what cannot beat the best.

    The local executor draws the next task only when one has finished, so every
    skip sees the best found so far; Ray takes all of a stage's tasks at once, so
    there a stage prunes only against the stages before it (sound either way: the
    same answer, with more configurations searched)."""
    pending = sorted(
        (o for o in outcomes if o.status == "pending"),
        key=lambda o: (o.bound_usd_per_hour or math.inf, -(o.bound_rate_per_s or 0.0)),
    )
    started: list[tuple[Outcome, Task]] = []

    def tasks() -> Iterator[Task]:
        for outcome in pending:
            best = result.best
            bound = outcome.bound_usd_per_hour
            if space.config.prune and best is not None and bound is not None:
                reason = _cannot_beat(outcome, best)
                if reason is not None:
                    outcome.status, outcome.reason = "skipped", reason
                    if on_done is not None:
                        on_done(outcome, result)
                    continue
            outcome.status = "running"
            task = _task(space, outcome)
            started.append((outcome, task))
            price, sized_rate_per_s = task["price"], task["sized_rate_per_s"]
            if space.config.prune and best is not None and best.usd_per_hour and price > 0:
                # Capacity at or below this: ceil(R / c) * gpus * price >= the best's.
                gpus = outcome.num_gpus
                task["stop_below_rate_per_s"] = sized_rate_per_s * gpus * price / best.usd_per_hour
            outcome.scenario_doc = task["scenario"]
            yield task

    jobs = workers if executor == "local" else None
    for index, record in execute(tasks(), executor, jobs, address, function=search_candidate):
        outcome, task = started[index]
        outcome.status, outcome.record = "searched", record
        abandoned = record.get("abandoned_at_rate_per_s")
        if abandoned is not None:
            outcome.status = "skipped"
            sized_rate_per_s, price = task["sized_rate_per_s"], task["price"]
            usd = fleet_usd_per_hour(abandoned, sized_rate_per_s, task["num_gpus"], price)
            outcome.reason = (
                f"cannot beat the cheapest: its SLOs fail (95% interval) at {abandoned:.3g} "
                f"req/s per unit, where its fleet would already cost ${usd:.2f}/h or more "
                f"(search stopped after {record['num_simulations']} simulations)"
            )
        elif record.get("usd_per_hour") is None:
            outcome.reason = f"no load meets the SLOs: {record.get('stop_reason')}"
        if on_done is not None:
            on_done(outcome, result)


def representatives(outcomes: Sequence[Outcome]) -> list[Outcome]:
    """One pending candidate per group: chunked prefill, the most sequences, the smallest
    step budget (small chunks keep TTFT and TPOT low: the limits most likely to meet
    latency SLOs), searched before the group's other limits."""

    def rank(o: Outcome) -> tuple[bool, int, int]:
        c = o.candidate
        return (not c.chunked_prefill, -c.max_num_seqs, c.max_num_batched_tokens)

    chosen: dict[Any, Outcome] = {}
    for outcome in sorted((o for o in outcomes if o.status == "pending"), key=rank):
        chosen.setdefault(outcome.candidate.group, outcome)
    return list(chosen.values())


def _defer_far_groups(
    rest: list[Outcome],
    result: PlanResult,
    on_done: Callable[[Outcome, PlanResult], None] | None,
) -> None:
    """Skip the other limits of groups whose representative's fleet costs more than
    ``1 + REFINE_MARGIN`` times the cheapest: a heuristic (batch limits move a
    fleet's cost by tens of percent, not by multiples), said in the reason."""
    best = result.best
    if best is None or best.usd_per_hour is None:
        return
    for outcome in rest:
        searched = [
            o
            for o in result.searched
            if o.candidate.group == outcome.candidate.group and o.usd_per_hour is not None
        ]
        if not searched:
            continue
        cheapest = min(searched, key=lambda o: float(o.usd_per_hour or math.inf))
        assert cheapest.usd_per_hour is not None
        if cheapest.usd_per_hour > (1 + REFINE_MARGIN) * best.usd_per_hour:
            outcome.status = "skipped"
            outcome.reason = (
                f"coarse-then-refined: its group's {cheapest.candidate.label} costs "
                f"${cheapest.usd_per_hour:.2f}/h, over {1 + REFINE_MARGIN:g} x the cheapest "
                f"${best.usd_per_hour:.2f}/h, so its other batch limits were not searched"
            )
            if on_done is not None:
                on_done(outcome, result)


def _announce(
    outcomes: list[Outcome],
    result: PlanResult,
    on_total: Callable[[int], None] | None,
    on_done: Callable[[Outcome, PlanResult], None] | None,
) -> None:
    """Tell the caller the new total, and the outcomes decided without a run."""
    if on_total is not None:
        on_total(len(result.outcomes))
    if on_done is not None:
        for outcome in outcomes:
            if outcome.status != "pending":
                on_done(outcome, result)


def check_asks(
    targets: Sequence[SloTarget], target_rate_per_s: float | None, headroom_pct: float | None
) -> None:
    """Refuse a plan asked for no SLO, no usable rate (``check_target_rate``), or a
    headroom that is not a percentage in [0, 1000); a face calls it before any work."""
    require_targets(targets)
    check_target_rate(target_rate_per_s)
    if headroom_pct is not None and not 0 <= headroom_pct < 1000:
        raise ConfigError(f"--headroom must be a percentage in [0, 1000), got {headroom_pct:g}")


def plan(
    scenario: Scenario,
    config: PlanConfig,
    targets: Sequence[SloTarget],
    target_rate_per_s: float,
    prices: Mapping[str, float] | None = None,
    workers: int | None = None,
    on_done: Callable[[Outcome, PlanResult], None] | None = None,
    on_total: Callable[[int], None] | None = None,
    executor: str = "local",
    address: str | None = None,
    headroom_pct: float | None = 0.0,
) -> PlanResult:
    """Search the plan's space (module docstring); ``on_done`` sees each outcome as it
    is decided, ``on_total`` the number of candidates once known (coarse, then refined).

    Each fleet is sized for ``target_rate_per_s`` plus ``headroom_pct`` percent; None
    sizes each configuration for its own cost source's validated model error
    (``sim.cost.model_error``: a GPU priced by kernel tables and one on the roofline
    carry different errors)."""
    started = time.perf_counter()
    check_asks(targets, target_rate_per_s, headroom_pct)
    if scenario.workload.kind != "synthetic":
        raise ConfigError(
            f"plan: workload.kind {scenario.workload.kind!r}: the planner scales a synthetic "
            "workload's arrival rate; use a synthetic workload (workload.kind: synthetic)"
        )
    if scenario.workload.max_concurrency is not None:
        raise ConfigError(
            f"plan: workload.max_concurrency {scenario.workload.max_concurrency}: the planner "
            "sizes a fleet for a target rate by scaling the arrival rate, but under a cap the "
            "load is the number of clients (servesim capacity searches over them); remove "
            "workload.max_concurrency"
        )
    if scenario.scheduler.kind != "continuous":
        raise ConfigError(
            f"plan: scheduler.kind {scenario.scheduler.kind!r}: the planner searches vLLM's "
            "continuous batching limits; use scheduler.kind: continuous"
        )
    if scenario.cluster is not None:
        raise ConfigError(
            "plan: the scenario has a cluster: block; the planner sizes the fleet and the "
            "prefill/decode split itself (plan file: disaggregation), so remove it"
        )
    link, own = scenario.parallelism.link.name, scenario.hardware.gpu_link
    if "link" in scenario.parallelism.model_fields_set and link != own:
        # Candidate.parallelism drops it: each GPU's collectives go over its own link.
        raise ConfigError(
            f"plan: parallelism.link {link}: the planner prices each GPU's tensor "
            "parallelism over that GPU's own link (gpu_link); remove parallelism.link, or "
            "list the GPUs in the plan file with their gpu_link"
        )
    if scenario.engine.num_kv_blocks is not None:
        # One deployment's logged pool: another GPU or TP degree holds another.
        raise ConfigError(
            f"plan: engine.num_kv_blocks {scenario.engine.num_kv_blocks} is one deployment's "
            "KV pool; the planner sizes each GPU's and TP degree's as vLLM's memory profile "
            "does, so remove engine.num_kv_blocks"
        )
    if scenario.parallelism.pipeline_parallel_size > 1:
        raise ConfigError(
            f"plan: parallelism.pipeline_parallel_size "
            f"{scenario.parallelism.pipeline_parallel_size}: the planner searches tensor "
            "parallelism (tensor_parallel_sizes in the plan file); remove pipeline parallelism"
        )
    if scenario.cost.kind not in ("auto", "roofline"):
        raise ConfigError(
            f"plan: cost.kind {scenario.cost.kind!r} prices one GPU; the planner prices each "
            "GPU with its own kernel tables or the roofline (cost.kind auto, the default), or "
            "every GPU on the roofline (cost.kind roofline, or cost_model: roofline in the "
            "plan file)"
        )
    hardware = {g.name: g for g in resolve_gpus(config)}
    given = {**config.gpu_price_per_hour, **(prices or {})}
    unknown = sorted(set(given) - set(hardware))
    if unknown:
        raise ConfigError(
            f"--gpu-price (or the plan file's gpu_price_per_hour): {', '.join(unknown)} is "
            "not among the plan's GPUs "
            f"({', '.join(hardware)})"
        )
    resolved: dict[str, float] = {}
    for name in hardware:
        price = gpu_price_per_hour(name, given)
        if price is None:
            raise ConfigError(
                f"plan: no price for GPU {name!r}: give one with --gpu-price {name}=USD "
                "(per GPU-hour) or gpu_price_per_hour in the plan file"
            )
        resolved[name] = price
    num_requests = config.num_requests or run_length(targets)
    check_target_rate(target_rate_per_s, num_requests)  # its runs at the target's share
    doc = scenario.model_dump(mode="json")
    doc["workload"] = {**doc["workload"], "num_requests": num_requests, "duration_s": None}
    slo = per_request_slo(targets)
    if slo is not None:
        doc["slo"] = slo.model_dump(exclude_none=True)
    sized = scenario_from_dict(doc, "plan", scenario.base_dir)
    space = _Space(
        doc,
        sized,
        config,
        tuple(targets),
        target_rate_per_s,
        resolved,
        hardware,
        length_stats(sized, config.seeds),
        num_requests,
        None if headroom_pct is None else headroom_pct / 100,
    )
    result = PlanResult(
        target_rate_per_s,
        tuple(targets),
        num_requests=num_requests,
        seeds=config.seeds,
        workers=workers or default_jobs(),
        executor=executor,
        headroom_pct=headroom_pct,
    )
    coarse = [_prepare(space, c) for c in coarse_candidates(space)]
    result.outcomes.extend(coarse)
    _announce(coarse, result, on_total, on_done)
    if all(o.status == "refused" for o in coarse):
        first = coarse[0]
        raise ConfigError(
            f"plan: {scenario.model.name} fits no configuration of the plan ({len(coarse)} "
            f"refused; e.g. {first.candidate.gpu} tp{first.candidate.tensor_parallel_size}: "
            f"{first.reason})"
        )
    # Stage 1: one representative per group; stage 2: the group's other coarse
    # limits where the representative came near the cheapest (module docstring).
    stage_one = representatives(coarse) if config.prune else coarse
    _run(space, stage_one, result, workers, on_done, executor, address)
    rest = [o for o in coarse if o.status == "pending"]
    _defer_far_groups(rest, result, on_done)
    _run(space, rest, result, workers, on_done, executor, address)
    if config.refine:
        refined = [_prepare(space, c) for c in refined_candidates(space, result)]
        if refined:
            result.outcomes.extend(refined)
            _announce(refined, result, on_total, on_done)
            _run(space, refined, result, workers, on_done, executor, address)
    searches = [w for o in result.outcomes for w in (o.record or {}).get("warnings", [])]
    result.warnings = list(dict.fromkeys([*space.warnings, *searches]))
    result.wall_s = time.perf_counter() - started
    return result
