"""Test configuration: hypothesis is derandomized under CI.

Property tests explore new random examples on every developer run (that is
how they find bugs), but CI must give the same verdict for the same commit:
with ``CI`` set, hypothesis derives its examples from each test's name.
"""

from __future__ import annotations

import os

from hypothesis import settings

settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")
