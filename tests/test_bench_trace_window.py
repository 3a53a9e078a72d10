"""benchmarks/trace_window.py runs end to end on a small run (not timed: it prints a ratio)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import trace_window


def test_both_paths_give_the_same_trace(capsys: pytest.CaptureFixture[str]) -> None:
    assert trace_window.main(["--num-requests", "400", "--traced", "20"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("400 requests, ")
    assert out[1].startswith("compact log:") and out[2].startswith("expanded log:")
    assert out[3].endswith("same document: True")
