"""A closed loop over given requests: a measured run replayed at its own concurrency.

GuideLLM's ``synchronous`` and ``concurrent`` runs send each request when an earlier
one is answered: their send times are the server's pace, not a schedule (replayed
open-loop, 37 of a synchronous run's 40 requests overlapped on a faster simulated
server). This replays them as made: ``num_users`` streams without think time, request
``i`` with the ``i``-th lengths and prefix.
"""

from __future__ import annotations

from sim.config import IntArray


class ListedClosedLoop:
    """``num_users`` streams sending the given requests back to back, in order."""

    def __init__(
        self,
        num_users: int,
        num_prompt_tokens: IntArray,
        num_output_tokens: IntArray,
        prefix_group: IntArray | None = None,
        num_shared_prefix_tokens: IntArray | None = None,
    ) -> None:
        if num_users < 1:
            raise ValueError(f"ListedClosedLoop: num_users must be >= 1, got {num_users}")
        if len(num_prompt_tokens) != len(num_output_tokens) or len(num_prompt_tokens) == 0:
            raise ValueError("ListedClosedLoop: one prompt and one output length per request")
        if (prefix_group is None) != (num_shared_prefix_tokens is None):
            raise ValueError("ListedClosedLoop: give both prefix arrays or neither")
        self.num_users = num_users
        self.num_requests = len(num_prompt_tokens)
        self._lengths = zip(num_prompt_tokens.tolist(), num_output_tokens.tolist(), strict=True)
        self._prefixes = None
        if prefix_group is not None and num_shared_prefix_tokens is not None:
            self._prefixes = zip(
                prefix_group.tolist(), num_shared_prefix_tokens.tolist(), strict=True
            )

    def next_lengths(self) -> tuple[int, int]:
        """``(num_prompt_tokens, num_output_tokens)`` of the next request."""
        return next(self._lengths)

    def next_prefix(self) -> tuple[int, int] | None:
        """``(prefix_group, num_shared_prefix_tokens)`` of the next request, or None."""
        return None if self._prefixes is None else next(self._prefixes)

    def next_think_s(self) -> float:
        """No think time: a stream sends its next request as the last is answered."""
        return 0.0
