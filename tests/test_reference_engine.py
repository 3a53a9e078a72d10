"""The real engine: tokenizer, serving, preemption, and one scheduler for both executors."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from calibration.measure import Measurement, measure
from calibration.reference_engine import prompt_text
from sim.api import engine_for
from sim.cost.base import StepShape
from sim.engine.scheduler import SchedulerOutput
from sim.errors import ConfigError
from sim.openai.tokenizer import ByteTokenizer
from sim.scenario import Scenario, scenario_from_dict
from sim.serving.simulation import Simulation
from sim.validation.endpoint_prompts import ONE_TOKEN_WORDS
from sim.workload.generate import RequestArrays

SPEC = {"num_draft_tokens": 4, "acceptance_rate": 0.7, "draft_model": "smollm2-135m"}


def tiny_scenario(
    num_requests: int = 6,
    rate_per_s: float = 50.0,
    prompt: int = 40,
    output: int = 12,
    num_kv_blocks: int = 512,
    chunked: bool = True,
    budget: int = 64,
    seed: int = 0,
    async_scheduling: bool = False,
) -> Scenario:
    return scenario_from_dict(
        {
            "seed": seed,
            "model": "tiny",
            "hardware": "cpu-2core",
            "cost": {"kind": "calibrated", "artifact": "cpu-tiny-fp32"},
            "scheduler": {
                "kind": "continuous",
                "max_num_seqs": 8,
                "max_num_batched_tokens": budget,
                "chunked_prefill": chunked,
            },
            "engine": {
                "block_size_tokens": 16,
                "num_kv_blocks": num_kv_blocks,
                "max_model_len_tokens": 128 if chunked else budget,
                # The PyTorch reference engine keeps no prefix cache (a plain BlockPool).
                "enable_prefix_caching": False,
                "async_scheduling": async_scheduling,
            },
            "workload": {
                "kind": "synthetic",
                "num_requests": num_requests,
                "arrival": {"kind": "poisson", "rate_per_s": rate_per_s},
                "prompt_tokens": {
                    "kind": "uniform",
                    "min_tokens": prompt // 2,
                    "max_tokens": prompt,
                },
                "output_tokens": {
                    "kind": "uniform",
                    "min_tokens": output // 2,
                    "max_tokens": output,
                },
            },
        }
    )


@pytest.fixture(scope="module")
def served() -> Measurement:
    return measure(tiny_scenario(), progress=False)


# -- tokenizer --------------------------------------------------------------
def test_byte_tokenizer_round_trips_text() -> None:
    tok = ByteTokenizer()
    text = "héllo, world"
    ids = tok.encode(text)
    assert len(ids) == len(text.encode("utf-8"))
    assert min(ids) >= tok.num_special
    assert tok.decode(ids) == text


def test_decode_folds_ids_beyond_the_byte_range_into_printable_ascii() -> None:
    tok = ByteTokenizer()
    beyond = range(tok.num_special + 256, 32000)  # the tiny model's vocabulary
    texts = [tok.decode([t]) for t in beyond]
    assert all(len(t) == 1 and t.isprintable() and t.isascii() for t in texts)
    assert len(set(texts)) == 0x7F - 0x20  # every printable character, space to tilde
    assert tok.decode([0, 1, 2]) == ""


def test_prompt_text_has_exact_length_and_is_deterministic() -> None:
    # prompt_text's draw suffices only if no word is shorter than 2 characters.
    assert min(len(word) for word in ONE_TOKEN_WORDS) >= 2
    for n in (0, 1, 2, 3, 4, 5, 17, 500):
        text = prompt_text(n, np.random.default_rng(3))
        assert len(ByteTokenizer().encode(text)) == n
    assert prompt_text(50, np.random.default_rng(1)) == prompt_text(50, np.random.default_rng(1))
    assert prompt_text(50, np.random.default_rng(1)) != prompt_text(50, np.random.default_rng(2))


# -- serving -----------------------------------------------------------------
def test_engine_serves_every_request_with_its_output_length(served: Measurement) -> None:
    requests = served.run.requests
    assert served.run.status == "complete"
    assert requests["finish_s"].notna().all()
    assert (requests["num_generated_tokens"] == requests["num_output_tokens"]).all()
    counts = served.run.tokens.groupby("request_id").size()
    assert (counts.sort_index().to_numpy() == requests["num_output_tokens"].to_numpy()).all()


def test_token_times_are_ordered_and_match_the_request_records(served: Measurement) -> None:
    tokens = served.run.tokens.sort_values(["request_id", "token_index"])
    requests = served.run.requests.set_index("request_id")
    for _, group in tokens.groupby("request_id"):
        rid = int(group["request_id"].iloc[0])
        times = group["time_s"].to_numpy()
        assert np.all(np.diff(times) > 0)
        assert times[0] == pytest.approx(requests.loc[rid, "first_token_s"])
        assert times[-1] == pytest.approx(requests.loc[rid, "finish_s"])
        row = requests.loc[rid]
        assert row["arrival_s"] <= row["ready_s"] <= row["first_scheduled_s"] < times[0]


def test_steps_tile_busy_time_and_record_shapes(served: Measurement) -> None:
    steps = served.run.steps
    assert (steps["start_s"] <= steps["forward_start_s"]).all()
    assert (steps["forward_start_s"] < steps["end_s"]).all()
    assert (steps["end_s"] <= steps["done_s"]).all()
    assert (steps["done_s"].to_numpy()[:-1] <= steps["start_s"].to_numpy()[1:]).all()
    total_tokens = (steps["num_prefill_tokens"] + steps["num_decode_seqs"]).sum()
    r = served.run.requests
    assert total_tokens == (r["num_prompt_tokens"] + r["num_output_tokens"] - 1).sum()


def test_summary_is_marked_measured(served: Measurement, tmp_path: Path) -> None:
    s = served.summary
    assert s["mode"] == "measured"
    assert s["device"] == "cpu" and s["threads"] == 1
    assert s["torch_version"]
    assert s["completed"] == 6
    assert s["median_itl_ms"] > 0
    paths = {p.name for p in served.write(tmp_path)}
    assert {"requests.parquet", "summary.json", "steps.parquet", "tokens.parquet"} <= paths


def _tokens_by_request(m: Measurement) -> dict[int, list[int]]:
    t = m.run.tokens.sort_values(["request_id", "token_index"])
    return {
        int(g["request_id"].iloc[0]): g["token_id"].tolist() for _, g in t.groupby("request_id")
    }


def test_greedy_tokens_survive_recompute_preemption() -> None:
    """A KV pool too small for the batch forces recompute; the tokens must not change."""
    roomy = measure(tiny_scenario(num_requests=4, prompt=48, output=24), progress=False)
    tight = measure(
        tiny_scenario(num_requests=4, prompt=48, output=24, num_kv_blocks=9), progress=False
    )
    assert int(tight.run.requests["num_preemptions"].sum()) > 0
    assert int(roomy.run.requests["num_preemptions"].sum()) == 0
    assert _tokens_by_request(tight) == _tokens_by_request(roomy)


def test_time_limit_keeps_what_was_measured(tmp_path: Path) -> None:
    m = measure(tiny_scenario(num_requests=30, rate_per_s=5.0), progress=False, max_duration_s=0.5)
    assert m.run.status == "time limit"
    assert len(m.run.requests) == 30  # unsent and unfinished requests are recorded too
    assert m.run.requests["finish_s"].isna().any()
    assert m.summary["status"] == "time limit"
    m.write(tmp_path)
    assert (tmp_path / "summary.json").exists()


def test_a_model_too_big_for_the_device_is_a_clear_error() -> None:
    big = tiny_scenario().model_copy(
        update={
            "model": tiny_scenario().model.model_copy(
                update={"name": "huge", "hidden_size": 65536, "intermediate_size": 262144}
            )
        }
    )
    with pytest.raises(ConfigError, match=r"the weights of model huge .* exceed"):
        measure(big, progress=False)


# -- one scheduler, two executors ---------------------------------------------
class ReplayCost:
    """Ends every simulated step when the engine's matching step ended (its next start)."""

    label = "replay"

    def __init__(self, ends_s: list[float]) -> None:
        self.ends_s = ends_s
        self.index = 0
        self.clock = lambda: 0.0

    def step_s(self, shape: StepShape) -> float:
        end = self.ends_s[self.index]
        self.index += 1
        return max(end - self.clock(), 1e-12)


