"""Test configuration: hypothesis is derandomized under CI; no figure outlives its test.

Property tests explore new random examples on every developer run (that is
how they find bugs), but CI must give the same verdict for the same commit:
with ``CI`` set, hypothesis derives its examples from each test's name.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pytest
from hypothesis import settings

settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")


@pytest.fixture(autouse=True)
def _no_prebuilt_figures_left() -> Iterator[None]:
    """Figures a test's import thread made up to their data (``prebuild``) stay in this
    process: dropped after each test, so that no later test draws on them. (Only
    where the drawing modules are loaded: this imports nothing.)"""
    yield
    module = sys.modules.get("sim.metrics.figure_draw")
    if module is not None:
        module._prebuilt.clear()
        module._prebuilt_waterfalls.clear()
