"""The lab's controls: each one a key of the scenario file, validated as a scenario is.

A control is named by the dotted key it writes, the key ``servesim run --set`` takes:
the page holds a scenario document, each move writes one key into it, and
``scenario_for`` validates it under the name ``lab.yaml``, so an impossible
combination reads exactly as ``servesim run lab.yaml`` would print it. A few keys
shape a section rather than set a value: Poisson arrivals have no ``burstiness``, no
shared prefix means no ``prefix_groups``, one replica no ``cluster`` section.
"""

from __future__ import annotations

import copy
import typing
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Literal

import pydantic
import yaml

from sim.hardware.specs import HARDWARE_PRESETS, MODEL_PRESETS
from sim.scenario import Scenario, scenario_from_dict, set_dotted

SOURCE = "lab.yaml"
"""What the page's scenario is called in its errors and its "copy as scenario" file."""

# scenarios/chat.yaml (tests/test_lab.py checks they validate to the same scenario):
# the installed package has no scenarios/ folder to read it from.
DEFAULT_DOC: dict[str, Any] = {
    "name": "chat",
    "description": "Interactive chat on Llama-3-8B / H100, Poisson arrivals.",
    "seed": 0,
    "model": "llama-3-8b",
    "hardware": "h100",
    "cost": {"kind": "auto"},
    "scheduler": {
        "kind": "continuous",
        "max_num_seqs": 256,
        "max_num_batched_tokens": 2048,
        "chunked_prefill": True,
    },
    "engine": {
        "block_size_tokens": 16,
        "gpu_memory_utilization": 0.9,
        "max_model_len_tokens": 8192,
    },
    "workload": {
        "kind": "synthetic",
        "num_requests": 2000,
        "arrival": {"kind": "poisson", "rate_per_s": 10},
        "prompt_tokens": {
            "kind": "lognormal",
            "median_tokens": 600,
            "sigma": 0.9,
            "min_tokens": 16,
            "max_tokens": 6000,
        },
        "output_tokens": {
            "kind": "lognormal",
            "median_tokens": 180,
            "sigma": 0.7,
            "min_tokens": 4,
            "max_tokens": 2000,
        },
    },
    "slo": {"ttft_ms": 500, "tpot_ms": 50},
}

RATE_KEY = "workload.arrival.rate_per_s"
_PREFIX = "workload.prefix_groups"


def _group(name: str, *controls: Control) -> tuple[Control, ...]:
    """``controls`` under the page's heading ``name``."""
    return tuple(replace(control, group=name) for control in controls)


# The scenario's cluster section, read from its schema (the lab imports no simulator layer).
_CLUSTER: Any = next(
    a for a in typing.get_args(Scenario.model_fields["cluster"].annotation) if a is not type(None)
)
REPLICAS_KEY = "cluster.num_replicas"
REQUESTS_KEY = "workload.num_requests"
# Each scheduler kind's settings, from the schema: a key its kind lacks is refused there.
_POLICY = Scenario.model_fields["scheduler"]
_POLICIES: dict[str, Any] = {
    p.model_fields["kind"].default: p for p in typing.get_args(_POLICY.annotation)
}


def _router_kinds() -> tuple[str, ...]:
    """``cluster.router``'s choices, read from the scenario schema (their one home)."""
    return typing.get_args(_CLUSTER.model_fields["router"].annotation)


@dataclass(frozen=True)
class Control:
    """One control of the page: the scenario key it writes, and how the page shows it.

    ``low``/``high``/``step`` bound a slider or number box (``log``: a slider moving
    in ratios, for a rate); ``choices`` a menu; ``empty`` the value an empty number
    box stands for (None: the key is left out of the document)."""

    key: str
    label: str
    kind: Literal["slider", "number", "select", "checkbox"]
    low: float | None = None
    high: float | None = None
    step: float | None = None
    log: bool = False
    choices: tuple[Any, ...] = ()
    group: str = ""
    optional: bool = False  # an empty box leaves the key out
    default: Any = None  # the value when the document leaves the key out
    note: str = ""
    fixed: str = ""  # why the starting scenario's value cannot be moved (the page disables it)

    def spec(self) -> dict[str, Any]:
        """The control as the page's script reads it (JSON): its fields but ``default``."""
        spec = asdict(self)
        del spec["default"]
        return spec


