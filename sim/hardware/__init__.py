"""Hardware and models: what runs, and on what.

GPU specs and presets (``gpus``, ``gpu_presets``), model shapes and their
presets and Hugging Face configs (``model_spec``, ``model_configs``,
``architecture``, ``specs``: the config form naming either), memory and KV
sizing (``memory``, ``kv_capacity``), quantization, parallel layouts
(``parallel``) and context-length limits. Descriptions only: what a step
costs on them is ``sim.cost``.

May import: ``sim.errors``. Must not import any other layer.
"""
