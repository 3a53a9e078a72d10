"""Hardware and models: what runs, and on what.

- ``specs``: model shapes (``ModelSpec``, also read from Hugging Face
  configs), GPUs (``HardwareSpec``), their presets (data: ``models.toml``,
  ``gpus.toml``), context-length limits, and how a scenario names them;
- ``model_names``: whether a run's or a profile's model name is the model priced
  (``same_model``: variants and aliases yes, other shapes or weight bytes no);
- ``kv_capacity``: the memory terms vLLM subtracts and the KV blocks left;
- ``quantization``: the ``quantization:`` section (bytes, never FLOP/s);
- ``parallel``: multi-GPU layouts (``parallelism:``), links (``links.toml``),
  KV per GPU.

Descriptions only: what a step costs on them is ``sim.cost``.

May import: ``sim.errors``. Must not import any other layer.
"""
