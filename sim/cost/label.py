"""What a cost model's label says of its step times: measured or a guess, in words.

A label (``CostModel.label``) is what every report of a run keeps (summary.json's
``cost_model``, a sweep's column); ``cost_model_tag`` reads it into the words a reader
must see, one way for every face: a figure's caption, ``servesim serve``'s first line,
``servesim plan``'s cost model column.
"""

from __future__ import annotations

import re

# What each cost model's label (``CostModel.label``) starts with, and how a face
# names it: a reader must tell a measurement from a guess at a glance.
_ROOFLINE_TAG = "roofline (guess: uncalibrated)"
_LINEAR_TAG = "linear (coefficients set by hand)"
_FITTED_TAG = "fitted to measured runs"
# Suffixes of the wrappers: the engine's CPU estimate (dropped: every GPU model of a
# vLLM scenario has it) and a scaled model's factor (kept: it changes every time).
_ENGINE_CPU = " + engine CPU ("
_SCALED = re.compile(r" x(?P<factor>[0-9.]+)$")
# A kernel-table label: ``kernels:<arch>@<gpu><layout> (<source>[; <kernel>...])[ [ablations]]``.
_KERNELS = re.compile(
    r"^kernels:[^@]+@(?P<gpu>\S+?)(?:x\d+\(tp\d+,pp\d+\))?(?:\(ep\d+\))? \((?P<source>[^;)]+)"
)
_CALIBRATED = re.compile(
    r"^calibrated:[^@]+@(?P<device>[^\[]+?)(?: \(extrapolated\))?(?: \[.*\])?$"
)


def cost_model_tag(label: str) -> str:
    """A cost model's label as every face says it: what priced the steps, and whether
    that was measured (kernel tables name their source and GPU, and whether some rows
    are derived or an estimate carried over from another GPU; a calibrated curve its
    device) or a guess (the uncalibrated roofline)."""
    scaled = _SCALED.search(label)
    suffix = ""
    if scaled is not None:
        label, suffix = label[: scaled.start()], f", steps x{scaled.group('factor')}"
    base = label.split(_ENGINE_CPU, 1)[0].strip()
    if base.startswith("roofline:"):
        tag = _ROOFLINE_TAG
    elif base.startswith("fitted(") or " (fit on " in base:
        tag = _FITTED_TAG
    elif base == "linear":
        tag = _LINEAR_TAG
    elif (kernels := _KERNELS.match(base)) is not None:
        # Rows derived from another head layout's are named in the label's parentheses
        # (KernelCost.label, the phrase of tables.attention_grids): not all measured.
        # An estimate carried over from another GPU (mixed_factor.transferred_factor's
        # "transferred estimate") is named too: a reader must not take it as measured.
        how = ", ".join(
            ["measured"]
            + ["partly derived"] * (" derived from " in base)
            + ["partly estimated"] * ("estimate" in base)
        )
        tag = f"kernel tables ({how}: {kernels.group('source')}, {kernels.group('gpu')})"
        if base.endswith("]"):  # some operators left out on purpose
            tag += " " + base[base.rindex("[") :].replace("[", "[ablated: ")
    elif (calibrated := _CALIBRATED.match(base)) is not None:
        how = "extrapolated from a measurement" if "(extrapolated)" in base else "measured"
        tag = f"calibrated ({how}: {calibrated.group('device').strip()})"
    else:
        tag = base or "unknown cost model"
    return tag + suffix
