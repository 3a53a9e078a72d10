"""Session 13's audit of workloads, traces, scenario files and sweeps: what was silently
dropped or misread now takes effect or gets one line naming the file, field or flag."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from sim.cli import main
from sim.engine.request import Request
from sim.errors import ConfigError
from sim.planning.sweep import load_sweep, run_sweep
from sim.scenario import load_scenario
from sim.serving.router import PrefixAffinity, ReplicaLoad
from tests.cli_errors import one_line_error, run_error


def _run(folder: Path, scenario: str | Path, *args: str) -> Path:
    """``servesim run`` in-process into ``folder``; the folder."""
    argv = ["run", str(scenario), "--out", str(folder), "-q", "--figure-process", "no", *args]
    assert main(argv) == 0
    return folder


@pytest.mark.parametrize(
    ("scenario", "sets"),
    [
        ("scenarios/mooncake_trace.yaml", ["workload.max_requests=80"]),
        # All at once: the first arrival is at 0, as a replayed trace's (its window
        # starts at its first row), so every time in the records can agree to the bit.
        (
            "scenarios/prefix_caching.yaml",
            ["workload.num_requests=60", "workload.arrival.rate_per_s=.inf"],
        ),
        # A closed loop's groups, as its users drew them (sent at 0: no think time).
        ("scenarios/load_profiles.yaml", ["workload.num_requests=60"]),
        (  # the router reads the ids as it read the groups
            "scenarios/prefix_caching.yaml",
            [
                "workload.num_requests=60",
                "workload.arrival.rate_per_s=.inf",
                "cluster.num_replicas=3",
                "cluster.router=prefix_affinity",
            ],
        ),
    ],
)
def test_a_csv_trace_saved_from_shared_prefixes_replays_the_same_run(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, scenario: str, sets: list[str]
) -> None:
    # Before: --save-trace FILE.csv was refused for requests sharing prefixes (the csv
    # trace had no ids). Now it writes a hash_ids column and says how to replay it.
    trace = tmp_path / "trace.csv"
    set_args = [arg for value in sets for arg in ("--set", value)]
    first = _run(tmp_path / "first", scenario, *set_args, "--save-trace", str(trace))
    line = capsys.readouterr().out.splitlines()[-1]
    assert "replay it with its shared prefixes: workload: " in line, line
    workload = json.loads(line.split("workload: ", 1)[1])
    document = yaml.safe_load(Path(scenario).read_text())
    for value in sets:  # the run's other settings, as --set gave them
        key, raw = value.split("=", 1)
        if key.startswith("cluster."):
            document.setdefault("cluster", {})[key.split(".")[1]] = yaml.safe_load(raw)
    document["workload"] = workload
    replay = tmp_path / "replay.yaml"
    replay.write_text(yaml.safe_dump(document))
    second = _run(tmp_path / "second", replay)
    before = (first / "requests.parquet").read_bytes()
    assert (second / "requests.parquet").read_bytes() == before
    summaries = [json.loads((run / "summary.json").read_text()) for run in (first, second)]
    # The workload's own description (its rate) differs; every figure of the run agrees.
    differ = {key for key in summaries[0] if summaries[0][key] != summaries[1].get(key)}
    assert differ <= {"request_rate", "burstiness"}, differ
    assert summaries[0]["prefix_cache_hit_tokens"] > 0


@pytest.mark.parametrize("suffix", [".csv", ".jsonl"])
def test_save_trace_of_requests_with_priorities_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, suffix: str
) -> None:
    # Before: the trace was written with times and lengths only, and its replay ran
    # every request at one priority, silently.
    trace = tmp_path / f"t{suffix}"
    args = ["--set", "workload.num_requests=20", "--save-trace", str(trace)]
    message = run_error(capsys, tmp_path, "scenarios/priority.yaml", *args)
    assert message.startswith(f"--save-trace {trace}: the trace would drop"), message
    assert "workload.priority" in message, message
    assert not trace.exists()


def test_prefix_affinity_routes_a_trace_by_its_first_hash_id() -> None:
    # Before: a request with a trace's hash ids and no prefix group went to the least
    # loaded replica: a Mooncake replay behind router prefix_affinity ran as
    # least_outstanding_requests, silently (the same records to the bit).
    router = PrefixAffinity()
    loads = [ReplicaLoad() for _ in range(4)]
    chosen = set()
    for request_id, ids in enumerate([(7, 1), (7, 2, 3), (7,)]):
        request = Request(request_id, 0.0, 1024, 8)
        request.block_hash_ids, request.block_hash_tokens = ids, 512
        index = router.choose(request, loads)
        loads[index].num_requests += 1  # the least loaded changes each time
        chosen.add(index)
    assert len(chosen) == 1


def test_hash_block_tokens_without_a_hash_ids_column_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # Before: the csv trace was replayed sharing nothing, hash_block_tokens unread.
    (tmp_path / "t.csv").write_text("timestamp,prompt_tokens,output_tokens\n0,100,10\n")
    scenario = tmp_path / "t.yaml"
    scenario.write_text(
        "name: t\ncost: {kind: roofline}\n"
        "workload: {kind: trace, format: csv, path: t.csv, hash_block_tokens: 64}\n"
    )
    message = run_error(capsys, tmp_path, str(scenario))
    assert message.startswith(f"{scenario}: workload"), message
    assert "hash_block_tokens" in message and "hash_ids_column" in message, message


def test_a_set_section_after_a_key_inside_it_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # Before: the section replaced the earlier key's section whole: its rate 50 was
    # dropped, silently (the run went at 10 per second).
    sets = ["workload.arrival.rate_per_s=50", "workload.arrival={kind: poisson, rate_per_s: 10}"]
    args = [arg for value in ["workload.num_requests=5", *sets] for arg in ("--set", value)]
    message = run_error(capsys, tmp_path, "scenarios/chat.yaml", *args)
    assert message == (
        "--set workload.arrival.rate_per_s: given twice, 'workload.arrival.rate_per_s=50' and "
        "'workload.arrival={kind: poisson, rate_per_s: 10}'; give one"
    )


def test_a_set_key_inside_a_section_set_before_it_changes_it(tmp_path: Path) -> None:
    # (A section holding the key too gives it twice: test_bad_inputs_s13_overrides.)
    sets = ["workload.num_requests=5", "workload.arrival={kind: poisson}"]
    sets.append("workload.arrival.rate_per_s=50")
    out = _run(tmp_path / "out", "scenarios/chat.yaml", *[a for v in sets for a in ("--set", v)])
    assert json.loads((out / "summary.json").read_text())["request_rate"] == 50.0


def _sweep(tmp_path: Path, **fields: object) -> Path:
    workload = {
        "kind": "synthetic",
        "num_requests": 5,
        "arrival": {"kind": "poisson", "rate_per_s": 2.0},
        "prompt_tokens": {"kind": "fixed", "tokens": 100},
        "output_tokens": {"kind": "fixed", "tokens": 10},
    }
    base = {"name": "base", "cost": {"kind": "roofline"}, "workload": workload}
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(base))
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump({"scenario": "base.yaml", **fields}, sort_keys=False))
    return path


ARRIVALS = [{"kind": "poisson", "rate_per_s": 1.0}, {"kind": "gamma", "rate_per_s": 1.0}]


@pytest.mark.parametrize(
    ("fields", "start"),
    [
        (
            {
                "overrides": {"workload.arrival.rate_per_s": 3.0},
                "grid": {"workload.arrival": ARRIVALS},
            },
            "overrides and grid both set workload.arrival.rate_per_s (in workload.arrival)",
        ),
        (
            {
                "points": [{"workload.arrival.rate_per_s": 3.0}],
                "grid": {"workload.arrival": ARRIVALS},
            },
            "points[0] and grid both set workload.arrival.rate_per_s (in workload.arrival)",
        ),
        (
            {
                "overrides": {"workload.arrival.rate_per_s": 3.0},
                "points": [{"workload.arrival": a} for a in ARRIVALS],
            },
            "overrides and every point both set workload.arrival.rate_per_s",
        ),
    ],
)
def test_a_sweep_key_a_later_section_replaces_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, fields: dict[str, object], start: str
) -> None:
    # Before: only the same key was refused; a section set after it (the grid after
    # the points and overrides, a point after the overrides) dropped it, silently.
    sweep = _sweep(tmp_path, **fields)
    message = one_line_error(capsys, ["sweep", str(sweep), "--out", str(tmp_path / "o"), "-q"])
    assert message.startswith(f"{sweep}: {start}"), message


def test_a_sweep_runs_again_when_a_file_its_scenario_names_is_edited(tmp_path: Path) -> None:
    # Before: the cache key covered the scenario's text, not its trace's rows: an edited
    # trace gave the old trace's results from the cache, silently.
    trace = tmp_path / "t.csv"
    trace.write_text("timestamp,prompt_tokens,output_tokens\n0,100,10\n0.1,200,20\n")
    workload = {"kind": "trace", "format": "csv", "path": "t.csv"}
    (tmp_path / "base.yaml").write_text(
        yaml.safe_dump({"name": "base", "cost": {"kind": "roofline"}, "workload": workload})
    )
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(
        yaml.safe_dump({"scenario": "base.yaml", "grid": {"workload.time_scale": [1.0]}})
    )
    first = run_sweep(load_sweep(sweep), tmp_path / "o", jobs=1)
    assert run_sweep(load_sweep(sweep), tmp_path / "o", jobs=1).num_cached == 1
    trace.write_text(trace.read_text() + "0.2,300,30\n")
    again = run_sweep(load_sweep(sweep), tmp_path / "o", jobs=1)
    assert again.num_computed == 1
    assert again.table["completed"].tolist() == [first.table["completed"].iloc[0] + 1]


@pytest.mark.parametrize(
    ("sets", "key"),
    [
        (["workload.num_users=3"], "num_users"),  # concurrent's streams: 8
        (["workload.think_time_s={kind: fixed, value_s: 2.0}"], "think_time_s"),
        (
            [
                "workload={profile: constant, rate_per_s: 5, num_requests: 5, arrival: "
                "{kind: poisson, rate_per_s: 50}, prompt_tokens: {kind: fixed, tokens: 8}, "
                "output_tokens: {kind: fixed, tokens: 8}}"
            ],
            "arrival",
        ),
    ],
)
def test_a_workload_key_its_profile_sets_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, sets: list[str], key: str
) -> None:
    # Before: the key replaced the profile's own (8 streams ran as 3 users; constant at
    # 5 per second ran as Poisson at 50), silently.
    args = [arg for value in sets for arg in ("--set", value)]
    message = run_error(capsys, tmp_path, "scenarios/load_profiles.yaml", *args)
    assert message.startswith("scenarios/load_profiles.yaml: workload: "), message
    assert f"{key} is profile " in message, message


def test_a_save_file_over_a_file_the_scenario_reads_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # Before: --save-trace wrote servesim's csv over the Azure trace the run replayed
    # (its ISO timestamps and column names lost), without a word.
    text = "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,374,44\n"
    trace = tmp_path / "azure.csv"
    trace.write_text(text)
    scenario = tmp_path / "t.yaml"
    scenario.write_text(
        "name: t\ncost: {kind: roofline}\nworkload: {kind: trace, path: azure.csv}\n"
    )
    message = run_error(capsys, tmp_path, str(scenario), "--save-trace", str(trace))
    assert message == f"--save-trace {trace}: is a file the scenario reads; give another file"
    assert trace.read_text() == text


@pytest.mark.parametrize(
    "overrides",
    [
        {"workload.num_requests": 5, "workload": {"num_requests": 7}},
        {"workload.arrival.rate_per_s": 5, "workload.arrival": {"rate_per_s": 9}},
    ],
)
def test_an_overrides_mapping_setting_a_key_twice_is_refused(overrides: dict[str, object]) -> None:
    # Before: the second spelling won (7 requests, 9 per second), the first dropped.
    with pytest.raises(
        ConfigError, match=r"^scenarios/chat.yaml: overrides: workload\.\S+ given twice"
    ):
        load_scenario("scenarios/chat.yaml", overrides)


def test_a_sweep_override_of_the_seed_beside_a_seed_list_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # Before: the runs took the list's seeds 1 and 2; the overrides' 5 was no run's.
    sweep = _sweep(tmp_path, overrides={"seed": 5}, seeds=[1, 2], points=[{}])
    message = one_line_error(capsys, ["sweep", str(sweep), "--out", str(tmp_path / "o"), "-q"])
    assert message.startswith(f"{sweep}: overrides: seed is set by the sweep's seeds"), message
