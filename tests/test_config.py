"""``sim.config``: the frozen base of every configuration section, and ``anchored``,
how a path a configuration file names is read."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from sim.config import Frozen, anchored
from sim.hardware.specs import HardwareSpec
from sim.workload.lengths import FixedLength


class _Section(Frozen):
    tokens: int


def test_a_section_refuses_an_unknown_key() -> None:
    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
        _Section.model_validate({"tokens": 1, "tokenz": 2})


def test_a_section_never_changes_once_built() -> None:
    section = _Section(tokens=1)
    with pytest.raises(ValidationError, match="frozen"):
        section.tokens = 2
    assert section.tokens == 1
    assert hash(section) == hash(_Section(tokens=1))  # frozen: usable as a key


@pytest.mark.parametrize("section", [FixedLength, HardwareSpec])
def test_sections_of_every_layer_share_the_one_base(section: type[Frozen]) -> None:
    assert issubclass(section, Frozen)
    assert section.model_config["extra"] == "forbid" and section.model_config["frozen"]


def test_anchored() -> None:
    # Moved from test_lengths (its resolve_path, now this one function).
    assert anchored("a/b.csv", "/base") == Path("/base/a/b.csv")
    assert anchored("/abs/b.csv", "/base") == Path("/abs/b.csv")
    assert anchored("b.csv", None) == Path("b.csv")


def test_anchored_expands_the_home_folder_before_anchoring(tmp_path: Path) -> None:
    home = Path("~").expanduser()
    assert anchored("~/a.csv", tmp_path) == home / "a.csv"
    assert anchored(Path("sub") / "a.csv", str(tmp_path)) == tmp_path / "sub" / "a.csv"
