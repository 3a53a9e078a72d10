"""TTFT's parts add up to TTFT for every request, under any load.

The way in, queueing, prefill and the way out (``sim.metrics.stats.TTFT_PARTS``)
are each request's consecutive intervals from arrival to its first token at the
client: over small random workloads, policies' limits, KV pools, cost models and
frontends, every completed request's parts are non-negative, the way in is the
frontend's formula, and their sum is its TTFT to float rounding.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from test_invariants import SETTINGS, Setup, continuous_setups, simulate, workloads

from sim.engine.records import completed_mask
from sim.metrics.stats import TTFT_PARTS, latency_columns, ttft_parts_summary
from sim.serving.replica_config import FrontendConfig
from sim.workload.generate import RequestArrays

PARTS = [column for column, _ in TTFT_PARTS]

# Frontends with and without a way in, a lagging output server among them.
frontends = st.builds(
    FrontendConfig,
    way_in_s_per_request=st.sampled_from([0.0, 1e-3, 0.02]),
    tokenize_s_per_token=st.sampled_from([0.0, 1.7e-5]),
    detokenize_s_per_token=st.sampled_from([0.0, 2.3e-4, 4e-3]),
    output_step_s=st.sampled_from([0.0, 2e-4, 5e-3]),
)


@settings(SETTINGS, max_examples=40)
@given(
    arrays=workloads(),
    setup=continuous_setups(),
    frontend=frontends,
    skip_ahead=st.booleans(),
    async_scheduling=st.booleans(),
)
def test_the_parts_of_every_ttft_sum_to_it(
    arrays: RequestArrays,
    setup: Setup,
    frontend: FrontendConfig,
    skip_ahead: bool,
    async_scheduling: bool,
) -> None:
    setup = replace(setup, frontend=frontend)
    raw = simulate(arrays, setup, skip_ahead, async_scheduling)
    records = raw.records
    done = completed_mask(records)
    columns = latency_columns(records)
    parts = {name: columns[name][done] for name in PARTS}
    ttft = columns["ttft_s"][done]
    scale = np.maximum(1.0, np.abs(ttft))
    assert (np.abs(sum(parts.values()) - ttft) <= 1e-12 * scale).all()
    for name, values in parts.items():
        assert (values >= -1e-12 * scale).all(), f"{name} < 0"
    order = np.asarray(records["request_id"])[done]
    np.testing.assert_allclose(
        parts["way_in_s"], frontend.way_in_s(arrays.num_prompt_tokens[order]), rtol=1e-9, atol=1e-12
    )
    # The mean parts add up to the mean TTFT (ms), as the summary reports them.
    summary = ttft_parts_summary(records)
    if done.any():
        means = [summary[f"mean_ttft_{name.removesuffix('_s')}_ms"] for name in PARTS]
        assert all(mean is not None for mean in means)
        total_ms = sum(float(mean) for mean in means if mean is not None)
        assert np.isclose(total_ms, 1e3 * float(ttft.mean()), rtol=1e-9, atol=1e-9)
