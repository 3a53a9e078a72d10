"""A run's files are written all or nothing (``sim.metrics.out_path.staged``).

Ctrl-C while files are written once left a truncated timeseries.csv beside a
complete summary.json, with no mark that the folder was incomplete (issue 30).
"""

from __future__ import annotations

from pathlib import Path

import pytest

import sim.api.result
from sim import api
from sim.metrics.out_path import staged, unstaged
from sim.scenario import scenario_from_dict

DOC = {
    "model": "tiny",
    "hardware": "cpu-2core",
    "cost": {"kind": "linear", "per_prefill_seq_s": 0.01, "per_decode_seq_s": 0.01},
    "workload": {
        "kind": "synthetic",
        "num_requests": 5,
        "arrival": {"kind": "poisson", "rate_per_s": 1.0},
        "prompt_tokens": {"kind": "fixed", "tokens": 8},
        "output_tokens": {"kind": "fixed", "tokens": 4},
    },
}


def test_a_written_run_lands_whole_and_leaves_no_staging_folder(tmp_path: Path) -> None:
    result = api.run(scenario_from_dict(DOC))
    paths = result.write(tmp_path / "out", trace=True)
    assert all(p.parent == tmp_path / "out" and p.is_file() for p in paths)
    assert {p.name for p in (tmp_path / "out").iterdir()} == {p.name for p in paths}
    assert "summary.json" in {p.name for p in paths} and "trace.json" in {p.name for p in paths}


def test_an_interrupted_write_leaves_the_folder_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "summary.json").write_text("an earlier run's\n")
    result = api.run(scenario_from_dict(DOC))

    def interrupted(*args: object, **kwargs: object) -> Path:
        raise KeyboardInterrupt  # Ctrl-C after the tables and summary were written

    monkeypatch.setattr(sim.api.result, "write_trace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        result.write(out, trace=True)
    # Nothing new moved in, the earlier summary untouched, no staging folder left.
    assert [p.name for p in out.iterdir()] == ["summary.json"]
    assert (out / "summary.json").read_text() == "an earlier run's\n"


def test_staged_moves_nested_files_and_the_summary_last(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    moved: list[str] = []
    real_replace = sim.metrics.out_path.os.replace

    def record(src: str | Path, dst: str | Path) -> None:
        moved.append(Path(dst).name)
        real_replace(src, dst)

    monkeypatch.setattr(sim.metrics.out_path.os, "replace", record)
    out = tmp_path / "out"
    with staged(out) as stage:
        written = []
        for name in ("summary.json", "a.csv", "z.png", "sub/b.txt"):
            path = stage / name
            path.parent.mkdir(exist_ok=True)
            path.write_text(name)
            written.append(path)
    assert moved[-1] == "summary.json" and sorted(moved) == [
        "a.csv",
        "b.txt",
        "summary.json",
        "z.png",
    ]
    finals = unstaged(written, stage, out)
    assert [p.read_text() for p in finals] == ["summary.json", "a.csv", "z.png", "sub/b.txt"]
    assert sorted(p.name for p in out.iterdir()) == ["a.csv", "sub", "summary.json", "z.png"]
