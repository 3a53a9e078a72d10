"""Fuzzing the command line: random scenarios and --set overrides give a run or one line.

Never a traceback: whatever a user writes, ``servesim run`` either simulates
(exit 0) or prints one ``servesim: error:`` line (exit 2). Request counts stay
small (every value of a count key is small) so that each example is quick.
"""

from __future__ import annotations

import contextlib
import io
import tempfile
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.cli import main

BASE: dict[str, Any] = {
    "name": "fuzz",
    "seed": 0,
    "model": "llama-3-8b",
    "hardware": "h100",
    "cost": {"kind": "linear", "per_prefill_token_s": 1e-5, "per_decode_seq_s": 1e-3},
    "scheduler": {"kind": "continuous", "max_num_seqs": 4, "max_num_batched_tokens": 512},
    "engine": {"num_kv_blocks": 200, "block_size_tokens": 16, "max_model_len_tokens": 1024},
    "workload": {
        "kind": "synthetic",
        "num_requests": 8,
        "arrival": {"kind": "poisson", "rate_per_s": 5.0},
        "prompt_tokens": {"kind": "fixed", "tokens": 50},
        "output_tokens": {"kind": "uniform", "min_tokens": 1, "max_tokens": 10},
    },
}
KEYS = [
    "name",
    "seed",
    "model",
    "hardware",
    "cost",
    "cost.kind",
    "cost.per_decode_seq_s",
    "scheduler",
    "scheduler.kind",
    "scheduler.max_num_seqs",
    "scheduler.max_num_batched_tokens",
    "scheduler.chunked_prefill",
    "scheduler.preemption",
    "engine",
    "engine.num_kv_blocks",
    "engine.block_size_tokens",
    "engine.max_model_len_tokens",
    "engine.enable_prefix_caching",
    "workload",
    "workload.kind",
    "workload.num_requests",
    "workload.arrival",
    "workload.arrival.kind",
    "workload.arrival.rate_per_s",
    "workload.prompt_tokens",
    "workload.prompt_tokens.kind",
    "workload.prompt_tokens.tokens",
    "workload.output_tokens.max_tokens",
    "slo",
    "slo.ttft_ms",
    "frontend.way_in_s_per_request",
    "frontend.tokenize_s_per_token",
    "cluster",
    "cluster.num_replicas",
    "parallelism.tensor_parallel_size",
    "quantization",
    "speculative",
    "unknown_key",
    "workload.unknown",
    "",
    ".",
    "a..b",
]
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 40),
    st.sampled_from([0, 1, 2, 16, 4096, 10**6, -(10**9), 2**63]),
    st.floats(allow_nan=True, allow_infinity=True, width=32),
    st.sampled_from(["", "x", "nan", "inf", "-1", "1e9", "continuous", "poisson", "fixed"]),
    st.text(max_size=6),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.sampled_from(KEYS), inner, max_size=3)
    ),
    max_leaves=6,
)
COUNT_KEYS = {"workload.num_requests", "workload.prompt_tokens.tokens"}


def set_path(doc: dict[str, Any], dotted: str, value: Any) -> None:
    """Put ``value`` at ``dotted``, making sections (or replacing non-sections) on the way."""
    parts = dotted.split(".")
    node = doc
    for part in parts[:-1]:
        if not isinstance(node.get(part), dict):
            node[part] = {}
        node = node[part]
    node[parts[-1]] = value


def bounded(key: str, value: Any) -> Any:
    """Counts stay small, so that a valid draw simulates quickly."""
    if key in COUNT_KEYS and isinstance(value, int) and not isinstance(value, bool):
        return min(value, 40)
    return value


def run_cli(doc: Any, sets: list[str]) -> tuple[int, str]:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "s.yaml"
        path.write_text(yaml.safe_dump(doc) if not isinstance(doc, str) else doc)
        argv = ["run", str(path), "--out", str(Path(folder) / "out"), "-q"]
        argv += [x for s in sets for x in ("--set", s)]
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            code = main(argv)
    return code, err.getvalue()


def assert_run_or_one_line(code: int, err: str) -> None:
    assert code in (0, 2), (code, err)
    if code == 2:
        lines = err.strip().splitlines()
        errors = [line for line in lines if line.startswith("servesim: error:")]
        assert len(errors) == 1 and lines[-1] == errors[0], err
    assert "Traceback" not in err


FUZZ = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


@FUZZ
@given(st.lists(st.tuples(st.sampled_from(KEYS[:-3]), values), max_size=3))
def test_random_scenario_dicts_run_or_fail_in_one_line(edits: list[tuple[str, Any]]) -> None:
    doc = yaml.safe_load(yaml.safe_dump(BASE))  # a deep copy
    for key, value in edits:
        set_path(doc, key, bounded(key, value))
    try:
        yaml.safe_dump(doc)
    except yaml.YAMLError:
        return  # not writable as YAML: not an input a user can give
    assert_run_or_one_line(*run_cli(doc, ["workload.num_requests=8"]))


set_values = st.one_of(
    st.text(max_size=12),
    st.sampled_from(["{", "[1,", "{a: 1, a: 2}", "null", "~", "!!binary x", "&a *a", "1e400"]),
    values.map(lambda v: yaml.safe_dump(v, default_flow_style=True).strip()),
)


@FUZZ
@given(st.lists(st.tuples(st.sampled_from(KEYS), set_values), min_size=1, max_size=3))
def test_random_set_overrides_run_or_fail_in_one_line(overrides: list[tuple[str, str]]) -> None:
    sets = [f"{key}={text}" for key, text in overrides]
    # A count set last stays small whatever the overrides did to it.
    assert_run_or_one_line(*run_cli(BASE, [*sets, "workload.num_requests=8"]))


@FUZZ
@given(st.one_of(st.text(max_size=40), st.binary(max_size=40).map(lambda b: b.decode("latin-1"))))
def test_random_file_text_runs_or_fails_in_one_line(text: str) -> None:
    assert_run_or_one_line(*run_cli(text, []))


def test_control_characters_in_a_value_stay_on_one_line() -> None:
    # Found by the fuzzer: a kind of "'\r" broke the error over two lines.
    code, err = run_cli(BASE, ["cost.kind='\r\nx"])
    assert code == 2 and err.count("\n") == 1 and "\\r\\nx" in err
