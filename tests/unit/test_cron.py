"""Schedule maths (pgtasks._cron): ticks in UTC, the DST rule, catch-up plans. No database."""

from __future__ import annotations

import itertools
import random
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest

from pgtasks import TaskRegistrationError
from pgtasks._cron import (
    CronTrigger,
    EveryTrigger,
    Schedule,
    Trigger,
    default_schedule_name,
    format_tick,
    make_trigger,
    plan_ticks,
    resolve_zone,
    tick_key,
    validate_cron,
)

UTC = timezone.utc
BERLIN = ZoneInfo("Europe/Berlin")
NEW_YORK = ZoneInfo("America/New_York")


def utc(
    year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0
) -> datetime:
    return datetime(year, month, day, hour, minute, second, tzinfo=UTC)


def local(
    zone: ZoneInfo, year: int, month: int, day: int, hour: int, minute: int, *, fold: int = 0
) -> datetime:
    """A wall-clock time in ``zone`` as a UTC instant."""
    return datetime(year, month, day, hour, minute, tzinfo=zone, fold=fold).astimezone(UTC)


def ticks(trigger: Trigger, after: datetime, until: datetime) -> list[datetime]:
    ascending = list(trigger.ascending(after, until))
    assert list(trigger.descending(after, until)) == ascending[::-1]
    return ascending


def walls(zone: ZoneInfo, instants: list[datetime]) -> list[str]:
    return [instant.astimezone(zone).strftime("%m-%d %H:%M %Z") for instant in instants]


# -- DST: Europe/Berlin (2024-03-31 02:00 CET -> 03:00 CEST; 2024-10-27 03:00 CEST -> 02:00 CET)


def test_daily_job_in_the_skipped_hour_runs_once_at_the_end_of_the_gap_in_berlin() -> None:
    trigger = CronTrigger("30 2 * * *", BERLIN)

    result = ticks(trigger, utc(2024, 3, 29, 12), utc(2024, 4, 1, 12))

    assert walls(BERLIN, result) == ["03-30 02:30 CET", "03-31 03:00 CEST", "04-01 02:30 CEST"]
    assert result[1] == utc(2024, 3, 31, 1, 0)


def test_daily_job_in_the_repeated_hour_runs_once_at_its_first_occurrence_in_berlin() -> None:
    trigger = CronTrigger("30 2 * * *", BERLIN)

    result = ticks(trigger, utc(2024, 10, 25, 12), utc(2024, 10, 28, 12))

    assert walls(BERLIN, result) == ["10-26 02:30 CEST", "10-27 02:30 CEST", "10-28 02:30 CET"]
    assert result[1] == utc(2024, 10, 27, 0, 30)


def test_hourly_job_follows_elapsed_time_through_both_berlin_transitions() -> None:
    trigger = CronTrigger("30 * * * *", BERLIN)

    spring = ticks(trigger, utc(2024, 3, 30, 23), utc(2024, 3, 31, 3))
    autumn = ticks(trigger, utc(2024, 10, 26, 23), utc(2024, 10, 27, 3))

    # One run per elapsed hour: no extra run at 03:00 for the skipped 02:30.
    assert spring == [utc(2024, 3, 30, 23, 30), *[utc(2024, 3, 31, h, 30) for h in (0, 1, 2)]]
    assert walls(BERLIN, spring) == [
        "03-31 00:30 CET",
        "03-31 01:30 CET",
        "03-31 03:30 CEST",
        "03-31 04:30 CEST",
    ]
    assert walls(BERLIN, autumn) == [
        "10-27 01:30 CEST",
        "10-27 02:30 CEST",
        "10-27 02:30 CET",
        "10-27 03:30 CET",
    ]


def test_several_skipped_times_of_one_gap_give_one_tick() -> None:
    trigger = CronTrigger("*/20 2 * * *", BERLIN)

    result = ticks(trigger, utc(2024, 3, 30, 12), utc(2024, 3, 31, 12))

    assert walls(BERLIN, result) == ["03-31 03:00 CEST"]


def test_a_gap_tick_and_a_real_tick_at_the_same_instant_are_one_tick() -> None:
    trigger = CronTrigger("0 2,3 * * *", BERLIN)

    result = ticks(trigger, utc(2024, 3, 30, 12), utc(2024, 3, 31, 12))

    assert walls(BERLIN, result) == ["03-31 03:00 CEST"]


