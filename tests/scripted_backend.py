"""A scripted ``sim.serving.stream.OnlineBackend`` for the HTTP server's tests (no torch).

Request ``i`` is answered with ``max_tokens`` events of one token each: the
bytes of ``reply`` in turn (cycled), as the byte tokenizer's ids, so that the
text a client gets is known before the request is sent (``expected_text``).
By default every event is emitted at once, on the caller's thread, inside
``submit``; with ``trickle`` one event every few milliseconds from a thread,
until the request is aborted. Event ``j`` of a request of ``n`` prompt tokens
carries the engine timing ``scripted_timing(n, j)``.
"""

from __future__ import annotations

import threading

from sim.openai.tokenizer import NUM_SPECIAL
from sim.serving.stream import Emitted, EngineLoad, FinishReason, RequestTiming, Sink, Submission


def scripted_timing(num_prompt_tokens: int, event: int) -> RequestTiming:
    """The engine timing of a request's event ``event`` (0: its first token)."""
    return RequestTiming(
        queue_s=0.5,
        prefill_s=0.25,
        decode_s=0.125 * event,
        num_preemptions=1,
        num_prefix_query_tokens=num_prompt_tokens,
        num_prefix_hit_tokens=num_prompt_tokens // 2,
    )


class ScriptedBackend:
    """Answers each request from a script; records what it was asked."""

    def __init__(
        self, max_model_len_tokens: int = 64, trickle: bool = False, reply: bytes = b"abcdefgh"
    ) -> None:
        self.max_model_len_tokens = max_model_len_tokens
        self.error: BaseException | None = None
        self.submitted: list[tuple[list[int], int, bool]] = []
        self.received_s: list[float | None] = []  # what the server passed as receipt time
        self.priorities: list[int] = []  # what the server passed as each request's class
        self.aborted: list[int] = []
        self.trickle = trickle
        self.reply = reply
        self.reason: FinishReason = "length"
        self.engine_load = EngineLoad(0, 0, 0.0)
        self.started = False

    def expected_text(self, num_tokens: int) -> bytes:
        """The bytes of the first ``num_tokens`` tokens of a reply."""
        return bytes(self.reply[i % len(self.reply)] for i in range(num_tokens))

    def start(self) -> None:
        self.started = True

    def stop(self) -> None:
        self.started = False

    def load(self) -> EngineLoad:
        return self.engine_load

    def submit(self, submission: Submission) -> int:
        request_id = len(self.submitted)
        prompt_ids, max_tokens, sink = submission.prompt_ids, submission.max_tokens, submission.sink
        self.received_s.append(submission.received_s)
        self.priorities.append(submission.priority)
        self.submitted.append((list(prompt_ids), max_tokens, submission.ignore_eos))
        n = len(prompt_ids)
        if self.trickle:
            threading.Thread(target=self._trickle, args=(request_id, n, sink), daemon=True).start()
            return request_id
        for i in range(max_tokens):
            last = i == max_tokens - 1
            reason = self.reason if last else None
            sink(Emitted((self._token(i),), reason, n, i + 1, scripted_timing(n, i)))
        return request_id

    def _token(self, i: int) -> int:
        return self.reply[i % len(self.reply)] + NUM_SPECIAL

    def _trickle(self, request_id: int, num_prompt: int, sink: Sink) -> None:
        for i in range(2000):  # ~20 s at most: the test hangs up long before
            if request_id in self.aborted:
                return
            timing = scripted_timing(num_prompt, i)
            sink(Emitted((self._token(i),), None, num_prompt, i + 1, timing))
            threading.Event().wait(0.01)

    def abort(self, request_id: int) -> None:
        self.aborted.append(request_id)