class RecordingPolicy:
    """Wraps a policy unchanged, writing down each non-empty plan's batch."""

    def __init__(self, inner: object, batches: list[str]) -> None:
        self.inner = inner
        self.batches = batches
        # The replica reads the mode from its policy (async scheduling or not).
        self.async_scheduling = getattr(inner, "async_scheduling", False)

    def padding_contexts(self, core: object) -> Sequence[int]:
        return self.inner.padding_contexts(core)  # type: ignore[attr-defined]

    def wake_at_s(self, core: object) -> float | None:
        return self.inner.wake_at_s(core)  # type: ignore[attr-defined]

    def schedule(self, core: object, now_s: float) -> SchedulerOutput:
        plan = self.inner.schedule(core, now_s)  # type: ignore[attr-defined]
        if not plan.is_empty:
            self.batches.append(" ".join(f"{r.request_id}:{n}" for r, n in plan.scheduled))
        return plan


@pytest.mark.parametrize(
    ("chunked", "async_scheduling"), [(True, False), (False, False), (True, True)]
)
def test_simulator_replay_makes_the_engines_decisions(
    chunked: bool, async_scheduling: bool
) -> None:
    """Given the engine's step times, the simulator's policy batches exactly as the engine did
    (with async scheduling too: both plan step N+1 seeing only what was ready when N began)."""
    scenario = tiny_scenario(
        num_requests=10,
        rate_per_s=40.0,
        prompt=60,
        output=10,
        chunked=chunked,
        budget=48 if chunked else 128,
        num_kv_blocks=20,
        async_scheduling=async_scheduling,
    )
    assert scenario.async_scheduling is async_scheduling
    m = measure(scenario, progress=False)
    assert m.summary["engine_settings"]["async_scheduling"] is async_scheduling
    steps = m.run.steps
    ends = [*steps["start_s"].to_numpy()[1:].tolist(), float(steps["done_s"].iloc[-1])]
    requests = m.run.requests.sort_values("request_id")
    work = RequestArrays(
        requests["ready_s"].to_numpy(dtype=np.float64),  # when the engine's core got each
        requests["num_prompt_tokens"].to_numpy(dtype=np.int64),
        requests["num_output_tokens"].to_numpy(dtype=np.int64),
    )
    batches: list[str] = []
    cost = ReplayCost(ends)
    engine = engine_for(scenario)
    make = engine.core.make_policy
    import dataclasses

    engine = dataclasses.replace(
        engine,
        cost=cost,
        core=dataclasses.replace(engine.core, make_policy=lambda: RecordingPolicy(make(), batches)),
        skip_ahead=False,
        frontend=engine.frontend.model_copy(
            update={"way_in_s_per_request": 0.0, "tokenize_s_per_token": 0.0}
        ),
    )
    sim = Simulation(engine)
    cost.clock = lambda: sim.env.now
    raw = sim.run(work)
    assert batches == steps["batch"].tolist()
    assert isinstance(raw.requests, pd.DataFrame)
    assert (
        raw.requests["num_preemptions"].to_numpy() == requests["num_preemptions"].to_numpy()
    ).all()


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ({"engine": {"enable_prefix_caching": True}}, "engine.enable_prefix_caching: false"),
        ({"scheduler": {"preemption": "swap"}}, "scheduler.preemption: recompute"),
        ({"speculative": SPEC}, "speculative"),
    ],
)
def test_measure_refuses_what_the_reference_engine_cannot_run(
    override: dict[str, dict[str, object]], message: str, tmp_path: Path
) -> None:
    # A measured run and its prediction must run the same configuration.
    doc = tiny_scenario().model_dump(mode="json")
    for section, fields in override.items():
        doc[section] = {**(doc[section] or {}), **fields}
    with pytest.raises(ConfigError, match=message):
        measure(scenario_from_dict(doc), device="cpu")
