"""A fuzzer of ``servesim plan``'s plan files (issue 39 item 26): any YAML document
either loads into a search space or is refused in one line naming the file, and a
small valid plan runs end to end (exit 0) or is refused in one line (exit 2), never
a traceback. Budget as the scenario fuzzer (``SERVESIM_FUZZ_EXAMPLES``,
docs/dev/testing.md).
"""

from __future__ import annotations

import contextlib
import io
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import event, given, settings
from hypothesis import strategies as st
from test_fuzz_scenarios import FUZZ, FUZZ_EXAMPLES

from sim.cli import main
from sim.errors import ConfigError
from sim.planning.plan import resolve_gpus
from sim.planning.plan_file import PlanConfig, load_plan_config

ANY_VALUE = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-10, 10_000),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.lists(st.integers(-2, 16), max_size=4),
)
VALID: dict[str, st.SearchStrategy[Any]] = {
    "gpus": st.lists(
        st.one_of(
            st.sampled_from(["h100", "l40s", "a100-80gb", "l4", "no-such-gpu"]),
            st.just({"name": "my-asic", "peak_flops_per_s": 5e14}),
        ),
        min_size=1,
        max_size=3,
    ),
    "tensor_parallel_sizes": st.lists(st.sampled_from([1, 2, 4, 8]), min_size=1, max_size=4),
    "max_num_seqs": st.lists(st.integers(1, 512), min_size=1, max_size=3),
    "max_num_batched_tokens": st.lists(st.integers(1, 16384), min_size=1, max_size=3),
    "chunked_prefill": st.lists(st.booleans(), min_size=1, max_size=2),
    "refine": st.booleans(),
    "cost_model": st.sampled_from(["auto", "roofline"]),
    "disaggregation": st.one_of(
        st.none(), st.just({"ratios": ["1:1"]}), st.just({"ratios": ["0:1", "x"]})
    ),
    "seeds": st.integers(1, 30),
    "num_requests": st.one_of(st.none(), st.integers(1, 5000)),
    "rel_width": st.floats(0.01, 0.99),
    "max_loads": st.integers(2, 60),
    "prune": st.booleans(),
    "gpu_price_per_hour": st.dictionaries(
        st.sampled_from(["h100", "l40s"]), st.floats(0.1, 10.0), max_size=2
    ),
}


@st.composite
def plan_docs(draw: st.DrawFn) -> Any:
    absurd = draw(st.sampled_from([False, False, True]))
    doc: dict[str, Any] = {}
    for name in draw(st.lists(st.sampled_from(sorted(VALID)), max_size=6, unique=True)):
        doc[name] = draw(st.one_of(VALID[name], ANY_VALUE) if absurd else VALID[name])
    if absurd and draw(st.booleans()):
        return draw(st.one_of(ANY_VALUE, st.just({**doc, "no_such_field": 1})))
    return doc


@FUZZ
@given(doc=plan_docs())
def test_every_plan_file_loads_or_is_refused_in_one_line(
    doc: Any, tmp_path_factory: pytest.TempPathFactory
) -> None:
    path = tmp_path_factory.mktemp("plan") / "plan.yaml"
    path.write_text(yaml.safe_dump(doc))
    try:
        config = load_plan_config(path)
        resolve_gpus(config)
    except ConfigError as error:
        event("refused")
        message = str(error)
        assert "\n" not in message and message, message
        return
    event("loaded")
    assert isinstance(config, PlanConfig)


SCENARIO = {
    "name": "fuzz-plan",
    "model": "llama-3-8b",
    "cost": {"kind": "roofline"},
    "workload": {
        "kind": "synthetic",
        "num_requests": 40,
        "arrival": {"kind": "poisson", "rate_per_s": 2.0},
        "prompt_tokens": {"kind": "uniform", "min_tokens": 50, "max_tokens": 800},
        "output_tokens": {"kind": "uniform", "min_tokens": 5, "max_tokens": 100},
    },
}


def _plan(folder: Path, target_rate: float) -> tuple[int, str]:
    """``servesim plan`` of ``folder``'s scenario.yaml and plan.yaml: its exit status
    and what it wrote to stderr."""
    argv = ["plan", str(folder / "scenario.yaml"), "--plan", str(folder / "plan.yaml")]
    argv += ["--slo", "ttft_mean_ms=500", "--target-rate", str(target_rate)]
    argv += ["--workers", "1", "-q", "--out", str(folder / "out")]
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            status = main(argv)
        except Exception as error:  # a crash is the finding: reported as one line
            return 1, f"Traceback: {type(error).__name__}: {error}"
    return status, err.getvalue()


@settings(FUZZ, max_examples=max(1, FUZZ_EXAMPLES // 6))
@given(
    gpu=st.sampled_from(["h100", "l40s", "l4"]),
    max_num_seqs=st.lists(st.sampled_from([1, 8, 64]), min_size=1, max_size=2),
    # Chunked prefill is always among the choices: a plan of only [false] with a token
    # budget below the model length has no candidate and crashes (named test below).
    chunked_prefill=st.sampled_from([[True], [True, False]]),
    target_rate=st.sampled_from([0.5, 3.0, 40.0]),
)
def test_a_small_plan_runs_or_is_refused_in_one_line(
    gpu: str,
    max_num_seqs: list[int],
    chunked_prefill: list[bool],
    target_rate: float,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    folder = tmp_path_factory.mktemp("plan")
    scenario, plan = folder / "scenario.yaml", folder / "plan.yaml"
    scenario.write_text(yaml.safe_dump(SCENARIO))
    plan.write_text(
        yaml.safe_dump(
            {
                "gpus": [gpu],
                "tensor_parallel_sizes": [1],
                "max_num_seqs": max_num_seqs,
                "max_num_batched_tokens": [2048],
                "chunked_prefill": chunked_prefill,
                "refine": False,
                "cost_model": "roofline",
                "seeds": 1,
                "num_requests": 40,
                "max_loads": 6,
                "rel_width": 0.3,
            }
        )
    )
    status, text = _plan(folder, target_rate)
    assert "Traceback" not in text, text
    if status == 2:
        event("refused")
        assert text.count("servesim: error:") == 1, text
    else:
        event("planned")
        assert status == 0, text
        assert (folder / "out").is_dir() and any(Path(folder / "out").iterdir())


# -- what the fuzzer found ---------------------------------------------------------


def test_found_a_plan_with_no_candidate_is_refused_in_one_line(tmp_path: Path) -> None:
    # Found by the fuzzer (issue 39): chunked_prefill [false] with max_num_batched_tokens
    # below the model length leaves no candidate; plan called next() on an empty dict.
    (tmp_path / "scenario.yaml").write_text(yaml.safe_dump(SCENARIO))
    plan = {"gpus": ["h100"], "chunked_prefill": [False], "max_num_batched_tokens": [2048]}
    (tmp_path / "plan.yaml").write_text(yaml.safe_dump(plan))
    status, text = _plan(tmp_path, 0.5)
    assert status == 2 and text.count("\n") == 1 and "Traceback" not in text, text
