"""Textbook queueing formulas: known values, identities between models, and the simulator."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest
import queueing_formulas as formulas
from hypothesis import given
from hypothesis import strategies as st

from sim.metrics import analytic
from sim.scenario import scenario_from_dict

rates = st.floats(min_value=0.01, max_value=100.0)
services = st.floats(min_value=1e-3, max_value=10.0)
utilisations = st.floats(min_value=0.0, max_value=0.98)


def erlang_c_direct(c: int, a: float) -> float:
    """Erlang C straight from the textbook sum (independent of the module's recursion)."""
    top = a**c / math.factorial(c) * c / (c - a)
    return top / (sum(a**k / math.factorial(k) for k in range(c)) + top)


def test_erlang_c_two_servers_half_load_is_one_third() -> None:
    # M/M/2 with lambda = 1, mu = 1 (a = 1 Erlang, rho = 0.5): P(wait) = 1/3, Wq = 1/3.
    assert formulas.erlang_c(2, 1.0) == pytest.approx(1 / 3)
    assert formulas.mmc_wait_s(1.0, 1.0, 2) == pytest.approx(1 / 3)
    assert formulas.mmc_sojourn_s(1.0, 1.0, 2) == pytest.approx(4 / 3)


def test_mm1_textbook_values() -> None:
    # lambda = 0.5, mu = 1: rho = 0.5, W = 1 / (mu - lambda) = 2, Wq = rho / (mu - lambda) = 1.
    assert formulas.mm1_sojourn_s(0.5, 1.0) == pytest.approx(2.0)
    assert formulas.mm1_wait_s(0.5, 1.0) == pytest.approx(1.0)
    assert analytic.utilisation(0.5, 1.0) == pytest.approx(0.5)


def test_md1_textbook_value() -> None:
    # rho = 0.5, S = 1: Wq = rho S / (2 (1 - rho)) = 0.5.
    assert formulas.md1_wait_s(0.5, 1.0) == pytest.approx(0.5)
    assert formulas.md1_sojourn_s(0.5, 1.0) == pytest.approx(1.5)


@given(c=st.integers(1, 40), share=st.floats(0.0, 0.99))
def test_erlang_c_matches_the_direct_sum(c: int, share: float) -> None:
    a = share * c
    assert formulas.erlang_c(c, a) == pytest.approx(erlang_c_direct(c, a), rel=1e-9, abs=1e-12)


@given(rho=utilisations, service_s=services)
def test_one_server_erlang_c_is_mm1(rho: float, service_s: float) -> None:
    rate = rho / service_s
    assert formulas.erlang_c(1, rho) == pytest.approx(rho, abs=1e-12)
    assert formulas.mmc_wait_s(rate, service_s, 1) == pytest.approx(
        formulas.mm1_wait_s(rate, service_s), rel=1e-9, abs=1e-12
    )


@given(rho=utilisations, service_s=services)
def test_pollaczek_khinchine_covers_mm1_and_md1(rho: float, service_s: float) -> None:
    rate = rho / service_s
    exp_m2, det_m2 = 2 * service_s**2, service_s**2
    assert analytic.mg1_wait_s(rate, service_s, exp_m2) == pytest.approx(
        formulas.mm1_wait_s(rate, service_s)
    )
    assert analytic.mg1_wait_s(rate, service_s, det_m2) == pytest.approx(
        formulas.md1_wait_s(rate, service_s)
    )
    # Deterministic service halves the exponential wait.
    assert formulas.md1_wait_s(rate, service_s) == pytest.approx(
        formulas.mm1_wait_s(rate, service_s) / 2, abs=1e-12
    )


@given(service_s=services, lo=utilisations, hi=utilisations)
def test_waits_grow_with_load(service_s: float, lo: float, hi: float) -> None:
    lo, hi = sorted((lo, hi))
    for wait in (formulas.mm1_wait_s, formulas.md1_wait_s):
        assert wait(lo / service_s, service_s) <= wait(hi / service_s, service_s)
    assert formulas.mmc_wait_s(2 * lo / service_s, service_s, 2) <= formulas.mmc_wait_s(
        2 * hi / service_s, service_s, 2
    )


@given(service_s=services, wait_s=st.floats(0.0, 100.0))
def test_md1_max_rate_inverts_the_wait(service_s: float, wait_s: float) -> None:
    rate = formulas.md1_max_rate_per_s(service_s, wait_s)
    assert rate * service_s < 1
    assert formulas.md1_wait_s(rate, service_s) == pytest.approx(wait_s, rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("rho", [1.0, 1.5])
def test_saturated_queues_wait_forever(rho: float) -> None:
    assert formulas.mm1_wait_s(rho, 1.0) == math.inf
    assert formulas.md1_sojourn_s(rho, 1.0) == math.inf
    assert formulas.mmc_wait_s(2 * rho, 1.0, 2) == math.inf
    assert formulas.erlang_c(2, 2 * rho) == 1.0


@pytest.mark.parametrize(
    "call",
    [
        lambda: formulas.mm1_wait_s(-1.0, 1.0),
        lambda: formulas.mm1_wait_s(1.0, 0.0),
        lambda: formulas.mm1_wait_s(math.nan, 1.0),
        lambda: analytic.mg1_wait_s(0.5, 1.0, 0.5),  # E[S^2] < E[S]^2 is impossible
        lambda: formulas.erlang_c(0, 1.0),
        lambda: formulas.erlang_c(2, -1.0),
        lambda: formulas.md1_max_rate_per_s(0.0, 1.0),
    ],
)
def test_bad_arguments_raise(call: Callable[[], object]) -> None:
    with pytest.raises(ValueError):
        call()


def md1_scenario(rate_per_s: float, num_requests: int, seed: int = 0) -> dict[str, Any]:
    """Batch size 1, fixed lengths, linear cost: a 10 ms prefill + 9 decode steps of 10 ms."""
    return {
        "name": "md1",
        "seed": seed,
        "cost": {"kind": "linear", "per_prefill_seq_s": 0.01, "per_decode_seq_s": 0.01},
        "scheduler": {"kind": "continuous", "max_num_seqs": 1, "max_num_batched_tokens": 8192},
        "frontend": {
            "way_in_s_per_request": 0,
            "tokenize_s_per_token": 0,
            "detokenize_s_per_token": 0,
            "output_step_s": 0,
        },
        "workload": {
            "kind": "synthetic",
            "num_requests": num_requests,
            "arrival": {"kind": "poisson", "rate_per_s": rate_per_s},
            "prompt_tokens": {"kind": "fixed", "tokens": 100},
            "output_tokens": {"kind": "fixed", "tokens": 10},
        },
    }


def test_simulator_queue_matches_md1() -> None:
    from sim import api

    service_s, prefill_s, rate = 0.1, 0.01, 5.0  # rho = 0.5
    runs = [api.run(scenario_from_dict(md1_scenario(rate, 3000, seed))) for seed in range(3)]
    mean_ttft_s = sum(r.summary["mean_ttft_ms"] for r in runs) / len(runs) / 1000.0
    expected_s = formulas.md1_wait_s(rate, service_s) + prefill_s
    assert mean_ttft_s == pytest.approx(expected_s, rel=0.1)
