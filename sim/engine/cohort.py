"""The decode cohort: steady decoders advanced in aggregate, not one by one.

A request that has caught up with its tokens, emitted one in the last step and
grows its KV blocks by counts only (``BlockPool.grows_by_count``) changes in
the same way every step: one more computed and generated token, and a new
block every ``block_size_tokens`` steps. So the continuous policy and the
commit need not visit it each step. The cohort keeps such requests with
aggregates instead:

- their number and the sum of ``computed - step`` over them, so the summed
  context at any step is one multiplication away;
- how many are at each block phase (``computed - step`` modulo the block
  size): the requests that cross into a new block at step ``t`` are those of
  phase ``-t`` modulo the block size;
- the step at which each emits its last token, in a heap.

A member's counters (``num_computed_tokens``, ``num_generated_tokens``,
``num_blocks``, ``last_token_step``, ``last_token_s``) are left as they were
when it joined, at step ``request.cohort_step``, and are brought up to date
(``catch_up``) when it leaves: it finishes, or the policy needs every request
as itself (a preemption, a budget that runs short; ``dissolve``). Plans and
commits therefore cost O(requests that change), not O(batch).

This is a second path beside the per-request one, which stays the reference:
the replica switches it on only for plain continuous batching in skip-ahead
mode, and tests require byte-identical results with it on and off.
"""

from __future__ import annotations

import heapq

from sim.engine.kv_pool import BlockPool
from sim.engine.request import Request


class Cohort:
    """Steady decoders of one engine core (see the module's docstring)."""

    __slots__ = (
        "_by_phase",
        "_finish_steps",
        "_finishing",
        "block_size_tokens",
        "num_members",
        "offset_sum",
    )

    def __init__(self, block_size_tokens: int) -> None:
        self.block_size_tokens = block_size_tokens
        self.num_members = 0
        # Sum over members of (computed tokens - step): the summed context at step
        # t is offset_sum + num_members * t.
        self.offset_sum = 0
        self._by_phase = [0] * block_size_tokens  # members by (computed - step) mod block size
        self._finishing: dict[int, list[Request]] = {}  # step of the last token -> members
        self._finish_steps: list[int] = []  # heap of the keys of _finishing

    # -- membership ---------------------------------------------------------
    def join(self, request: Request, step: int) -> None:
        """Take in ``request``, whose counters are up to date before ``step``."""
        request.cohort_step = step
        offset = request.num_computed_tokens - step
        self.num_members += 1
        self.offset_sum += offset
        self._by_phase[offset % self.block_size_tokens] += 1
        last = step + request.num_output_tokens - request.num_generated_tokens - 1
        finishing = self._finishing.get(last)
        if finishing is None:
            self._finishing[last] = [request]
            heapq.heappush(self._finish_steps, last)
        else:
            finishing.append(request)

    def catch_up(self, request: Request, step: int, last_end_s: float) -> None:
        """Bring a member's counters up to date before ``step`` (the previous step
        ended at ``last_end_s``) and let it go; the caller removes it from the
        finishing table (``leave_finishing``) or clears the cohort (``dissolve``)."""
        joined = request.cohort_step
        assert joined is not None, "not a member"
        request.cohort_step = None
        offset = request.num_computed_tokens - joined
        self.num_members -= 1
        self.offset_sum -= offset
        self._by_phase[offset % self.block_size_tokens] -= 1
        done = step - joined
        if done:
            computed = request.num_computed_tokens + done
            request.num_computed_tokens = computed
            request.num_generated_tokens += done
            request.num_blocks = -(-computed // self.block_size_tokens)
            request.last_token_step = step - 1
            request.last_token_s = last_end_s

    def join_steady(self, scheduled: list[tuple[Request, int]], kv: BlockPool, step: int) -> None:
        """Take in the steady decoders among a committed step's listed requests;
        ``step`` is the next step, the one they would decode in."""
        last = step - 1
        block_size = self.block_size_tokens
        for request, _ in scheduled:
            computed = request.num_computed_tokens
            if (
                request.last_token_step == last
                and request.finish_s is None
                and computed + 1 == request.num_prompt_tokens + request.num_generated_tokens
                and request.num_blocks == -(-computed // block_size)
                and kv.grows_by_count(request)
            ):
                self.join(request, step)

    def leave_finishing(self, step: int, running: list[Request], end_s: float) -> list[Request]:
        """Members that emit their last token in ``step`` (ending at ``end_s``), in
        running order, let go with their counters brought up to date."""
        heap = self._finish_steps
        if not heap or heap[0] != step:
            return []
        heapq.heappop(heap)
        members = self._finishing.pop(step)
        if len(members) > 1:
            members.sort(key=running.index)  # rare: two finish in one step
        for request in members:
            self.catch_up(request, step + 1, end_s)
        return members

    def dissolve(self, running: list[Request], step: int, last_end_s: float) -> None:
        """Let every member go, counters up to date before ``step``."""
        for request in running:
            if request.cohort_step is not None:
                self.catch_up(request, step, last_end_s)
        assert self.num_members == 0, "a member was not running"
        self._finishing.clear()
        self._finish_steps.clear()

    # -- aggregates ------------------------------------------------------------
    def context_tokens(self, step: int) -> int:
        """Members' summed computed tokens before ``step``."""
        return self.offset_sum + self.num_members * step

    def num_crossing(self, step: int) -> int:
        """Members that need a new KV block for the token they compute in ``step``."""
        return self._by_phase[-step % self.block_size_tokens]

    def num_crossing_between(self, first: int, num_steps: int) -> int:
        """New KV blocks members need over ``num_steps`` steps from ``first`` on."""
        size = self.block_size_tokens
        total = (num_steps // size) * self.num_members
        left = num_steps % size
        if left:
            # Steps first .. first + left - 1 visit phases -first, -first - 1, ...
            # (mod size): one cyclic slice of _by_phase, summed in C.
            by_phase = self._by_phase
            high = -first % size  # the first step's phase, the slice's top
            low = high - left + 1
            if low >= 0:
                total += sum(by_phase[low : high + 1])
            else:
                total += sum(by_phase[: high + 1]) + sum(by_phase[low:])
        return total

    def first_finish_step(self) -> int | None:
        """The earliest step in which a member emits its last token."""
        return self._finish_steps[0] if self._finish_steps else None
