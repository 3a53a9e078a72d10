"""A byte-level tokenizer.

No real tokenizer ships offline for the random-weight calibration models, so
``servesim serve`` and the reference engine tokenize with bytes: UTF-8 byte ``b``
is id ``b + NUM_SPECIAL``. That costs real CPU time per token (part of what a
measured run measures), and ``n`` ASCII characters are exactly ``n`` tokens. Ids
past the bytes are folded into printable ASCII when detokenizing, so a random
model streams one character per token. The text is meaningless, the work is real.
"""

from __future__ import annotations

from collections.abc import Iterable

from sim.errors import ConfigError

NUM_SPECIAL = 3  # 0 = padding, 1 = beginning of sequence, 2 = end of sequence
_FIRST_FOLDED = NUM_SPECIAL + 256  # ids from here on stand for no byte: folded into ASCII
_PRINTABLE = 0x7F - 0x20  # the printable ASCII characters, space to tilde


class ByteTokenizer:
    """UTF-8 bytes as token ids; decoding folds unknown ids into bytes.

    ``vocab_size``: the served model's (``model.vocab_size``; default: the byte ids
    alone); a prompt of token ids outside it is refused, as vLLM refuses one.
    """

    num_special = NUM_SPECIAL

    def __init__(self, vocab_size: int = _FIRST_FOLDED) -> None:
        if vocab_size < _FIRST_FOLDED:
            raise ConfigError(
                f"model.vocab_size {vocab_size}: servesim serve's byte tokenizer needs "
                f"at least {_FIRST_FOLDED} ids (256 bytes and {NUM_SPECIAL} special ids)"
            )
        self.vocab_size = vocab_size

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``: one per UTF-8 byte."""
        offset = NUM_SPECIAL
        return [b + offset for b in text.encode("utf-8")]

    def to_bytes(self, token_ids: Iterable[int]) -> bytes:
        """The bytes ``token_ids`` stand for (special ids none; ids past the bytes one ASCII)."""
        return bytes(
            t - NUM_SPECIAL if t < _FIRST_FOLDED else 0x20 + (t - _FIRST_FOLDED) % _PRINTABLE
            for t in token_ids
            if t >= NUM_SPECIAL
        )

    def decode(self, token_ids: Iterable[int]) -> str:
        """Text of ``token_ids`` (special ids dropped, invalid UTF-8 replaced)."""
        return self.to_bytes(token_ids).decode("utf-8", errors="replace")