# -- DST: America/New_York (2024-03-10 02:00 EST -> 03:00 EDT; 2024-11-03 02:00 EDT -> 01:00 EST)


def test_daily_job_in_the_skipped_hour_runs_once_in_new_york() -> None:
    trigger = CronTrigger("30 2 * * *", NEW_YORK)

    result = ticks(trigger, utc(2024, 3, 9), utc(2024, 3, 12))

    assert walls(NEW_YORK, result) == ["03-09 02:30 EST", "03-10 03:00 EDT", "03-11 02:30 EDT"]


def test_daily_job_in_the_repeated_hour_runs_once_in_new_york() -> None:
    trigger = CronTrigger("30 1 * * *", NEW_YORK)

    result = ticks(trigger, utc(2024, 11, 2), utc(2024, 11, 5))

    assert walls(NEW_YORK, result) == ["11-02 01:30 EDT", "11-03 01:30 EDT", "11-04 01:30 EST"]
    assert result[1] == local(NEW_YORK, 2024, 11, 3, 1, 30, fold=0)


def test_every_five_minutes_keeps_its_rhythm_through_the_new_york_repeated_hour() -> None:
    trigger = CronTrigger("*/5 * * * *", NEW_YORK)

    result = ticks(trigger, utc(2024, 11, 3, 4), utc(2024, 11, 3, 8))

    gaps = {later - earlier for earlier, later in itertools.pairwise(result)}
    assert gaps == {timedelta(minutes=5)}
    assert len(result) == 4 * 12


def test_a_window_starting_inside_the_repeated_hour_still_skips_the_repeat() -> None:
    trigger = CronTrigger("45 1 * * *", NEW_YORK)
    first_one_thirty = local(NEW_YORK, 2024, 11, 3, 1, 30, fold=0)
    second_one_fifteen = local(NEW_YORK, 2024, 11, 3, 1, 15, fold=1)

    assert ticks(trigger, second_one_fifteen, utc(2024, 11, 3, 12)) == []
    assert ticks(trigger, first_one_thirty, utc(2024, 11, 3, 12)) == [
        local(NEW_YORK, 2024, 11, 3, 1, 45, fold=0)
    ]


@pytest.mark.parametrize(
    ("expression", "zone", "start"),
    [
        ("30 2 * * *", BERLIN, utc(2024, 3, 30)),
        ("*/7 * * * *", BERLIN, utc(2024, 10, 26, 22)),
        ("15,45 1-3 * * *", NEW_YORK, utc(2024, 11, 2, 20)),
        ("0 */2 * * *", NEW_YORK, utc(2024, 3, 9, 20)),
        ("*/20 * * * * 30", BERLIN, utc(2024, 3, 31, 0)),
    ],
)
def test_any_window_sees_the_same_ticks_as_one_long_walk(
    expression: str, zone: ZoneInfo, start: datetime
) -> None:
    trigger = CronTrigger(expression, zone)
    end = start + timedelta(hours=30)
    reference = list(trigger.ascending(start, end))
    assert reference == sorted(set(reference))
    generator = random.Random(expression)

    for _ in range(40):
        low = start + timedelta(seconds=generator.uniform(0, 30 * 3600))
        high = low + timedelta(seconds=generator.uniform(0, 6 * 3600))
        expected = [tick for tick in reference if low < tick <= min(high, end)]
        assert ticks(trigger, low, min(high, end)) == expected, (low, high)


# -- cron and interval basics


def test_six_field_cron_has_seconds_last() -> None:
    trigger = CronTrigger("* * * * * */15")

    result = ticks(trigger, utc(2024, 1, 1, 0, 0, 0), utc(2024, 1, 1, 0, 1, 0))

    assert result == [utc(2024, 1, 1, 0, 0, second) for second in (15, 30, 45)] + [
        utc(2024, 1, 1, 0, 1, 0)
    ]


