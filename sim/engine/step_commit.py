"""Committing a step: token counters, emitted tokens, finishes and the step log.

``EngineCore.commit`` hands a plan's steps here: one step (``_commit_one``) or a
run of a step and the plain decode steps that follow it (``_commit_run``,
O(batch), not O(tokens)). Cohort members (``sim.engine.cohort``) are counted in
aggregate; only those finishing are visited. Kept apart from ``sim.engine.core``
so that each file reads on its own; the core is the only user.
"""

from __future__ import annotations

from sim.engine.cohort import Cohort
from sim.engine.kv_pool import BlockPool
from sim.engine.plan import StepPlan
from sim.engine.request import Request
from sim.engine.steplog import StepLog


class StepCommits:
    """The commit half of ``EngineCore`` (a mixin: the core holds the state)."""

    num_steps: int
    steps: StepLog
    kv: BlockPool
    cohort: Cohort | None
    running: list[Request]
    later_runs: dict[int, list[tuple[float, int]]]
    extra_itl_s: list[float]
    extra_itl_from_s: list[float]
    _deferred: list[Request] | None

    def finish(self, request: Request, time_s: float) -> None:
        raise NotImplementedError  # EngineCore.finish

    def _finish_in_order(self, members: list[Request], listed: list[Request], end_s: float) -> None:
        """Finish cohort members and listed requests whose last token ended at ``end_s``,
        in running order, as the per-request commit would (it frees their blocks)."""
        finishing = members + listed
        if members and listed:  # rare: the cohort does not keep its members' order
            finishing.sort(key=self.running.index)
        for request in finishing:
            self.finish(request, end_s)

    def _commit_one(self, plan: StepPlan, start_s: float, end_s: float) -> None:
        step = self.num_steps
        previous = step - 1
        # Cohort members each decode one token, continuing their run.
        num_itl = num_decode = plan.num_cohort
        num_prefill = num_fresh = 0
        cohort = self.cohort
        members = cohort.leave_finishing(step, self.running, end_s) if cohort and num_itl else []
        if members:
            self._deferred = []  # listed requests' finishes wait to be put in order
        for request, num_new in plan.scheduled:
            generated = request.num_generated_tokens
            if num_new == 1 and generated > 0:
                num_decode += 1
            else:
                num_prefill += num_new
            computed = request.num_computed_tokens + num_new
            request.num_computed_tokens = computed
            if computed == request.num_prompt_tokens + generated:
                if (
                    request.last_token_step == previous
                    and generated + 1 < request.num_output_tokens
                ):
                    # Inline _emit for the common case (hot path): a decode
                    # token right after the previous one, not the last.
                    request.num_generated_tokens = generated + 1
                    request.last_token_step = step
                    request.last_token_s = end_s
                    num_itl += 1
                else:
                    continuing = self._emit(request, step, end_s)
                    num_itl += continuing
                    num_fresh += 1 - continuing  # a first token, or one after a break
        if members:
            listed, self._deferred = self._deferred, None
            self._finish_in_order(members, listed or [], end_s)
        num_outputs = num_itl + num_fresh
        self.steps.add_step(
            start_s, end_s, num_prefill, num_decode + plan.padding_seqs, num_itl, num_outputs
        )
        self.num_steps = step + 1

    def _commit_run(self, plan: StepPlan, start_s: float, ends_s: list[float]) -> None:
        """The plan's step, then k - 1 decode steps of the same batch, in one pass.

        O(batch), not O(tokens): every scheduled request emits a token in each
        step (the plan guarantees it) and none finishes before the last.
        """
        num_steps = len(ends_s)
        first = self.num_steps
        last = first + num_steps - 1
        end_first, end_last = ends_s[0], ends_s[-1]
        num_itl = num_decode = plan.num_cohort
        num_prefill = 0
        kv = self.kv
        block_size = kv.block_size_tokens
        finished: list[Request] = []
        if num_itl:  # the members' blocks for the steps after the first, by count
            assert self.cohort is not None
            kv.num_free_blocks -= self.cohort.num_crossing_between(first + 1, num_steps - 1)
        for request, num_new in plan.scheduled:
            generated = request.num_generated_tokens
            if num_new == 1 and generated > 0:
                num_decode += 1
            else:
                num_prefill += num_new
            if request.last_token_step == first - 1:
                num_itl += 1
            else:
                self.break_run(request, end_first)
                if request.first_token_s is None:
                    request.first_token_s = end_first
            computed = request.num_computed_tokens + num_new + num_steps - 1
            request.num_computed_tokens = computed
            request.num_generated_tokens = generated + num_steps
            request.last_token_step = last
            request.last_token_s = end_last
            short = -(-computed // block_size) - request.num_blocks
            if short > 0:  # inline kv.allocate: the policy checked the pool suffices
                kv.num_free_blocks -= short
                request.num_blocks += short
            if generated + num_steps == request.num_output_tokens:
                finished.append(request)
        # Free only once every request's blocks are counted, as step by step, where
        # the last step's blocks are all reserved before any request finishes (the
        # peak decides which cached prefix blocks get evicted).
        if plan.num_cohort:
            assert self.cohort is not None
            members = self.cohort.leave_finishing(last, self.running, end_last)
            self._finish_in_order(members, finished, end_last)
        else:
            for request in finished:
                self.finish(request, end_last)
        steps = self.steps
        # Each emits a token in every step of the run.
        num_seqs = len(plan.scheduled) + plan.num_cohort
        steps.add_step(
            start_s, end_first, num_prefill, num_decode + plan.padding_seqs, num_itl, num_seqs
        )
        steps.add_decode_run(end_first, ends_s[1:], plan.run_num_seqs, num_seqs)
        self.num_steps = last + 1

    def break_run(self, request: Request, time_s: float) -> None:
        """A token that does not follow its predecessor by one step."""
        if request.last_token_s is not None:
            self.extra_itl_s.append(time_s - request.last_token_s)
            self.extra_itl_from_s.append(request.last_token_s)
            self.later_runs.setdefault(request.request_id, []).append(
                (time_s, request.num_generated_tokens)
            )

    def _emit(self, request: Request, step: int, time_s: float) -> int:
        """Sample one output token; return 1 if it continues an unbroken run."""
        continuing = request.last_token_step == step - 1
        if not continuing:
            self.break_run(request, time_s)
        if request.first_token_s is None:
            request.first_token_s = time_s
        request.num_generated_tokens += 1
        request.last_token_step = step
        request.last_token_s = time_s
        if request.num_generated_tokens == request.num_output_tokens:
            self.finish(request, time_s)
        return int(continuing)
