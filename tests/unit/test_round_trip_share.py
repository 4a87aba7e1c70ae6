"""How much one finish-and-claim round trip claims (claims.round_trip_share)."""

from __future__ import annotations

from pgtasks._worker.claims import MIN_SHARE, round_trip_share


def test_without_a_second_lane_a_round_trip_claims_every_free_slot() -> None:
    assert round_trip_share(150, 150, 1) == 150
    assert round_trip_share(7, 150, 0) == 7


def test_a_large_pipeline_is_claimed_in_one_share_per_lane() -> None:
    # Concurrency 50 with the automatic prefetch (two per slot): 150 jobs, two lanes.
    assert round_trip_share(150, 150, 2) == 75
    assert round_trip_share(75, 150, 2) == 75
    assert round_trip_share(40, 150, 2) == 40  # never more than is free
    assert round_trip_share(151, 151, 2) == 76  # rounded up: no slot left over


def test_a_small_pipeline_is_not_cut() -> None:
    # Concurrency 10 with the prefetch: 30 jobs; shares of 15 cost more than they win.
    assert round_trip_share(30, 30, 2) == 30
    below = 2 * (MIN_SHARE - 1)  # shares of MIN_SHARE - 1
    assert round_trip_share(below, below, 2) == below
    assert round_trip_share(below + 1, below + 1, 2) == MIN_SHARE
