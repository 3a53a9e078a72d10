"""Does a measured run belong to a scenario? Everything that differs, for ``validate`` to refuse.

``validate`` replays the measured requests with the scenario's engine and cost model,
so a run of another model or workload would be "predicted" without complaint (a
tiny-model CPU run against a Llama-3-8B / H100 scenario once reported +6.3 %). One
check for every run, measured here or imported, of what it records; docs/validation.md,
"A run must belong to the scenario", gives the rules. ``check_run`` raises one
one-line ConfigError listing every difference, and returns the caveats of what the run
could not say: a ``measure`` run's layout field that is ``UNKNOWN`` (a ``measure
--endpoint`` run not told it, a folder older than the record).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from sim.api import core_config_for, engine_settings, model_for
from sim.cost.kernels.config import KernelsCostConfig
from sim.errors import ConfigError
from sim.hardware.device_names import hardware_matches
from sim.hardware.model_names import same_model
from sim.hardware.quantization import DTYPE_BYTES, dtype_name
from sim.scenario import Scenario
from sim.workload.generate import ClosedLoopWorkload, generate_open_loop, shared_prefixes

_LENGTHS = (("prompt", "num_prompt_tokens"), ("output", "num_output_tokens"))


@dataclass(frozen=True)
class RunFacts:
    """What a measured run says about itself; ``None`` where it does not say."""

    requests: pd.DataFrame  # request_id, num_prompt_tokens, num_output_tokens per request
    model: str | None = None  # the model the run served, in its own spelling
    hardware: str | None = None  # a simulator hardware preset name (servesim measure)
    device_name: str | None = None  # the device in another tool's words
    engine_settings: Mapping[str, Any] | None = None  # servesim measure's engine settings
    num_failed_unlisted: int = 0  # failed requests that are not rows of ``requests``
    num_incomplete: int = 0  # requests cut off unfinished when a GuideLLM phase ended
    # Prompt tokens the server reported as prefix-cache hits in a run that declares no
    # shared prefix: hits the replay, with nothing shared, cannot have.
    num_cached_tokens: int = 0
    partial: bool = False  # stopped early: may hold fewer requests than the scenario
    in_scenario_order: bool = False  # request i is the scenario's request i (measure runs)

    @classmethod
    def from_summary(cls, requests: pd.DataFrame, summary: Mapping[str, Any]) -> RunFacts:
        """What a run records about itself, read one way for ``validate --measured`` and
        ``calibrate --from-run``: a ``measure`` folder's ``summary.json`` (``mode:
        measured``), an imported run's ``run.json`` (another tool's model, device and
        settings under ``engine``; a hand-written or an endpoint folder's at the top
        level) or the summary ``calibration.compare_measured.load_measured`` builds of one."""
        # servesim's own runs (measured, or simulated: a prediction replayed) name
        # the scenario's hardware preset; other tools' runs a device in their words,
        # and so does a measure --endpoint run, which cannot see the server's device
        # (only what validate --assume-device says of it).
        own = summary.get("mode") in ("measured", "simulated")
        engine = summary.get("engine")
        engine = engine if isinstance(engine, Mapping) else {}
        model = engine.get("model") or summary.get("model")
        hardware = str(summary["hardware"]) if own and summary.get("hardware") else None
        if summary.get("device") == "cpu":  # a CPU run: its device_name is the CPU model
            device = "cpu"
        elif summary.get("device") == "http":  # measure --endpoint: the server it asked
            device = None
        else:
            device = engine.get("device_name") or summary.get("device_name")
        device = device or summary.get("assumed_device")
        return cls(
            requests=requests,
            model=str(model) if isinstance(model, str) and model else None,
            hardware=hardware,
            device_name=None if hardware else (str(device) if device else None),
            engine_settings=measured_settings(summary),
            # A measure run lists its failed requests; an imported one counts them apart.
            num_failed_unlisted=0 if own else int(summary.get("num_failed") or 0),
            num_incomplete=int(summary.get("num_incomplete") or 0),
            num_cached_tokens=0
            if summary.get("shared_prefix")
            else int(summary.get("num_cached_tokens") or 0),
            partial=summary.get("status") not in (None, "complete"),
            in_scenario_order=own,
        )


# An imported run's engine settings (sim.validation formats' ``meta["engine"]``, in
# vLLM's names) as ``sim.api.engine_settings`` names them: the scheduler's two limits,
# then the scenario's ``engine`` fields of the same names (``fit_runs`` builds a
# replay scenario from them).
_IMPORTED_SETTINGS = (
    ("max_num_seqs", "max_num_seqs"),
    ("max_num_batched_tokens", "max_num_batched_tokens"),
    ("num_gpu_blocks", "num_kv_blocks"),
    ("block_size", "block_size_tokens"),
    ("max_model_len", "max_model_len_tokens"),
    ("enable_prefix_caching", "enable_prefix_caching"),
    ("async_scheduling", "async_scheduling"),
    ("vllm_version", "vllm_version"),  # its defaults and CPU estimate follow it
)


# An imported run's parallel layout (vLLM's engine arguments, same names) and the
# scenario field each must equal: a DP rank is a replica; vLLM's enable_expert_parallel
# spreads the experts over dp x tp GPUs, which the kernel cost's expert_parallel_size
# states (a cost without the field is not checked). fit_runs keeps them out of ``engine``.
LAYOUT_SETTINGS = {
    "tensor_parallel_size": "parallelism.tensor_parallel_size",
    "pipeline_parallel_size": "parallelism.pipeline_parallel_size",
    "data_parallel_size": "cluster.num_replicas",
    "expert_parallel_size": "cost.expert_parallel_size",
}


UNKNOWN = "unknown"
"""A layout field's value in a ``measure`` folder's ``engine_settings`` when the run could
not see it: ``measure --endpoint`` not told it (``--server-setting``), or a folder
written before measure recorded its layout. Compared with nothing; a caveat names it."""


def measured_settings(summary: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The engine settings a run records: an imported run's ``engine`` (vLLM's names, as
    ``imported_engine_settings`` renames them), else its ``engine_settings``; a ``measure``
    run's (``mode: measured``) with each layout field it does not record ``UNKNOWN`` (an
    imported run's unrecorded fields are left out: compared with nothing, as its
    importer says)."""
    engine = summary.get("engine")
    settings = (
        imported_engine_settings(engine)
        if isinstance(engine, Mapping)
        else summary.get("engine_settings")
    )
    if summary.get("mode") != "measured":
        return settings if isinstance(settings, Mapping) else None
    recorded = settings if isinstance(settings, Mapping) else {}
    return {**dict.fromkeys(LAYOUT_SETTINGS, UNKNOWN), **recorded}


