//! Daylight saving time, as DESIGN.md states it, over the 2027 transitions of New York,
//! Berlin and Lord Howe (a 30-minute shift).

use super::*;

#[test]
fn spring_forward_gap_fires_once_at_the_first_instant_after_it() {
    let calendar = cron("30 2 * * *", "America/New_York");
    assert_eq!(
        next(&calendar, "2027-03-13T12:00:00Z", 2),
        ["2027-03-14T03:00:00-04:00", "2027-03-15T02:30:00-04:00"]
    );
    assert_eq!(
        calendar.next_after(ms("2027-03-13T12:00:00Z"), 0),
        Some(ms("2027-03-14T07:00:00Z"))
    );
}

#[test]
fn spring_forward_gap_fires_a_restricted_hour_list_once_where_croner_alone_skips_the_day() {
    // croner's zoned search treats `0,30 2` as an interval job and skips both wall times.
    let calendar = cron("0,30 2 * * *", "America/New_York");
    assert_eq!(
        next(&calendar, "2027-03-13T12:00:00Z", 3),
        [
            "2027-03-14T03:00:00-04:00",
            "2027-03-15T02:00:00-04:00",
            "2027-03-15T02:30:00-04:00"
        ]
    );
}

#[test]
fn spring_forward_gap_keeps_a_wildcard_hour_on_its_real_instants() {
    let calendar = cron("*/30 * * * *", "America/New_York");
    assert_eq!(
        next(&calendar, "2027-03-14T00:45:00-05:00", 4),
        [
            "2027-03-14T01:00:00-05:00",
            "2027-03-14T01:30:00-05:00",
            "2027-03-14T03:00:00-04:00",
            "2027-03-14T03:30:00-04:00"
        ]
    );
}

#[test]
fn fall_back_fixed_time_fires_once_at_its_first_occurrence() {
    let calendar = cron("30 1 * * *", "America/New_York");
    assert_eq!(
        next(&calendar, "2027-11-07T00:00:00-04:00", 2),
        ["2027-11-07T01:30:00-04:00", "2027-11-08T01:30:00-05:00"]
    );
    // From inside the repeated hour, after the first occurrence: the next day.
    assert_eq!(
        next(&calendar, "2027-11-07T01:10:00-05:00", 1),
        ["2027-11-08T01:30:00-05:00"]
    );
}

#[test]
fn fall_back_restricted_hour_fires_once_where_croner_alone_fires_twice() {
    let calendar = cron("0,30 1 * * *", "America/New_York");
    assert_eq!(
        next(&calendar, "2027-11-07T00:00:00-04:00", 3),
        [
            "2027-11-07T01:00:00-04:00",
            "2027-11-07T01:30:00-04:00",
            "2027-11-08T01:00:00-05:00"
        ]
    );
}

#[test]
fn fall_back_wildcard_hour_fires_both_occurrences_every_30_real_minutes() {
    let calendar = cron("*/30 * * * *", "America/New_York");
    assert_eq!(
        next(&calendar, "2027-11-07T00:15:00-04:00", 6),
        [
            "2027-11-07T00:30:00-04:00",
            "2027-11-07T01:00:00-04:00",
            "2027-11-07T01:30:00-04:00",
            "2027-11-07T01:00:00-05:00",
            "2027-11-07T01:30:00-05:00",
            "2027-11-07T02:00:00-05:00"
        ]
    );
    // Started inside the second pass of the repeated hour.
    assert_eq!(
        next(&calendar, "2027-11-07T01:10:00-05:00", 2),
        ["2027-11-07T01:30:00-05:00", "2027-11-07T02:00:00-05:00"]
    );
    // Started inside the first pass: the second pass still lies ahead.
    assert_eq!(
        next(&calendar, "2027-11-07T01:40:00-04:00", 2),
        ["2027-11-07T01:00:00-05:00", "2027-11-07T01:30:00-05:00"]
    );
}

#[test]
fn berlin_spring_forward_gap_fires_once_at_three() {
    assert_eq!(
        next(
            &cron("30 2 * * *", "Europe/Berlin"),
            "2027-03-27T12:00:00Z",
            2
        ),
        ["2027-03-28T03:00:00+02:00", "2027-03-29T02:30:00+02:00"]
    );
    assert_eq!(
        next(
            &cron("*/30 * * * *", "Europe/Berlin"),
            "2027-03-28T01:15:00+01:00",
            3
        ),
        [
            "2027-03-28T01:30:00+01:00",
            "2027-03-28T03:00:00+02:00",
            "2027-03-28T03:30:00+02:00"
        ]
    );
}

