"""``servesim import-profile`` and ``export-kernels``: handed to sim.cost.kernels' own parsers."""

from __future__ import annotations

from pathlib import Path

import pytest

from sim.cli import FORWARDED, build_parser, main
from sim.cost.kernels.artifact import load_kernel_artifact

PROFILE = Path(__file__).resolve().parent / "data" / "kernels" / "profile" / "bf16" / "tp1"


def test_help_lists_the_forwarded_commands(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(["--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    for name in FORWARDED:
        assert name in out


def test_import_profile_runs_through_servesim(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "profile.json.gz"
    assert main(["import-profile", str(PROFILE), "--out", str(out)]) == 0
    assert f"wrote {out}" in capsys.readouterr().out
    assert load_kernel_artifact(out).has("layer_ops")


def test_the_forwarded_parser_answers_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["import-profile", "--help"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.startswith("usage: servesim import-profile")


def test_errors_are_one_line_with_the_servesim_prefix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["import-profile", str(tmp_path), "--out", str(tmp_path / "x.json")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("servesim: error: ") and err.count("\n") == 1
    args = ["export-kernels", "nope", "no-such-model", "--out", str(tmp_path / "y.json")]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("servesim: error: ") and "no-such-model" in err
