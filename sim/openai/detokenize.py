"""Token ids to text as they stream: whole UTF-8 characters only, and stop strings.

With a byte tokenizer a character of two to four bytes may span engine steps:
the bytes of an unfinished character are kept until its last byte arrives
(invalid bytes still become U+FFFD at once).

Stop strings are checked as vLLM's detokenizer checks them: on the text so far,
from where a stop string ending in the new text could start. A match ends the
request, the text cut before the stop string (or after it with
``include_stop_str_in_output``). While streaming without it, the last
``len(longest stop string) - 1`` characters are held back: they could start a
stop string the next token completes.
"""

from __future__ import annotations

import codecs
from collections.abc import Sequence
from dataclasses import dataclass

from sim.openai.tokenizer import ByteTokenizer


@dataclass(frozen=True, slots=True)
class Delta:
    """What one push adds: the text to send now, and the stop string matched, if any."""

    text: str
    stop: str | None


class IncrementalDetokenizer:
    """One generation's text, built token by token."""

    def __init__(
        self, tokenizer: ByteTokenizer, stop: Sequence[str] = (), include_stop: bool = False
    ) -> None:
        self._tokenizer = tokenizer
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._stop = tuple(stop)
        self._include_stop = include_stop
        # Characters from where a stop string could still be completed.
        self._search_back_chars = max((len(s) for s in self._stop), default=1) - 1
        # Never sent early, unless a stop string is sent too (nothing to take back then).
        self._hold_chars = 0 if include_stop else self._search_back_chars
        self.text = ""  # the whole output so far (cut before a matched stop string)
        self._num_sent_chars = 0
        self.stopped: str | None = None

    def push(self, token_ids: Sequence[int], final: bool) -> Delta:
        """Add ``token_ids``; ``final`` when the request ends with them (flush everything)."""
        if self.stopped is not None:
            return Delta("", None)  # tokens the engine made before it heard of the stop
        new = self._decoder.decode(self._tokenizer.to_bytes(token_ids), final)
        start = max(0, len(self.text) - self._search_back_chars)
        self.text += new
        if new and self._stop:
            found = [(i, s) for s in self._stop if (i := self.text.find(s, start)) >= 0]
            if found:
                index, self.stopped = min(found)
                self.text = self.text[: index + (len(self.stopped) if self._include_stop else 0)]
                final = True
        end = len(self.text) if final else max(0, len(self.text) - self._hold_chars)
        end = max(end, self._num_sent_chars)
        delta = self.text[self._num_sent_chars : end]
        self._num_sent_chars = end
        return Delta(delta, self.stopped)
