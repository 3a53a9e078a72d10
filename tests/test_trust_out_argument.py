"""``--out ""`` names no place: refused when the line is parsed (issue 39's new-user round).

``Path("")`` is the current folder and ``args.out or default`` read an empty value
as "not given", so ``servesim run X --out ""`` silently wrote to ``runs/<name>``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sim.cli import main

ROOT = Path(__file__).resolve().parent.parent
CHAT = str(ROOT / "scenarios" / "chat.yaml")
SWEEP = str(ROOT / "scenarios" / "sweep_chat.yaml")

COMMANDS = [
    ["run", CHAT],
    ["capacity", CHAT, "--slo", "ttft_p99_ms=500"],
    ["plan", CHAT, "--slo", "ttft_p99_ms=500", "--target-rate", "10"],
    ["sweep", SWEEP],
    ["calibrate", "--model", "tiny"],
]


@pytest.mark.parametrize("argv", COMMANDS, ids=[c[0] for c in COMMANDS])
@pytest.mark.parametrize("empty", ["", "  "])
def test_an_empty_out_is_refused_before_any_work(
    argv: list[str],
    empty: str,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)  # the default (runs/...) would land here: nothing may
    with pytest.raises(SystemExit) as exit_:
        main([*argv, "--out", empty])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "--out" in err and "empty path" in err and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []
