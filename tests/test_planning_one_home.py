"""Rules that had two homes in planning and validation, now one: each behaves as its
one home says, where the second copy used to differ."""

from __future__ import annotations

import json
from pathlib import Path

from sim.planning.plan import fleet_usd_per_hour
from sim.validation.formats.vllm_bench import read_vllm_bench

VLLM_BENCH = Path(__file__).resolve().parent / "data" / "imports" / "vllm_bench_detailed.json"


def test_a_fleet_has_at_least_one_unit_however_fast_a_unit_is() -> None:
    # ceil(R / c) units of g GPUs at p $/GPU-hour: 25 req/s on 10 req/s units is
    # ceil(2.5) = 3 units, 3 x 1 x $2 = $6/h.
    assert fleet_usd_per_hour(10.0, 25.0, 1, 2.0) == 6.0
    # A positive target needs one unit (capacity_report's fleet says so), even where
    # R / c is below the 1e-9 that forgives float noise: 1 x 2 GPUs x $3 = $6/h, not 0.
    assert fleet_usd_per_hour(1e12, 1.0, 2, 3.0) == 6.0


def test_vllm_bench_reads_any_spelling_of_an_infinite_rate_alike(tmp_path: Path) -> None:
    document = json.loads(VLLM_BENCH.read_text())
    del document["start_times"]
    num_requests = len(document["input_lens"])
    for rate in ("inf", "Infinity", "INF"):
        document["request_rate"] = rate
        document.pop("max_concurrency", None)
        path = tmp_path / "run.json"
        path.write_text(json.dumps(document))
        # No send times, but every request was sent at once: all arrive at 0.
        arrivals = read_vllm_bench(path).requests["arrival_s"].tolist()
        assert arrivals == [0.0] * len(arrivals) and len(arrivals) >= 1
        # Under a cap, the same rate is replayed as the throughput profile.
        document["max_concurrency"] = 2
        path.write_text(json.dumps(document | {"start_times": [0.0] * num_requests}))
        assert read_vllm_bench(path).meta["load"] == {"profile": "throughput", "max_concurrency": 2}
