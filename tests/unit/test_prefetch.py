"""The worker's prefetch: fixed, or automatic while its jobs are short (claims.Prefetch)."""

from __future__ import annotations

from pgtasks._worker.claims import AUTO_PREFETCH_PER_SLOT, SHORT_JOB, Prefetch


def test_a_fixed_prefetch_is_what_it_says_whatever_the_jobs_take() -> None:
    prefetch = Prefetch(3, lambda: 10)
    assert (prefetch.jobs, prefetch.most) == (3, 3)
    prefetch.observe(60.0)
    assert prefetch.jobs == 3
    assert Prefetch(0, lambda: 10).jobs == 0


def test_the_automatic_prefetch_claims_nothing_extra_before_a_job_ended() -> None:
    prefetch = Prefetch(None, lambda: 10)
    assert prefetch.jobs == 0
    assert prefetch.most == AUTO_PREFETCH_PER_SLOT * 10


def test_the_automatic_prefetch_follows_the_slots_while_jobs_are_short() -> None:
    slots = [10]
    prefetch = Prefetch(None, lambda: slots[0])
    prefetch.observe(0.0005)
    assert prefetch.jobs == AUTO_PREFETCH_PER_SLOT * 10
    slots[0] = 4
    assert prefetch.jobs == AUTO_PREFETCH_PER_SLOT * 4


def test_one_long_job_turns_the_automatic_prefetch_off_and_short_ones_turn_it_on() -> None:
    prefetch = Prefetch(None, lambda: 10)
    for _ in range(100):
        prefetch.observe(0.001)
    prefetch.observe(1.0)
    assert prefetch.jobs == 0
    short_jobs = 0
    while prefetch.jobs == 0:
        prefetch.observe(0.001)
        short_jobs += 1
        assert short_jobs < 100
    assert prefetch.average is not None and prefetch.average <= SHORT_JOB
    assert short_jobs > 10  # the average forgets a long job gradually, not at once