def told_settings(told: Mapping[str, Any]) -> dict[str, Any]:
    """What the user told ``measure --endpoint`` of the server (``--server-setting``, in
    vLLM's engine-argument names), in the names ``engine_mismatches`` compares; a
    layout field not told is ``UNKNOWN``. ConfigError for a name no check reads."""
    known = {theirs for theirs, _ in _IMPORTED_SETTINGS} | set(LAYOUT_SETTINGS)
    known.add("enable_expert_parallel")
    known.discard("expert_parallel_size")  # vLLM's argument is enable_expert_parallel
    for name, value in told.items():
        if name not in known:
            raise ConfigError(
                f"--server-setting {name}: not a setting validate checks (one of "
                f"{', '.join(sorted(known))})"
            )
        expected = _told_type_error(name, value)
        if expected:
            shown = str(value).lower() if isinstance(value, bool) else value
            raise ConfigError(f"--server-setting {name}={shown}: {name} expects {expected}")
    settings = {**dict.fromkeys(LAYOUT_SETTINGS, UNKNOWN), **imported_engine_settings(told)}
    ranks = ("data_parallel_size", "tensor_parallel_size")
    if told.get("enable_expert_parallel") and any(told.get(key) is None for key in ranks):
        settings["expert_parallel_size"] = UNKNOWN  # experts over dp x tp GPUs: not told
    return settings


