"""Which hardware preset a device name is: one rule for a measured run's device
(``sim.validation``) and a calibration artifact's (``sim.cost.config``)."""

from __future__ import annotations

import re

from sim.hardware.specs import HARDWARE_PRESETS, HardwareSpec

# A card's form factor or edition, where its name states it. An NVL or a Max-Q card
# is a part of its own (an H200 NVL is no h200), the preset of a name without one
# only where the preset's name says so.
_FORMS = ("sxm", "pcie", "nvl", "maxq")
_OWN_PARTS = ("nvl", "maxq")


def _form(words: list[str]) -> str | None:
    return next((form for word in words for form in _FORMS if word.startswith(form)), None)


def _core(preset: str) -> str:
    """A preset's GPU name without memory size or form factor: a100-80gb -> a100."""
    return re.sub(r"[^a-z0-9]", "", re.sub(r"-(\d+gb|sxm\d*|pcie)$", "", preset))


def _preset_form(preset: str) -> str | None:
    return _form(preset.split("-")[1:])


def hardware_matches(device: str, hardware: HardwareSpec) -> bool:
    """Whether a recorded device name is the hardware preset (``NVIDIA GeForce RTX 4090``
    is ``rtx-4090``; ``cpu`` is any ``cpu-*`` preset; the preset's own name, as
    ``validate --assume-device`` may give it, is the preset). The preset's GPU name
    must be whole words of the device's (an ``NVIDIA L40S`` is no ``l4``, a ``GH200``
    no ``h200``), a memory size both state must agree (an ``A100-SXM4-80GB`` is no
    ``a100-40gb``), and so must a form factor (an ``H100 PCIe`` is no ``h100-sxm``; an
    H100 naming its HBM3 and no form, ``NVIDIA H100 80GB HBM3``, is the SXM part, no
    ``h100-pcie``). A preset not naming a form is the plain part, the SXM where there
    are others: a device of a form with a preset of its own (``h100-pcie``), or an NVL
    or Max-Q card, is only a preset that names it."""
    if device == hardware.name:
        return True
    if hardware.name.startswith("cpu"):
        return device == "cpu"
    if device == "cpu":
        return False
    core = _core(hardware.name)
    words = re.findall(r"[a-z0-9]+", device.lower().replace("max-q", "maxq"))
    runs = {"".join(words[i:j]) for i in range(len(words)) for j in range(i + 1, len(words) + 1)}
    if core not in runs:
        return False
    stated_gb = {int(word[:-2]) for word in words if re.fullmatch(r"\d+gb", word)}
    if stated_gb and round(hardware.memory_bytes / 1e9) not in stated_gb:
        return False
    # HBM3 is the SXM H100's memory (the PCIe card's is HBM2e, the NVL names itself).
    form = _form(words) or ("sxm" if any(word.startswith("hbm3") for word in words) else None)
    preset_form = _preset_form(hardware.name)
    if preset_form is None:  # the plain part: h100 is the SXM, as h100-sxm, no h100-pcie
        return form not in _OWN_PARTS and not any(
            form not in (None, "sxm") and _core(name) == core and _preset_form(name) == form
            for name in HARDWARE_PRESETS
        )
    return form is None or form == preset_form
