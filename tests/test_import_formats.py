"""Measured-run importers: each format on its hand-written fixture, detection, bad input."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.cli import main
from sim.errors import ConfigError
from sim.metrics.stats import with_request_metrics
from sim.validation.formats.guidellm import read_guidellm
from sim.validation.formats.measure_dir import read_measure
from sim.validation.formats.otlp import read_otlp
from sim.validation.formats.vllm_bench import read_vllm_bench
from sim.validation.importers import FORMATS, detect_format, import_run
from sim.validation.predict import measured_latencies
from sim.validation.runs import REQUEST_COLUMNS, load_run

DATA = Path(__file__).resolve().parent / "data" / "imports"
VLLM_BENCH = DATA / "vllm_bench_detailed.json"
GUIDELLM = DATA / "guidellm_report.json"
GUIDELLM_V02 = DATA / "guidellm_report_v02.yaml"
OTLP = DATA / "vllm_otlp_spans.jsonl"


def column(frame: pd.DataFrame, name: str) -> list[float]:
    return [float(v) for v in frame[name]]


# -- vllm bench serve --------------------------------------------------------------------------


def test_vllm_bench_times_from_start_times_ttfts_and_latencies() -> None:
    run = read_vllm_bench(VLLM_BENCH)
    r = run.requests
    assert list(r.columns[: len(REQUEST_COLUMNS)]) == list(REQUEST_COLUMNS)
    # Request 2 failed (errors non-empty): dropped and counted.
    assert run.meta["num_failed"] == 1 and run.meta["failed_errors"] == [
        "Bad Request: prompt too long"
    ]
    # start_times 1000, 1000.25, 1000.5, 1001 -> arrivals from the first.
    assert column(r, "arrival_s") == [0.0, 0.25, 0.5, 1.0]
    # first token = start + ttft: 0.1, 0.25 + 0.15, 0.5 + 0.075, 1 + 0.2.
    assert column(r, "first_token_s") == pytest.approx([0.1, 0.4, 0.575, 1.2])
    # finish = start + latency: 0.2, 0.45, 0.625, 1.3125.
    assert column(r, "finish_s") == pytest.approx([0.2, 0.45, 0.625, 1.3125])
    assert r["num_prompt_tokens"].tolist() == [12, 20, 8, 30]
    assert r["num_output_tokens"].tolist() == [4, 3, 2, 3]
    assert r["first_scheduled_s"].isna().all()  # not recorded by the client
    assert run.meta["engine"]["model"] == "meta-llama/Llama-3.1-8B-Instruct"
    assert run.meta["settings"]["request_rate"] == 4.0


def test_vllm_bench_chunks_give_the_itl_vllm_reports() -> None:
    run = read_vllm_bench(VLLM_BENCH)
    assert run.tokens is not None
    first = run.tokens[run.tokens["request_id"] == 0]
    # 0.1, then + 0.025, + 0.025, + 0.05.
    assert column(first, "time_s") == pytest.approx([0.1, 0.125, 0.15, 0.2])
    assert first["token_index"].tolist() == [0, 1, 2, 3]
    # Request 3 streamed 3 tokens in 2 chunks: one gap of 0.1 s.
    assert column(run.tokens[run.tokens["request_id"] == 3], "time_s") == pytest.approx([1.2, 1.3])
    itl = measured_latencies(run.requests, run.tokens).itl_s
    every_gap = [0.025, 0.025, 0.05, 0.025, 0.025, 0.05, 0.1]
    assert sorted(itl.tolist()) == pytest.approx(sorted(every_gap))
    # TPOT of request 0 = (0.2 - 0.1) / 3.
    assert with_request_metrics(run.requests)["tpot_s"].iloc[0] == pytest.approx(0.1 / 3)


def vllm_doc(**changes: Any) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(VLLM_BENCH.read_text())
    document.update(changes)
    return {k: v for k, v in document.items() if v is not ...}


def write(tmp_path: Path, document: object, name: str = "run.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(document))
    return path


def test_vllm_bench_without_start_times_at_infinite_rate_sends_all_at_zero(tmp_path: Path) -> None:
    path = write(tmp_path, vllm_doc(start_times=..., request_rate="inf"))
    run = read_vllm_bench(path)
    assert column(run.requests, "arrival_s") == [0.0] * 4
    assert "all sent at once" in run.meta["arrival"]
    # Without latencies, finish = first token + the sum of the gaps.
    run = read_vllm_bench(
        write(tmp_path, vllm_doc(start_times=..., latencies=..., request_rate="inf"))
    )
    assert sorted(column(run.requests, "finish_s")) == pytest.approx([0.125, 0.2, 0.2, 0.3])


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"start_times": ...}, r"no start_times, and arrivals at request_rate 4\.0"),
        ({"start_times": ..., "request_rate": "inf", "max_concurrency": 2}, "max_concurrency 2"),
        ({"ttfts": ...}, "missing field ttfts"),
        ({"input_lens": ...}, r"missing field input_lens \(save the run with --save-detailed\)"),
        ({"itls": [[0.1]]}, "field itls has 1 entries, input_lens has 5"),
        ({"ttfts": [0.1, "x", 0.0, 0.075, 0.2]}, "request 1: ttfts must be a finite number"),
        ({"latencies": [0.05, 0.2, 0.0, 0.125, 0.3125]}, "request 0: latencies is shorter"),
        ({"output_lens": [4, 3, 0, 2.5, 3]}, "request 3: output_lens must be a whole number"),
        ({"errors": ["e"] * 5}, r"every request failed \(e\)"),
    ],
)
def test_vllm_bench_bad_input_is_one_line_naming_the_field(
    tmp_path: Path, changes: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError, match=message) as error:
        read_vllm_bench(write(tmp_path, vllm_doc(**changes)))
    assert "\n" not in str(error.value) and str(tmp_path) in str(error.value)


# -- GuideLLM ------------------------------------------------------------------------------------


def test_guidellm_report_with_info_timings() -> None:
    run = read_guidellm(GUIDELLM)
    r = run.requests
    # request_start 0, 0.5, 1.0625 after the first (sorted by arrival: a, b, c).
    assert column(r, "arrival_s") == [0.0, 0.5, 1.0625]
    assert column(r, "first_token_s") == [0.25, 0.625, 1.1875]
    assert column(r, "finish_s") == [0.75, 0.625, 1.5625]  # the last token, not request_end
    assert r["num_prompt_tokens"].tolist() == [64, 32, 16]
    assert r["num_output_tokens"].tolist() == [5, 1, 4]
    assert run.tokens is None  # no per-chunk times in a report
    assert run.meta["num_failed"] == 1 and run.meta["num_incomplete"] == 0
    assert run.meta["engine"]["model"] == "Qwen/Qwen3-8B"
    metrics = with_request_metrics(r)
    assert metrics["tpot_s"].iloc[0] == pytest.approx(0.5 / 4)  # (0.75 - 0.25) / (5 - 1)


def test_guidellm_yaml_report_in_the_older_layout() -> None:
    r = read_guidellm(GUIDELLM_V02).requests
    assert column(r, "arrival_s") == [0.0, 0.5]
    assert column(r, "first_token_s") == [0.125, 0.625]
    assert column(r, "finish_s") == [0.375, 0.6875]
    assert r["num_output_tokens"].tolist() == [3, 2]


def test_guidellm_several_benchmarks_need_a_choice(tmp_path: Path) -> None:
    document = json.loads(GUIDELLM.read_text())
    second = json.loads(json.dumps(document["benchmarks"][0]))
    second["requests"]["successful"] = second["requests"]["successful"][:1]
    document["benchmarks"].append(second)
    path = write(tmp_path, document)
    with pytest.raises(ConfigError, match=r"2 benchmarks in this report; choose one with"):
        read_guidellm(path)
    assert len(read_guidellm(path, 1).requests) == 1
    assert len(import_run(path, "auto", benchmark=0).requests) == 3
    with pytest.raises(ConfigError, match=r"--benchmark 2 out of range 0\.\.1"):
        read_guidellm(path, 2)
    with pytest.raises(ConfigError, match="applies only to GuideLLM"):
        import_run(VLLM_BENCH, benchmark=0)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda r: r["info"]["timings"].pop("first_token_iteration"), "first_token_iteration"),
        (lambda r: r.pop("output_metrics"), "missing field output_tokens"),
        (lambda r: r["info"]["timings"].update(request_start=2e9), "times must not decrease"),
        (lambda r: r["input_metrics"].update(total_tokens=-3), "prompt_tokens must be a whole"),
    ],
)
def test_guidellm_bad_request_names_it(tmp_path: Path, edit: Any, message: str) -> None:
    document = json.loads(GUIDELLM.read_text())
    edit(document["benchmarks"][0]["requests"]["successful"][2])
    with pytest.raises(ConfigError, match=message) as error:
        read_guidellm(write(tmp_path, document))
    assert "benchmarks[0].requests.successful[2]" in str(error.value)


def test_guidellm_malformed_yaml_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "report.yaml"
    path.write_text("benchmarks:\n  - a: [1, 2\n")
    with pytest.raises(ConfigError, match=r"report.yaml, line \d+: not YAML"):
        read_guidellm(path)


# -- OTLP ----------------------------------------------------------------------------------------


def test_otlp_spans_place_the_engine_durations_on_the_span_clock() -> None:
    run = read_otlp(OTLP)
    r = run.requests
    assert len(r) == 3  # the FastAPI span has no TTFT attribute: skipped
    assert column(r, "arrival_s") == [0.0, 0.25, 1.0]
    assert column(r, "first_token_s") == [0.125, 0.5, 1.0625]  # arrival + TTFT
    assert column(r, "finish_s") == [0.5, 0.75, 1.25]  # arrival + e2e
    # first scheduled = first token - prefill; ready = that - queue time.
    assert column(r, "first_scheduled_s") == [0.0625, 0.375, 1.03125]
    assert column(r, "ready_s") == [0.0625, 0.3125, 1.03125]
    assert r["num_prompt_tokens"].tolist() == [100, 200, 50]
    assert r["num_output_tokens"].tolist() == [4, 3, 2]
    assert run.meta["engine"]["model"] == "meta-llama/Llama-3.1-8B-Instruct"


def test_otlp_one_document_and_bad_spans(tmp_path: Path) -> None:
    lines = [json.loads(line) for line in OTLP.read_text().splitlines()]
    assert len(read_otlp(write(tmp_path, lines[0], "one.json")).requests) == 2
    span = lines[0]["resourceSpans"][0]["scopeSpans"][0]["spans"][1]
    span["attributes"] = [a for a in span["attributes"] if a["key"] != "gen_ai.latency.e2e"]
    # Without e2e: finish = first token + decode time = 0.25 + 0.25 + 0.25.
    assert column(read_otlp(write(tmp_path, lines[0], "no_e2e.json")).requests, "finish_s")[
        1
    ] == pytest.approx(0.75)
    span["attributes"] = [a for a in span["attributes"] if "prompt" not in a["key"]]
    with pytest.raises(ConfigError, match=r"spans\[1\]: missing attribute gen_ai.usage.prompt"):
        read_otlp(write(tmp_path, lines[0], "bad.json"))
    (tmp_path / "broken.jsonl").write_text(OTLP.read_text().splitlines()[0] + "\n{oops\n")
    with pytest.raises(ConfigError, match=r"broken.jsonl, line 2: not JSON"):
        read_otlp(tmp_path / "broken.jsonl")
    with pytest.raises(ConfigError, match="no vLLM request spans"):
        read_otlp(write(tmp_path, {"resourceSpans": []}, "empty.json"))


# -- servesim folders, detection, the command -----------------------------------------------------


def measure_folder(folder: Path) -> Path:
    folder.mkdir()
    requests = pd.DataFrame(
        {
            "request_id": [1, 0],
            "arrival_s": [0.5, 0.0],
            "ready_s": [0.5, 0.0],
            "first_scheduled_s": [0.5, 0.0],
            "first_token_s": [0.75, 0.25],
            "finish_s": [np.nan, 1.0],
            "num_prompt_tokens": [8, 4],
            "num_output_tokens": [2, 3],
            "num_generated_tokens": [1, 3],
            "rejection_reason": [None, None],
        }
    )
    requests.to_parquet(folder / "requests.parquet")
    tokens = pd.DataFrame(
        {"request_id": [0, 0, 0], "token_index": [0, 1, 2], "time_s": [0.25, 0.5, 1.0]}
    )
    tokens.assign(token_id=[5, 6, 7]).to_parquet(folder / "tokens.parquet")
    (folder / "summary.json").write_text(json.dumps({"mode": "measured", "device_name": "cpu"}))
    return folder


def test_measure_folder_is_taken_as_it_is(tmp_path: Path) -> None:
    run = read_measure(measure_folder(tmp_path / "m"))
    assert run.requests["request_id"].tolist() == [0, 1]
    assert np.isnan(run.requests["finish_s"].iloc[1])  # unfinished stays unfinished
    assert run.tokens is not None and list(run.tokens.columns) == [
        "request_id",
        "token_index",
        "time_s",
    ]
    assert run.meta["engine"]["device_name"] == "cpu"


def test_detection_by_content_not_by_name(tmp_path: Path) -> None:
    for source, name in ((VLLM_BENCH, "vllm-bench"), (GUIDELLM, "guidellm"), (OTLP, "otlp")):
        renamed = tmp_path / f"data-{name}.txt"
        renamed.write_bytes(source.read_bytes())
        assert detect_format(renamed) == name
    assert detect_format(GUIDELLM_V02) == "guidellm"
    assert detect_format(measure_folder(tmp_path / "m")) == "measure"
    read_vllm_bench(VLLM_BENCH).write(tmp_path / "imported")
    assert detect_format(tmp_path / "imported") == "imported"
    (tmp_path / "other.json").write_text('{"hello": 1}')
    with pytest.raises(ConfigError, match="cannot tell its format") as error:
        detect_format(tmp_path / "other.json")
    assert all(name in str(error.value) for name in FORMATS)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="cannot tell its format"):
        detect_format(tmp_path / "empty")


def test_import_write_and_load_keep_the_chunks(tmp_path: Path) -> None:
    run = import_run(VLLM_BENCH)
    paths = run.write(tmp_path / "out")
    assert {p.name for p in paths} == {
        "requests.parquet",
        "trace.csv",
        "run.json",
        "tokens.parquet",
    }
    again = load_run(tmp_path / "out")
    pd.testing.assert_frame_equal(again.requests, run.requests)
    assert again.tokens is not None and run.tokens is not None
    pd.testing.assert_frame_equal(again.tokens, run.tokens)
    assert import_run(tmp_path / "out").meta["format"] == "vllm-bench"


@pytest.mark.parametrize("source", [VLLM_BENCH, GUIDELLM, GUIDELLM_V02, OTLP])
def test_cli_imports_every_format(
    source: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["import-run", str(source), "--format", "auto", "--out", str(tmp_path)]) == 0
    assert "imported" in capsys.readouterr().out
    trace = pd.read_csv(tmp_path / "trace.csv")
    assert trace["timestamp"].iloc[0] == 0.0 and trace["timestamp"].is_monotonic_increasing


def test_cli_unknown_content_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "x.json").write_text("[1, 2]")
    assert main(["import-run", str(tmp_path / "x.json"), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "vllm-bench, guidellm, otlp" in err


def test_a_summary_only_vllm_result_is_recognised_and_refused(tmp_path: Path) -> None:
    document = {k: v for k, v in vllm_doc().items() if k not in ("ttfts", "itls", "input_lens")}
    path = write(tmp_path, document)
    assert detect_format(path) == "vllm-bench"
    with pytest.raises(ConfigError, match=r"missing field input_lens \(save the run with --save"):
        import_run(path)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.floats(0, 100),  # send time
            st.floats(0.001, 2),  # ttft
            st.lists(st.floats(0, 0.5), max_size=6),  # itls
            st.integers(1, 4000),  # prompt
        ),
        min_size=1,
        max_size=12,
    )
)
def test_vllm_bench_times_are_consistent_for_any_run(rows: list[Any]) -> None:
    import tempfile

    document = {
        "start_times": [r[0] for r in rows],
        "ttfts": [r[1] for r in rows],
        "itls": [r[2] for r in rows],
        "input_lens": [r[3] for r in rows],
        "output_lens": [len(r[2]) + 1 for r in rows],
    }
    with tempfile.TemporaryDirectory() as folder:
        run = read_vllm_bench(write(Path(folder), document))
    r = run.requests
    assert r["arrival_s"].iloc[0] == 0.0 and r["arrival_s"].is_monotonic_increasing
    order = np.argsort([row[0] for row in rows], kind="stable")
    expected_ttft = np.asarray([rows[i][1] for i in order])
    assert (r["first_token_s"] - r["arrival_s"]).to_numpy() == pytest.approx(expected_ttft)
    expected_e2e = expected_ttft + np.asarray([sum(rows[i][2]) for i in order])
    assert (r["finish_s"] - r["arrival_s"]).to_numpy() == pytest.approx(expected_e2e)
    assert run.tokens is not None
    assert run.tokens.groupby("request_id").size().tolist() == r["num_output_tokens"].tolist()
    last = run.tokens.groupby("request_id")["time_s"].max().to_numpy()
    assert last == pytest.approx(r["finish_s"].to_numpy())