#[test]
fn berlin_fall_back_fires_a_restricted_hour_once_and_a_wildcard_hour_twice() {
    assert_eq!(
        next(
            &cron("30 2 * * *", "Europe/Berlin"),
            "2027-10-30T12:00:00Z",
            2
        ),
        ["2027-10-31T02:30:00+02:00", "2027-11-01T02:30:00+01:00"]
    );
    // `*/2` is a step but not over every hour: once (croner alone fires 02:00 twice).
    assert_eq!(
        next(
            &cron("0 */2 * * *", "Europe/Berlin"),
            "2027-10-30T23:30:00+02:00",
            3
        ),
        [
            "2027-10-31T00:00:00+02:00",
            "2027-10-31T02:00:00+02:00",
            "2027-10-31T04:00:00+01:00"
        ]
    );
    assert_eq!(
        next(
            &cron("0 * * * *", "Europe/Berlin"),
            "2027-10-31T00:30:00+02:00",
            4
        ),
        [
            "2027-10-31T01:00:00+02:00",
            "2027-10-31T02:00:00+02:00",
            "2027-10-31T02:00:00+01:00",
            "2027-10-31T03:00:00+01:00"
        ]
    );
}

#[test]
fn a_step_over_every_hour_counts_as_a_wildcard_hour_in_a_fall_back() {
    for expr in ["15 */1 * * *", "15 0-23/1 * * *", "15 0-23 * * *"] {
        assert_eq!(
            next(&cron(expr, "Europe/Berlin"), "2027-10-31T02:00:00+02:00", 3),
            [
                "2027-10-31T02:15:00+02:00",
                "2027-10-31T02:15:00+01:00",
                "2027-10-31T03:15:00+01:00"
            ],
            "{expr}"
        );
    }
}

#[test]
fn lord_howe_half_hour_spring_forward_fires_a_skipped_time_at_half_past_two() {
    // 2027-10-03 02:00 +10:30 becomes 02:30 +11:00.
    assert_eq!(
        next(
            &cron("15 2 * * *", "Australia/Lord_Howe"),
            "2027-10-02T12:00:00+10:30",
            2
        ),
        ["2027-10-03T02:30:00+11:00", "2027-10-04T02:15:00+11:00"]
    );
    assert_eq!(
        next(
            &cron("*/30 * * * *", "Australia/Lord_Howe"),
            "2027-10-03T01:15:00+10:30",
            3
        ),
        [
            "2027-10-03T01:30:00+10:30",
            "2027-10-03T02:30:00+11:00",
            "2027-10-03T03:00:00+11:00"
        ]
    );
}

#[test]
fn lord_howe_half_hour_fall_back_repeats_only_for_a_wildcard_hour() {
    // 2027-04-04 02:00 +11:00 becomes 01:30 +10:30: 01:30..02:00 comes twice.
    assert_eq!(
        next(
            &cron("45 1 * * *", "Australia/Lord_Howe"),
            "2027-04-03T12:00:00+11:00",
            2
        ),
        ["2027-04-04T01:45:00+11:00", "2027-04-05T01:45:00+10:30"]
    );
    assert_eq!(
        next(
            &cron("*/15 * * * *", "Australia/Lord_Howe"),
            "2027-04-04T01:10:00+11:00",
            6
        ),
        [
            "2027-04-04T01:15:00+11:00",
            "2027-04-04T01:30:00+11:00",
            "2027-04-04T01:45:00+11:00",
            "2027-04-04T01:30:00+10:30",
            "2027-04-04T01:45:00+10:30",
            "2027-04-04T02:00:00+10:30"
        ]
    );
}

#[test]
fn next_after_agrees_with_the_walk_across_every_transition() {
    let cases = [
        ("*/30 * * * *", "America/New_York", "2027-03-13T22:00:00Z"),
        ("*/30 * * * *", "America/New_York", "2027-11-07T03:00:00Z"),
        ("0,30 1-2 * * *", "America/New_York", "2027-11-06T12:00:00Z"),
        ("0 * * * *", "Europe/Berlin", "2027-10-30T20:00:00Z"),
        ("30 2 * * *", "Europe/Berlin", "2027-03-25T00:00:00Z"),
        (
            "*/15 * * * *",
            "Australia/Lord_Howe",
            "2027-04-03T12:00:00Z",
        ),
        (
            "*/20 * * * *",
            "Australia/Lord_Howe",
            "2027-10-02T13:00:00Z",
        ),
    ];
    for (expr, tz, from) in cases {
        assert_next_after_agrees(&cron(expr, tz), from, 40);
    }
}
