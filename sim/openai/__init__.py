"""``servesim serve``'s face: vLLM's OpenAI-compatible HTTP server over an online engine.

A face, like ``sim.cli``: it may import ``sim.serving.stream`` (the engine
interface), ``sim.scenario`` and ``sim.errors``, and no torch. Modules:
``server`` (the aiohttp routes), ``protocol`` (the pydantic requests and
answers, vLLM's error body), ``tokenizer`` (the byte tokenizer),
``detokenize`` (token ids to text as they stream, stop strings), ``metrics``
(``/metrics`` in Prometheus format, vLLM's names).
"""