CONTROLS: tuple[Control, ...] = (
    *_group(
        "load",
        Control(RATE_KEY, "arrival rate (req/s)", "slider", 0.25, 200, 0.25, log=True),
        Control("workload.arrival.kind", "arrivals", "select", choices=("poisson", "gamma")),
        Control(
            "workload.arrival.burstiness",
            "burstiness (gamma shape; CV = 1/√shape)",
            "slider",
            0.1,
            4,
            0.05,
            log=True,
            default=1.0,
            note="gamma only",
        ),
        Control(REQUESTS_KEY, "requests", "select", choices=(500, 1000, 2000, 5000)),
    ),
    *_group(
        "lengths (lognormal)",
        Control(
            "workload.prompt_tokens.median_tokens",
            "prompt median (tokens)",
            "slider",
            16,
            8000,
            1,
            log=True,
        ),
        Control("workload.prompt_tokens.sigma", "prompt sigma", "slider", 0, 2, 0.05),
        Control(
            "workload.output_tokens.median_tokens",
            "output median (tokens)",
            "slider",
            4,
            2000,
            1,
            log=True,
        ),
        Control("workload.output_tokens.sigma", "output sigma", "slider", 0, 2, 0.05),
        Control(
            f"{_PREFIX}.shared_prefix_tokens",
            "shared prefix (tokens, 0: none)",
            "number",
            0,
            8000,
            16,
            default=0,
            note="prefix-cache hits: one of num_groups shared system prompts before each prompt",
        ),
        Control(f"{_PREFIX}.num_groups", "prefix groups", "number", 1, 1000, 1, default=8),
    ),
    *_group(
        "engine",
        Control("scheduler.max_num_seqs", "max_num_seqs", "slider", 1, 1024, 1, log=True),
        Control(
            "scheduler.max_num_batched_tokens",
            "max_num_batched_tokens (chunk size)",
            "slider",
            16,
            16384,
            16,
            log=True,
        ),
        Control("scheduler.chunked_prefill", "chunked prefill", "checkbox"),
        Control("engine.enable_prefix_caching", "prefix caching", "checkbox", default=True),
        Control(
            "engine.num_kv_blocks",
            "KV blocks (empty: as vLLM sizes it)",
            "number",
            1,
            10**6,
            1,
            optional=True,
        ),
    ),
    *_group(
        "hardware",
        Control("model", "model", "select", choices=tuple(MODEL_PRESETS)),
        Control("hardware", "GPU", "select", choices=tuple(HARDWARE_PRESETS)),
        Control(
            "parallelism.tensor_parallel_size",
            "tensor parallel",
            "select",
            choices=(1, 2, 4, 8),
            default=1,
        ),
        Control(REPLICAS_KEY, "replicas", "number", 1, 64, 1, default=1),
        Control(
            "cluster.router", "router", "select", choices=_router_kinds(), default="round_robin"
        ),
    ),
    *_group(
        "SLO",
        Control("slo.ttft_ms", "TTFT SLO (ms)", "number", 1, 10**6, 1, optional=True),
        Control("slo.tpot_ms", "TPOT SLO (ms)", "number", 1, 10**6, 1, optional=True),
    ),
)
CONTROL_KEYS = frozenset(c.key for c in CONTROLS)


def _get(doc: dict[str, Any], dotted: str) -> Any:
    """``doc[a][b][c]`` for ``"a.b.c"``, None where a section or the key is missing."""
    node: Any = doc
    for key in dotted.split("."):
        if not isinstance(node, dict) or key not in node:
            return None
        node = node[key]
    return node


def _drop(doc: dict[str, Any], dotted: str) -> None:
    """Remove ``a.b.c`` from ``doc``, and ``a.b`` too when that leaves it empty."""
    *path, last = dotted.split(".")
    parents = [doc]
    for key in path:
        child = parents[-1].get(key)
        if not isinstance(child, dict):
            return
        parents.append(child)
    parents[-1].pop(last, None)
    for key, parent in zip(reversed(path), reversed(parents[:-1]), strict=True):
        if parent.get(key) == {}:
            parent.pop(key)


def _name(value: Any) -> Any:
    """A preset's name for a ``model``/``hardware`` entry (a name or ``{preset: ...}``)."""
    return value.get("preset", value.get("name")) if isinstance(value, dict) else value


def _disaggregated(doc: dict[str, Any]) -> Any | None:
    """``doc``'s cluster, validated, where it splits prefill and decode; None for
    another (or a bad one: refused where the whole document is validated)."""
    cluster = doc.get("cluster")
    if not isinstance(cluster, dict) or not cluster.get("disaggregation"):
        return None
    try:
        return _CLUSTER.model_validate(cluster)
    except pydantic.ValidationError:
        return None


def values_of(doc: dict[str, Any]) -> dict[str, Any]:
    """Each control's value in ``doc``, its default where ``doc`` leaves it out (a
    disaggregated cluster's replicas: its pools' sum)."""
    values = {}
    split = _disaggregated(doc)
    for control in CONTROLS:
        value = _get(doc, control.key)
        if control.key in ("model", "hardware"):
            value = _name(value)
        if control.key == REPLICAS_KEY and split is not None:
            value = split.total_replicas
        values[control.key] = control.default if value is None else value
    return values