def test_window_bounds_are_exclusive_then_inclusive_to_the_microsecond() -> None:
    trigger = CronTrigger("* * * * *")
    tick = utc(2024, 1, 1, 0, 1)

    assert ticks(trigger, tick, tick + timedelta(seconds=59)) == []
    assert ticks(trigger, tick - timedelta(microseconds=1), tick) == [tick]
    assert trigger.next_tick(tick - timedelta(microseconds=1)) == tick
    assert trigger.next_tick(tick) == tick + timedelta(minutes=1)
    assert trigger.previous_tick(tick + timedelta(microseconds=1)) == tick


def test_next_tick_is_none_for_a_date_beyond_the_horizon() -> None:
    trigger = CronTrigger("0 0 29 2 *")

    assert trigger.next_tick(utc(2024, 3, 1)) == utc(2028, 2, 29)
    assert trigger.next_tick(utc(2024, 3, 1), horizon=timedelta(days=365)) is None


def test_every_ticks_are_multiples_of_the_interval_since_the_epoch() -> None:
    trigger = EveryTrigger(timedelta(seconds=1.5))

    result = ticks(trigger, utc(2024, 1, 1), utc(2024, 1, 1, 0, 0, 6))

    assert [tick.second + tick.microsecond / 1e6 for tick in result] == [1.5, 3.0, 4.5, 6.0]
    assert EveryTrigger(timedelta(hours=1)).next_tick(utc(2024, 1, 1, 5, 59)) == utc(2024, 1, 1, 6)


def test_tick_keys_name_the_schedule_and_the_tick_in_utc() -> None:
    berlin_tick = datetime(2024, 3, 31, 3, 0, tzinfo=BERLIN)

    assert tick_key("nightly", berlin_tick) == "pgtasks.periodic:nightly@2024-03-31T01:00:00Z"
    assert format_tick(utc(2024, 1, 1, 0, 0, 1) + timedelta(microseconds=5)) == (
        "2024-01-01T00:00:01.000005Z"
    )
    assert tick_key("a", utc(2024, 1, 1)) != tick_key("a", utc(2024, 1, 1, 0, 0, 1))


def test_default_schedule_names_come_from_task_and_expression() -> None:
    assert default_schedule_name("m.rollup", CronTrigger("*/5 * * * *")) == "m.rollup@*/5 * * * *"
    assert default_schedule_name("m.rollup", CronTrigger("0 9 * * *", BERLIN)) == (
        "m.rollup@0 9 * * * Europe/Berlin"
    )
    assert default_schedule_name("m.rollup", EveryTrigger(timedelta(minutes=5))) == (
        "m.rollup@every 300s"
    )


# -- declaration errors


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("61 * * * *", "invalid cron expression '61 \\* \\* \\* \\*'"),
        ("* * * *", "invalid cron expression '\\* \\* \\* \\*': expected 5 fields"),
        ("* * * * * * * *", "expected 5 fields"),
        ("every monday", "invalid cron expression 'every monday'"),
        ("0 0 30 2 *", "cron expression '0 0 30 2 \\*' never matches a date"),
        ("", "cron must be a non-empty string"),
    ],
)
def test_invalid_cron_expressions_raise_quoting_the_expression(
    expression: str, message: str
) -> None:
    with pytest.raises(TaskRegistrationError, match=message):
        validate_cron(expression)


def test_cron_aliases_and_extra_spaces_are_accepted() -> None:
    assert validate_cron("@hourly") == "@hourly"
    assert validate_cron("  */5   *  * * * ") == "*/5 * * * *"


def test_unknown_time_zone_raises_quoting_it() -> None:
    with pytest.raises(TaskRegistrationError, match="unknown time zone 'Europe/Atlantis'"):
        resolve_zone("Europe/Atlantis")
    with pytest.raises(TaskRegistrationError, match=r"unknown time zone '\.\./etc/passwd'"):
        resolve_zone("../etc/passwd")
    assert resolve_zone(None) is UTC
    assert resolve_zone("America/New_York") == NEW_YORK


@pytest.mark.parametrize(
    ("cron", "every", "tz", "message"),
    [
        (None, None, None, "exactly one of cron= or every="),
        ("* * * * *", timedelta(seconds=1), None, "exactly one of cron= or every="),
        (None, timedelta(milliseconds=500), None, "at least one second"),
        (None, 5, None, "every= must be a timedelta"),
        (None, timedelta(seconds=5), "Europe/Berlin", "tz= applies to cron= schedules"),
    ],
)
def test_bad_trigger_options_raise(
    cron: str | None, every: object, tz: str | None, message: str
) -> None:
    with pytest.raises(TaskRegistrationError, match=message):
        make_trigger(cron, every, tz)  # type: ignore[arg-type]