# vLLM's engine arguments told as true/false; vllm_version is text; every other
# setting told is a count (GPUs, sequences, tokens, blocks), a whole number >= 1.
_TOLD_SWITCHES = ("enable_prefix_caching", "async_scheduling", "enable_expert_parallel")


def _told_type_error(name: str, value: Any) -> str | None:
    """What ``name`` expects when ``value`` (as ``--server-setting`` read it: a bool, an
    int or text) is not of its type; ``None`` when it is."""
    if name == "vllm_version":
        return None
    if name in _TOLD_SWITCHES:
        return None if isinstance(value, bool) else "true or false"
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return None
    return "a whole number >= 1"


# vLLM's dtype names (its --dtype, --kv-cache-dtype and quantization methods, torch's)
# as ``quantization:`` names them; a method of no one size (AWQ, GPTQ) is left out.
_VLLM_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "half": "fp16", "fp8": "fp8"}
_VLLM_DTYPES |= {"fp8_e4m3": "fp8", "fp8_e5m2": "fp8"}
# An imported run's storage dtypes (``weights_dtype``, ``kv_cache_dtype`` in
# ``engine``) and the scenario's ``quantization`` field each must equal in bytes.
DTYPE_SETTINGS = {"weights_dtype": "weights", "kv_cache_dtype": "kv_cache"}


def imported_engine_settings(engine: Mapping[str, Any]) -> dict[str, Any]:
    """The settings an imported run recorded (unrecorded ones left out), in the
    names ``engine_mismatches`` compares."""
    settings = {
        ours: engine[theirs]
        for theirs, ours in _IMPORTED_SETTINGS
        if engine.get(theirs) is not None
    }
    for key in DTYPE_SETTINGS:
        dtype = _VLLM_DTYPES.get(str(engine.get(key)).removeprefix("torch."))
        if dtype is not None:
            settings[key] = dtype
    settings.update(
        (key, engine[key])
        for key in LAYOUT_SETTINGS
        if key != "expert_parallel_size" and engine.get(key) is not None
    )
    if engine.get("enable_expert_parallel") is not None:
        ranks = (engine.get("data_parallel_size") or 1) * (engine.get("tensor_parallel_size") or 1)
        settings["expert_parallel_size"] = ranks if engine["enable_expert_parallel"] else 1
    return settings


def _layout(scenario: Scenario) -> dict[str, int]:
    """The scenario's parallel layout in ``LAYOUT_SETTINGS``' names."""
    cluster = scenario.cluster
    layout = {
        "tensor_parallel_size": scenario.parallelism.tensor_parallel_size,
        "pipeline_parallel_size": scenario.parallelism.pipeline_parallel_size,
        "data_parallel_size": cluster.total_replicas if cluster is not None else 1,
    }
    if not isinstance(scenario.cost, KernelsCostConfig):  # only kernel tables split experts
        return layout
    return {**layout, "expert_parallel_size": scenario.cost.expert_parallel_size}


def engine_mismatches(scenario: Scenario, recorded: Mapping[str, Any]) -> list[str]:
    """Recorded engine settings and parallel layout that differ from those the
    prediction would run."""
    expected = engine_settings(scenario, core_config_for(scenario))
    found = [
        f"{key} {recorded[key]!r} measured, {value!r} in the scenario"
        for key, value in expected.items()
        if _differs(recorded.get(key, UNKNOWN), value)
    ]
    model, quantization = model_for(scenario), scenario.quantization
    stored = {  # bytes an element, and the scenario's dtype as a report names it
        "weights_dtype": (model.weight_dtype_bytes, quantization.weights),
        "kv_cache_dtype": (model.kv_dtype_bytes, quantization.kv_cache),
    }
    found += [
        f"{key} {recorded[key]} measured, quantization.{DTYPE_SETTINGS[key]} "
        f"{dtype_name(size, configured)} in the scenario"
        for key, (size, configured) in stored.items()
        if recorded.get(key) in DTYPE_BYTES and DTYPE_BYTES[recorded[key]] != size
    ]
    return found + [
        f"{key} {recorded[key]} measured, {LAYOUT_SETTINGS[key]} {value} in the scenario"
        for key, value in _layout(scenario).items()
        if _differs(recorded.get(key, UNKNOWN), value)
    ]


