"""Public trace formats as workloads: BurstGPT, Mooncake (hash ids), ShareGPT lists, Azure 2024."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from sim import api
from sim.engine.kv_blocks import BlockKeys
from sim.engine.request import Request
from sim.errors import ConfigError
from sim.scenario import load_scenario
from sim.workload.generate import RequestArrays, TraceWorkload, generate_open_loop
from sim.workload.traces.burstgpt import read_burstgpt
from sim.workload.traces.mooncake import read_mooncake
from sim.workload.traces.sharegpt import read_sharegpt
from sim.workload.traces.workload import select

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "scenarios" / "data"
BURSTGPT_HEADER = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"


def work(tmp_path: Path, **config: object) -> RequestArrays:
    return generate_open_loop(
        TraceWorkload.model_validate(config), np.random.default_rng(0), tmp_path
    )


# -- the window ------------------------------------------------------------------------------


def window(**options: Any) -> TraceWorkload:
    """A CSV trace workload with these window options (``select`` reads only those)."""
    return TraceWorkload(path="t.csv", format="csv", **options)


def test_window_rescales_to_a_target_rate() -> None:
    times = np.array([3.0, 0.0, 1.0, 5.0])
    rows, arrival = select(times, window(rate_per_s=1.5), Path("t"))
    # Sorted rows 1, 2, 0, 3 at 0, 1, 3, 5 s: rate (4 - 1) / 5 = 0.6/s; x 0.6 / 1.5 = 0.4.
    assert rows.tolist() == [1, 2, 0, 3]
    assert arrival.tolist() == pytest.approx([0.0, 0.4, 1.2, 2.0])
    assert (len(arrival) - 1) / arrival[-1] == pytest.approx(1.5)
    # Window first (offset 1 s, 3 s long: rows at 1 and 3), then the rate.
    rows, arrival = select(
        times, window(start_offset_s=1.0, duration_s=3.0, rate_per_s=4.0), Path("t")
    )
    assert rows.tolist() == [2, 0] and arrival.tolist() == pytest.approx([0.0, 0.25])
    with pytest.raises(ConfigError, match="rate_per_s needs a window of requests spanning"):
        select(times, window(rate_per_s=1.0, max_requests=1), Path("t"))
    with pytest.raises(ValueError, match="give time_scale or rate_per_s, not both"):
        window(rate_per_s=1.0, time_scale=2.0)


def test_format_fields_are_checked() -> None:
    with pytest.raises(ValidationError, match="model applies only to format 'burstgpt'"):
        TraceWorkload(path="t.csv", model="GPT-4")
    with pytest.raises(ValidationError, match="give an arrival process"):
        TraceWorkload(path="t.json", format="sharegpt")
    with pytest.raises(ValidationError, match="no times to window"):
        TraceWorkload.model_validate(
            {
                "path": "t",
                "format": "sharegpt",
                "arrival": {"kind": "poisson", "rate_per_s": 1},
                "duration_s": 5,
            }
        )
    with pytest.raises(ValidationError, match="time_scale or rate_per_s, not both"):
        TraceWorkload(path="t.csv", time_scale=0.5, rate_per_s=2.0)
    with pytest.raises(ValidationError, match="hash_block_tokens applies only"):
        TraceWorkload(path="t.csv", hash_block_tokens=16)


# -- BurstGPT ------------------------------------------------------------------------------------


def test_burstgpt_filters_and_skips_failed_rows(tmp_path: Path) -> None:
    path = tmp_path / "b.csv"
    path.write_text(
        BURSTGPT_HEADER
        + "5,ChatGPT,100,20,120,Conversation log\n"
        + "7,GPT-4,300,0,300,Conversation log\n"  # failed: skipped
        + "6,ChatGPT,50,10,60,API log\n"
        + "9,GPT-4,40,4,44,Conversation log\n"
    )
    rows, num_failed = read_burstgpt(path)
    assert num_failed == 1 and rows.arrival_s.tolist() == [0.0, 1.0, 4.0]
    gpt4, num_failed = read_burstgpt(path, model="GPT-4")
    assert gpt4.num_prompt_tokens.tolist() == [40] and num_failed == 1
    arrays = work(tmp_path, path="b.csv", format="burstgpt", log_type="Conversation log")
    assert arrays.arrival_s.tolist() == [0.0, 4.0]  # rows at 5 and 9 s
    assert arrays.num_output_tokens.tolist() == [20, 4]
    with pytest.raises(ConfigError, match=r"no row of model 'Claude'.*ChatGPT / API log"):
        read_burstgpt(path, model="Claude")


def test_burstgpt_bad_rows_name_the_line(tmp_path: Path) -> None:
    path = tmp_path / "b.csv"
    path.write_text(BURSTGPT_HEADER + "0,ChatGPT,10,5,15,API log\n1,ChatGPT,ten,5,15,API log\n")
    with pytest.raises(ConfigError, match=r"b.csv, line 3: column 'Request tokens' value 'ten'"):
        read_burstgpt(path)
    path.write_text("Timestamp,Model\n0,ChatGPT\n")
    with pytest.raises(ConfigError, match="missing column 'Request tokens'"):
        read_burstgpt(path)


def test_burstgpt_sample_and_scenario() -> None:
    lines = (DATA / "burstgpt_sample.csv").read_text().splitlines()[1:]
    kept = [
        line
        for line in lines
        if line.split(",")[1] == "ChatGPT"
        and line.endswith("Conversation log")
        and line.split(",")[3] != "0"
    ]
    assert 100 <= len(lines) <= 1000
    result = api.run(ROOT / "scenarios" / "burstgpt_trace.yaml")
    assert len(result.requests) == len(kept)
    assert result.summary["completed"] == len(kept)


# -- Mooncake ------------------------------------------------------------------------------------


def mooncake_line(t_ms: int, prompt: int, output: int, ids: list[int]) -> str:
    row = {"timestamp": t_ms, "input_length": prompt, "output_length": output, "hash_ids": ids}
    return json.dumps(row) + "\n"


def test_mooncake_rows_keep_their_ids_through_the_window(tmp_path: Path) -> None:
    (tmp_path / "m.jsonl").write_text(
        mooncake_line(2000, 1024, 5, [1, 2])
        + mooncake_line(500, 600, 3, [7, 8])
        + "\n"
        + mooncake_line(1000, 513, 2, [1, 9])
    )
    rows = read_mooncake(tmp_path / "m.jsonl")
    assert rows.arrival_s.tolist() == [1.5, 0.0, 0.5]  # ms -> s from the earliest
    arrays = work(tmp_path, path="m.jsonl", format="mooncake", start_offset_s=0.25)
    assert arrays.arrival_s.tolist() == [0.0, 1.0]  # rows at 1.0 and 2.0 s
    assert arrays.block_hash_ids == ((1, 9), (1, 2))
    assert arrays.block_hash_tokens == 512
    assert arrays.num_prompt_tokens.tolist() == [513, 1024]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{oops\n", r"m.jsonl, line 2: not JSON"),
        ('{"timestamp": 1, "input_length": 5}\n', "line 2: missing field output_length"),
        (mooncake_line(1, 512, 1, [1, 2]), r"line 2: 2 hash_ids for 512 prompt tokens"),
        (mooncake_line(1, 0, 1, []), "line 2: input_length must be a whole number >= 1"),
        (mooncake_line(1, 10, 1, [-1]), "line 2: hash_ids must be a whole number >= 0"),
    ],
)
def test_mooncake_bad_lines_name_the_line(tmp_path: Path, line: str, message: str) -> None:
    (tmp_path / "m.jsonl").write_text(mooncake_line(0, 10, 1, [1]) + line)
    with pytest.raises(ConfigError, match=message):
        read_mooncake(tmp_path / "m.jsonl")


def test_trace_block_keys_cover_the_engine_blocks_they_hold() -> None:
    keys = BlockKeys(16)

    def request(rid: int, ids: tuple[int, ...], prompt: int, per_id: int) -> Request:
        r = Request(rid, 0.0, prompt, 2)
        r.block_hash_ids, r.block_hash_tokens = ids, per_id
        return r

    # 512-token trace blocks: 32 engine blocks each; a 1,100-token prompt with 2 ids
    # shares 64 blocks, the rest are its own.
    a, b = request(0, (1, 2), 1100, 512), request(1, (1, 3), 1100, 512)
    assert keys.num_shareable(a) == 64
    ka, kb = keys.keys(a, 68), keys.keys(b, 68)
    assert ka[:32] == kb[:32] and not set(ka[32:]) & set(kb[32:])
    # 24-token trace blocks: engine block 1 (tokens 16..31) ends in trace block 1.
    c, d = request(2, (1, 2), 48, 24), request(3, (1, 5), 48, 24)
    assert keys.keys(c, 3)[0] == keys.keys(d, 3)[0]
    assert keys.keys(c, 3)[1] != keys.keys(d, 3)[1]
    assert keys.keys(c, 3, start=1) == keys.keys(c, 3)[1:]


SCENARIO = """
name: hash-ids
model: llama-3-8b
hardware: h100
cost: {kind: roofline}
engine: {enable_prefix_caching: true, block_size_tokens: 16}
workload: {kind: trace, path: t.jsonl, format: mooncake}
"""


def test_two_requests_sharing_hash_ids_hit_each_others_blocks(tmp_path: Path) -> None:
    # Request 0 computes 2 trace blocks (1,024 tokens = 64 engine blocks). 10 s later
    # (request 0 long done, its blocks cached) request 1 starts with the same two ids:
    # 1,024 cached tokens. Request 2 shares only the first id: 512. Request 3's first
    # id differs, so its second (equal) id is another block: nothing cached.
    (tmp_path / "t.jsonl").write_text(
        mooncake_line(0, 1100, 2, [1, 2, 3])
        + mooncake_line(10_000, 1100, 2, [1, 2, 4])
        + mooncake_line(20_000, 1100, 2, [1, 5, 6])
        + mooncake_line(30_000, 1100, 2, [7, 2, 3])
    )
    (tmp_path / "s.yaml").write_text(SCENARIO)
    result = api.run(load_scenario(tmp_path / "s.yaml"), base_dir=tmp_path)
    cached = result.requests.sort_values("request_id")["num_cached_tokens"].tolist()
    assert cached == [0, 1024, 512, 0]
    (tmp_path / "s.yaml").write_text(SCENARIO.replace("true", "false"))
    off = api.run(load_scenario(tmp_path / "s.yaml"), base_dir=tmp_path)
    assert off.requests["num_cached_tokens"].tolist() == [0, 0, 0, 0]


def test_csv_traces_may_carry_hash_ids(tmp_path: Path) -> None:
    (tmp_path / "t.csv").write_text(
        'timestamp,prompt_tokens,output_tokens,ids\n0,40,2,"[1, 2]"\n1,40,2,1 2\n2,40,2,3;4\n'
    )
    arrays = work(tmp_path, path="t.csv", format="csv", hash_ids_column="ids")
    assert arrays.block_hash_ids == ((1, 2), (1, 2), (3, 4)) and arrays.block_hash_tokens is None
    (tmp_path / "t.csv").write_text("timestamp,prompt_tokens,output_tokens,ids\n0,40,2,x\n")
    with pytest.raises(ConfigError, match=r"line 2: column 'ids': hash ids must be whole"):
        work(tmp_path, path="t.csv", format="csv", hash_ids_column="ids")


def test_mooncake_sample_scenario_hits_the_cache() -> None:
    on = api.run(ROOT / "scenarios" / "mooncake_trace.yaml")
    off = api.run(
        ROOT / "scenarios" / "mooncake_trace.yaml", ["engine.enable_prefix_caching=false"]
    )
    assert len(on.requests) == 300
    assert on.summary["prefix_cache_hit_rate"] > 0.3 and off.summary["prefix_cache_hit_rate"] == 0
    assert on.summary["mean_ttft_ms"] < off.summary["mean_ttft_ms"]


# -- ShareGPT length lists -------------------------------------------------------------------------


def test_sharegpt_lists_in_every_spelling(tmp_path: Path) -> None:
    (tmp_path / "a.json").write_text('[{"input_len": 5, "output_len": 7}, [3, 4]]')
    assert [a.tolist() for a in read_sharegpt(tmp_path / "a.json")] == [[5, 3], [7, 4]]
    (tmp_path / "b.jsonl").write_text('{"prompt_tokens": 9, "output_tokens": 1}\n\n[2, 2]\n')
    assert [a.tolist() for a in read_sharegpt(tmp_path / "b.jsonl")] == [[9, 2], [1, 2]]
    (tmp_path / "c.json").write_text('[{"input_len": 5}]')
    with pytest.raises(ConfigError, match=r"entry 0: missing field output_tokens"):
        read_sharegpt(tmp_path / "c.json")
    (tmp_path / "d.json").write_text("[[5, 0]]")
    with pytest.raises(ConfigError, match=r"entry 0: output length must be a whole number"):
        read_sharegpt(tmp_path / "d.json")
    (tmp_path / "e.jsonl").write_text("[1, 2]\n{bad\n")
    with pytest.raises(ConfigError, match=r"e.jsonl, line 2: not JSON"):
        read_sharegpt(tmp_path / "e.jsonl")


def test_sharegpt_pairs_keep_their_order_under_an_arrival_process(tmp_path: Path) -> None:
    (tmp_path / "l.json").write_text(json.dumps([[10 + i, 100 + i] for i in range(50)]))
    arrays = work(
        tmp_path,
        path="l.json",
        format="sharegpt",
        max_requests=40,
        arrival={"kind": "constant", "rate_per_s": 4},
    )
    assert arrays.num_prompt_tokens.tolist() == list(range(10, 50))
    assert (arrays.num_output_tokens - arrays.num_prompt_tokens).tolist() == [90] * 40
    assert arrays.arrival_s.tolist() == pytest.approx([(i + 1) / 4 for i in range(40)])
    result = api.run(ROOT / "scenarios" / "sharegpt_lengths.yaml")
    assert len(result.requests) == 300


# -- Azure 2023 / 2024 ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "second_s"),
    [
        ("azure_code_2023_sample.csv", None),
        ("azure_code_2024_sample.csv", 0.020044),
        ("azure_conv_2024_sample.csv", 1.3134),
    ],
)
def test_azure_samples_in_both_timestamp_styles(
    tmp_path: Path, name: str, second_s: float | None
) -> None:
    arrays = work(DATA, path=name, format="azure")
    assert len(arrays) == 300 and arrays.arrival_s[0] == 0.0
    assert bool(np.all(np.diff(arrays.arrival_s) >= 0))
    if second_s is not None:
        assert arrays.arrival_s[1] == pytest.approx(second_s, abs=1e-9)
    rate = work(DATA, path=name, format="azure", rate_per_s=10.0).arrival_s
    assert (len(rate) - 1) / rate[-1] == pytest.approx(10.0)


def test_azure_code_scenario_runs_every_sample() -> None:
    for name in ("azure_code_2023_sample.csv", "azure_code_2024_sample.csv"):
        result = api.run(
            ROOT / "scenarios" / "azure_code_trace.yaml", [f"workload.path=data/{name}"]
        )
        assert result.summary["completed"] == 300


def test_samples_are_reproduced_by_their_seeded_script(tmp_path: Path) -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("make", DATA / "make_trace_samples.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.HERE = tmp_path  # type: ignore[attr-defined]
    module.main()
    for path in tmp_path.iterdir():
        assert path.read_bytes() == (DATA / path.name).read_bytes(), path.name


def test_capacity_search_turns_the_rate_knob_of_rate_scaled_traces() -> None:
    from sim.planning.capacity import load_knob

    burst = load_scenario(ROOT / "scenarios" / "burstgpt_trace.yaml", ["workload.rate_per_s=3"])
    knob = load_knob(burst)
    assert (knob.kind, knob.key, knob.start) == ("rate", "workload.rate_per_s", 3.0)
    lengths = load_scenario(ROOT / "scenarios" / "sharegpt_lengths.yaml")
    knob = load_knob(lengths)
    assert (knob.key, knob.value(7.0)) == ("workload.arrival.rate_per_s", 7.0)
    plain = load_knob(load_scenario(ROOT / "scenarios" / "azure_code_trace.yaml"))
    assert plain.kind == "time_scale"


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.floats(0, 1e4, allow_nan=False, allow_subnormal=False), min_size=2, max_size=40),
    st.floats(0.1, 100.0),
    st.floats(0.0, 50.0),
)
def test_window_properties(times: list[float], rate: float, offset: float) -> None:
    array = np.asarray(times)
    try:
        rows, arrival = select(array, window(start_offset_s=offset), Path("t"))
    except ConfigError:
        assert offset > array.max() - array.min()  # nothing left in the window
        return
    assert arrival[0] == 0.0 and bool(np.all(np.diff(arrival) >= 0))
    assert bool(np.all(np.diff(array[rows]) >= 0))  # rows in time order
    assert arrival == pytest.approx(array[rows] - array[rows[0]])
    if arrival[-1] > 1e-9:  # a span finer than a nanosecond is no trace's resolution
        _, scaled = select(array, window(start_offset_s=offset, rate_per_s=rate), Path("t"))
        assert (len(scaled) - 1) / scaled[-1] == pytest.approx(rate)
        assert scaled * arrival[-1] == pytest.approx(arrival * scaled[-1])  # same shape


def test_request_arrays_carry_hash_ids_to_the_requests() -> None:
    from sim.serving.submission import prefix_describer

    arrays = RequestArrays(
        np.array([0.0, 1.0]),
        np.array([40, 40], dtype=np.int64),
        np.array([2, 2], dtype=np.int64),
        block_hash_ids=((1,), (1, 2)),
        block_hash_tokens=32,
    )
    describe = prefix_describer(arrays)
    assert describe is not None
    request = Request(1, 1.0, 40, 2)
    describe(request)
    assert request.block_hash_ids == (1, 2) and request.block_hash_tokens == 32
    assert (
        prefix_describer(
            RequestArrays(arrays.arrival_s, arrays.num_prompt_tokens, arrays.num_output_tokens)
        )
        is None
    )
    with pytest.raises(ValueError, match="one entry per request"):
        RequestArrays(
            arrays.arrival_s,
            arrays.num_prompt_tokens,
            arrays.num_output_tokens,
            block_hash_ids=((1,),),
        )


def test_mooncake_block_size_is_a_parameter(tmp_path: Path) -> None:
    (tmp_path / "m.jsonl").write_text(mooncake_line(0, 64, 1, [1, 2]))
    assert (
        work(tmp_path, path="m.jsonl", format="mooncake", hash_block_tokens=32).block_hash_tokens
        == 32
    )
    with pytest.raises(ConfigError, match="2 hash_ids for 64 prompt tokens"):
        work(tmp_path, path="m.jsonl", format="mooncake", hash_block_tokens=64)
    (tmp_path / "e.jsonl").write_text("\n")
    with pytest.raises(ConfigError, match=r"e.jsonl: no requests"):
        read_mooncake(tmp_path / "e.jsonl")
    with pytest.raises(ConfigError, match="file not found"):
        read_mooncake(tmp_path / "missing.jsonl")


def test_burstgpt_all_failed_is_refused(tmp_path: Path) -> None:
    (tmp_path / "b.csv").write_text(BURSTGPT_HEADER + "0,ChatGPT,10,0,10,API log\n")
    with pytest.raises(ConfigError, match="every selected row has 0 response tokens"):
        read_burstgpt(tmp_path / "b.csv")