def test_bad_catch_up_options_raise() -> None:
    trigger = EveryTrigger(timedelta(seconds=1))
    with pytest.raises(TaskRegistrationError, match="catch_up must be one of"):
        Schedule("s", "t", trigger, catch_up="some")  # type: ignore[arg-type]
    with pytest.raises(TaskRegistrationError, match="max_catch_up must be an int >= 1"):
        Schedule("s", "t", trigger, max_catch_up=0)


# -- what to enqueue after downtime

EVERY_SECOND = EveryTrigger(timedelta(seconds=1))
NOW = utc(2024, 6, 1, 12, 0, 0) + timedelta(milliseconds=300)
GRACE = timedelta(seconds=60)


def test_late_ticks_within_the_grace_period_are_all_enqueued_whatever_the_policy() -> None:
    for catch_up in ("latest", "all", "none"):
        plan = plan_ticks(
            EVERY_SECOND, NOW - timedelta(seconds=5), NOW, catch_up=catch_up, grace=GRACE
        )
        expected = [utc(2024, 6, 1, 11, 59, second) for second in range(55, 60)]
        assert plan.ticks == (*expected[1:], utc(2024, 6, 1, 12))
        assert not plan.missed


def test_catch_up_latest_enqueues_only_the_most_recent_tick_after_an_outage() -> None:
    plan = plan_ticks(EVERY_SECOND, NOW - timedelta(days=3), NOW, catch_up="latest", grace=GRACE)

    assert plan.ticks == (utc(2024, 6, 1, 12),)
    assert plan.missed


def test_catch_up_latest_enqueues_the_missed_tick_when_none_is_recent() -> None:
    hourly = CronTrigger("0 * * * *")
    plan = plan_ticks(hourly, utc(2024, 6, 1, 7, 30), NOW + timedelta(minutes=20), grace=GRACE)

    assert plan.ticks == (utc(2024, 6, 1, 12),)


def test_catch_up_all_enqueues_every_missed_tick_up_to_the_bound() -> None:
    hourly = CronTrigger("0 * * * *")
    start = utc(2024, 6, 1, 7, 30)

    everything = plan_ticks(hourly, start, NOW, catch_up="all", grace=GRACE)
    bounded = plan_ticks(hourly, start, NOW, catch_up="all", max_catch_up=2, grace=GRACE)

    assert everything.ticks == tuple(utc(2024, 6, 1, hour) for hour in range(8, 13))
    assert bounded.ticks == (utc(2024, 6, 1, 11), utc(2024, 6, 1, 12))
    assert everything.missed and bounded.missed


def test_catch_up_none_skips_missed_ticks_but_keeps_recent_ones() -> None:
    start = NOW - timedelta(minutes=10)

    plan = plan_ticks(EVERY_SECOND, start, NOW, catch_up="none", grace=timedelta(seconds=2))

    assert plan.ticks == (utc(2024, 6, 1, 11, 59, 59), utc(2024, 6, 1, 12))
    assert plan.missed


def test_catch_up_none_enqueues_nothing_when_every_tick_was_missed() -> None:
    hourly = CronTrigger("0 * * * *")

    plan = plan_ticks(hourly, utc(2024, 6, 1, 7, 30), NOW + timedelta(minutes=5), catch_up="none")

    assert plan.ticks == ()
    assert plan.missed


def test_nothing_is_planned_when_processed_until_is_not_in_the_past() -> None:
    assert plan_ticks(EVERY_SECOND, NOW, NOW).ticks == ()
    assert plan_ticks(EVERY_SECOND, NOW + timedelta(seconds=5), NOW).ticks == ()


def test_a_long_outage_of_a_per_second_schedule_is_planned_quickly() -> None:
    trigger = CronTrigger("* * * * * *", BERLIN)
    plan = plan_ticks(trigger, utc(2024, 1, 1), NOW, catch_up="all", max_catch_up=3)

    assert plan.ticks == (
        utc(2024, 6, 1, 11, 59, 58),
        utc(2024, 6, 1, 11, 59, 59),
        utc(2024, 6, 1, 12),
    )