def _differs(found: Any, value: Any) -> bool:
    """Whether a recorded setting (``UNKNOWN``: not compared) is not the scenario's
    ``value``: a true is not 1, nor 1 true (bool is an int in Python)."""
    return found != UNKNOWN and (
        found != value or isinstance(found, bool) != isinstance(value, bool)
    )


def unknown_layout(scenario: Scenario, recorded: Mapping[str, Any] | None, where: str) -> list[str]:
    """The caveat (one line naming ``where`` and the fields) when the run's layout is
    ``UNKNOWN`` in a field the scenario's layout has; empty when it is all recorded."""
    layout = _layout(scenario)
    unknown = [key for key in layout if recorded is not None and recorded.get(key) == UNKNOWN]
    if not unknown:
        return []
    assumed = ", ".join(f"{LAYOUT_SETTINGS[key]} {layout[key]}" for key in unknown)
    return [
        f"{where}: the run does not record its {', '.join(unknown)}; the errors assume the "
        f"scenario's ({assumed}) (measure records its layout now; with --endpoint, say the "
        "server's: --server-setting NAME=VALUE)"
    ]


def check_settings(scenario: Scenario, recorded: Mapping[str, Any], where: str) -> list[str]:
    """``check_run``'s refusal for the recorded settings alone (calibrate --from-run
    --scenario: a fit's scenario may run another workload than the run's); its caveats."""
    _refuse(scenario, engine_mismatches(scenario, recorded), where)
    return unknown_layout(scenario, recorded, where)


def _by_request(rows: pd.DataFrame, work_lengths: dict[str, np.ndarray]) -> list[str]:
    """Lengths request by request (ids 0, 1, 2, ... are the scenario's requests)."""
    found = []
    ids = rows["request_id"].to_numpy()
    for name, column in _LENGTHS:
        have = rows[column].to_numpy(dtype=np.int64)
        wanted = work_lengths[column][: len(have)]
        differ = np.flatnonzero(have != wanted)
        if differ.size:
            i = int(differ[0])
            found.append(
                f"{name} lengths differ in {differ.size} of {len(have)} requests (request "
                f"{int(ids[i])}: {int(have[i])} measured, {int(wanted[i])} in the scenario)"
            )
    return found


def _as_sorted(rows: pd.DataFrame, work_lengths: dict[str, np.ndarray]) -> list[str]:
    """Lengths as sorted values (the run's order and ids are its own)."""
    found = []
    for name, column in _LENGTHS:
        have = np.sort(rows[column].to_numpy(dtype=np.int64))
        differ = int(np.count_nonzero(have != np.sort(work_lengths[column])))
        if differ:
            found.append(f"{name} lengths differ ({differ} of {len(have)} sorted values)")
    return found


