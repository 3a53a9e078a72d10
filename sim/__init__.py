"""servesim: a discrete-event simulator of the LLM inference request lifecycle."""

__version__ = "0.1.0"