def controls_for(doc: dict[str, Any]) -> tuple[Control, ...]:
    """The controls as the page shows them starting from ``doc``: a menu holds
    ``doc``'s own value among its choices and a slider's or number box's range holds
    it (a menu shows only a choice, a slider's knob stops at its ends: another value
    would be shown than runs). A control is fixed (the page disables it, saying why)
    where one number cannot say ``doc``'s value (a disaggregated cluster's replicas:
    how many prefill, how many decode) or where ``doc`` has none and any value would
    be refused: a scheduler setting its policy lacks, requests beside ``duration_s``."""
    shown = values_of(doc)
    split = _disaggregated(doc)
    policy = _get(doc, "scheduler.kind") or _POLICY.get_default(call_default_factory=True).kind
    settings = _POLICIES.get(policy)  # None: an unknown kind, refused by the run
    duration_s = _get(doc, "workload.duration_s")
    controls = []
    for control in CONTROLS:
        value = shown[control.key]
        low, high = control.low, control.high
        if low is not None and high is not None and isinstance(value, int | float):
            control = replace(control, low=min(low, value), high=max(high, value))
        if control.kind == "select" and value is not None and value not in control.choices:
            choices = (*control.choices, value)
            if all(isinstance(c, int | float) for c in choices):
                choices = tuple(sorted(choices))
            control = replace(control, choices=choices)
        if control.key == REPLICAS_KEY and split is not None:
            pools = split.disaggregation
            control = replace(
                control,
                fixed=f"fixed by the scenario: {pools.num_prefill_replicas} prefill + "
                f"{pools.num_decode_replicas} decode (cluster.disaggregation)",
            )
        section, _, field = control.key.partition(".")
        if section == "scheduler" and settings and field not in settings.model_fields:
            control = replace(control, fixed=f"this policy ({policy}) has no {field}")
        if control.key == REQUESTS_KEY and duration_s is not None:
            control = replace(
                control,
                fixed=f"fixed by the scenario: it runs for workload.duration_s: {duration_s} "
                "(give exactly one of num_requests and duration_s)",
            )
        controls.append(control)
    return tuple(controls)


def doc_for(values: dict[str, Any], base: dict[str, Any] | None = None) -> dict[str, Any]:
    """``base`` (the page's starting scenario) with each control's value written at
    its key; unknown keys are an error, as an unknown ``--set`` key is.

    A value the page shows for ``base`` itself (``values_of``) keeps ``base``'s entry:
    the page sends every control's value, and writing back what it shows would turn
    a scenario's own lengths into a lognormal without its median, a disaggregated
    cluster into one of 1 replica, a preset with overrides into its bare name."""
    doc = copy.deepcopy(DEFAULT_DOC if base is None else base)
    shown = values_of(doc)
    for key, value in values.items():
        if key not in CONTROL_KEYS:
            raise ValueError(f"no control writes {key!r}")
        if value == shown[key]:
            continue
        if key.startswith("workload.") and key.endswith(("median_tokens", ".sigma")):
            _lognormal(doc, key.rsplit(".", 2)[1])
        if value is None or value == "":
            _drop(doc, key)
        else:
            set_dotted(doc, key, value, SOURCE)
    if _get(doc, "workload.arrival.kind") != "gamma":
        _drop(doc, "workload.arrival.burstiness")
    if not _get(doc, f"{_PREFIX}.shared_prefix_tokens"):
        _drop(doc, f"{_PREFIX}.shared_prefix_tokens")
        _drop(doc, f"{_PREFIX}.num_groups")
    if (_get(doc, "cluster.num_replicas") or 1) == 1 and not _get(doc, "cluster.disaggregation"):
        doc.pop("cluster", None)  # one replica: no router to choose
    if _get(doc, "parallelism.tensor_parallel_size") == 1:
        _drop(doc, "parallelism.tensor_parallel_size")
    return doc


def _lognormal(doc: dict[str, Any], which: str) -> None:
    """Make ``workload.<which>`` a lognormal length (the controls' median and sigma),
    keeping its bounds; another kind's own fields go."""
    lengths = doc.setdefault("workload", {}).setdefault(which, {})
    if lengths.get("kind") == "lognormal":
        return
    kept = {k: lengths[k] for k in ("min_tokens", "max_tokens") if k in lengths}
    lengths.clear()
    lengths.update({"kind": "lognormal", "median_tokens": 100, "sigma": 0.0, **kept})


def scenario_for(doc: dict[str, Any], base_dir: Path | None = None) -> Scenario:
    """``doc`` validated as ``servesim run lab.yaml`` validates that file, its relative
    paths (``engine.cpu_artifact``) from ``base_dir``, the starting scenario's folder."""
    return scenario_from_dict(copy.deepcopy(doc), SOURCE, base_dir)


def scenario_yaml(doc: dict[str, Any]) -> str:
    """``doc`` as a scenario file: ``servesim run`` on it reproduces the page's run."""
    header = "# servesim lab: run with  servesim run lab.yaml\n"
    return header + yaml.safe_dump(doc, sort_keys=False, default_flow_style=False)