def _requests(scenario: Scenario, run: RunFacts, base_dir: Path | None) -> list[str]:
    """The request count, then the lengths where they can be compared."""
    workload = scenario.workload
    if isinstance(workload, ClosedLoopWorkload):
        expected, lengths = workload.num_requests, None
    else:
        work = generate_open_loop(workload, np.random.default_rng(scenario.seed), base_dir)
        expected = len(work)
        lengths = {
            "num_prompt_tokens": np.asarray(work.num_prompt_tokens),
            "num_output_tokens": np.asarray(work.num_output_tokens),
        }
    rows = run.requests.sort_values("request_id") if len(run.requests) else run.requests
    listed, failed, cut = len(rows), run.num_failed_unlisted, run.num_incomplete
    # The scenario may hold the run's rows, those and the failed, or every request sent.
    sent = (listed, listed + failed, listed + failed + cut)
    if listed > expected or (not run.partial and expected not in sent):
        also = [f"{failed} failed"] * bool(failed) + [f"{cut} cut off unfinished"] * bool(cut)
        also_said = f" (and {', '.join(also)})" if also else ""
        return [f"{listed} requests measured{also_said}, {expected} in the scenario"]
    if lengths is None or listed == 0:
        return []  # a closed loop's lengths depend on the server's pace: the count only
    if run.in_scenario_order:
        if not np.array_equal(rows["request_id"].to_numpy(), np.arange(listed)):
            return ["request ids are not 0, 1, 2, ... as a measure run writes them"]
        return _by_request(rows, lengths)
    return _as_sorted(rows, lengths) if listed == expected else []


def mismatches(scenario: Scenario, run: RunFacts, base_dir: Path | None = None) -> list[str]:
    """What differs between a measured run and ``scenario`` (empty: it matches)."""
    found = []
    if not run.model:
        found.append("the run names no model (--assume-model NAME if it served the scenario's)")
    elif not same_model(scenario.model.name, run.model, scenario.quantization.weights):
        found.append(f"model {run.model!r} measured, {scenario.model.name!r} in the scenario")
    hardware = scenario.hardware
    if run.hardware is None and not run.device_name:
        found.append("the run names no device (--assume-device NAME if it ran on the scenario's)")
    elif run.hardware is not None and run.hardware != hardware.name:
        found.append(f"hardware {run.hardware!r} measured, {hardware.name!r} in the scenario")
    elif run.device_name and not hardware_matches(run.device_name, hardware):
        found.append(f"device {run.device_name!r} measured, {hardware.name!r} in the scenario")
    if run.engine_settings is not None:
        found += engine_mismatches(scenario, run.engine_settings)
    return found + _requests(scenario, run, base_dir)


def check_run(scenario: Scenario, run: RunFacts, base_dir: Path | None, where: str) -> list[str]:
    """A one-line ConfigError listing every difference, if there is one; else the
    caveats of what the run does not record (``unknown_layout``) or replay
    (``unreplayed``)."""
    _refuse(scenario, mismatches(scenario, run, base_dir), where)
    return unknown_layout(scenario, run.engine_settings, where) + unreplayed(run, where, scenario)


def unreplayed(run: RunFacts, where: str, scenario: Scenario | None = None) -> list[str]:
    """The caveats (one line each, naming ``where``) of what the server carried and the
    replay does not: requests that failed and are no rows of the run (``vllm bench
    serve``'s errors, GuideLLM's errored) or were cut off unfinished when a GuideLLM
    phase ended (its incomplete), and prefix-cache hits with no shared prefix declared,
    by the run or by the ``scenario`` replaying it (None: the run's own replay)."""
    failed, cut = run.num_failed_unlisted, run.num_incomplete
    caveats = []
    if failed or cut:
        total = len(run.requests) + failed + cut
        ended = "were cut off unfinished when the benchmark phase ended"
        said = f"{failed or cut} of the run's {total} requests " + ("failed" if failed else ended)
        if failed and cut:
            said += f", {cut} {ended},"
        caveats.append(
            f"{where}: {said} and are not replayed: the server carried them (in part), "
            "the prediction does not"
        )
    if run.num_cached_tokens and (scenario is None or not shared_prefixes(scenario.workload)):
        caveats.append(
            f"{where}: the server reported {run.num_cached_tokens} prompt tokens as "
            "prefix-cache hits, but the run declares no shared prefix: the prediction "
            "computes every prompt token (--prefix-tokens N on import-run, if they shared one)"
        )
    return caveats


def _refuse(scenario: Scenario, found: list[str], where: str) -> None:
    if found:
        raise ConfigError(
            f"{where} is not a run of scenario {scenario.name}: "
            + "; ".join(found)
            + " (measure it again, or give the scenario and --set it was measured with)"
        )
