//! Tests of the calendar over real zone data (chrono-tz). Times are written as RFC 3339 with
//! the zone's offset, so each assertion reads as the wall clock and the instant at once.

use std::time::Instant;

use super::*;

mod dst;

/// Epoch ms of an RFC 3339 time.
pub(super) fn ms(text: &str) -> u64 {
    let time = DateTime::parse_from_rfc3339(text).expect("a valid RFC 3339 time in a test");
    u64::try_from(time.timestamp_millis()).expect("after 1970")
}

pub(super) fn cron(expr: &str, tz: &str) -> Calendar {
    Calendar::new(&Cadence::Cron {
        expr: expr.to_owned(),
        tz: tz.to_owned(),
    })
    .expect("a valid cadence in a test")
}

fn every(every_ms: u64) -> Calendar {
    Calendar::new(&Cadence::Every { every_ms }).expect("a valid cadence in a test")
}

/// The next `count` ticks after `from`, as local RFC 3339.
pub(super) fn next(calendar: &Calendar, from: &str, count: usize) -> Vec<String> {
    calendar
        .preview(ms(from), 0, count)
        .into_iter()
        .map(|(_, local)| local)
        .collect()
}

/// Repeated `next_after` agrees with the walk of `preview`, tick for tick.
pub(super) fn assert_next_after_agrees(calendar: &Calendar, from: &str, count: usize) {
    let walked: Vec<u64> = calendar
        .preview(ms(from), 0, count)
        .into_iter()
        .map(|(t, _)| t)
        .collect();
    let mut stepped = Vec::new();
    let mut after = ms(from);
    for _ in 0..count {
        let tick = calendar.next_after(after, 0).expect("a next tick");
        stepped.push(tick);
        // Also from just before the tick and from mid-second.
        assert_eq!(calendar.next_after(tick - 1, 0), Some(tick));
        assert_eq!(calendar.next_after(tick - 500, 0), Some(tick));
        after = tick;
    }
    assert_eq!(walked, stepped);
}

#[test]
fn six_fields_read_a_leading_seconds_field() {
    assert_eq!(
        next(&cron("*/20 * * * * *", "UTC"), "2027-01-01T00:00:00Z", 3),
        [
            "2027-01-01T00:00:20Z",
            "2027-01-01T00:00:40Z",
            "2027-01-01T00:01:00Z"
        ]
    );
    assert_eq!(
        next(&cron("5 0 9 * * *", "UTC"), "2027-01-01T00:00:00Z", 1),
        ["2027-01-01T09:00:05Z"]
    );
}

#[test]
fn nicknames_fire_at_their_cron_equivalents() {
    let from = "2027-01-06T10:00:00Z"; // a Wednesday
    for (expr, first) in [
        ("@daily", "2027-01-07T00:00:00Z"),
        ("@midnight", "2027-01-07T00:00:00Z"),
        ("@hourly", "2027-01-06T11:00:00Z"),
        ("@weekly", "2027-01-10T00:00:00Z"),
        ("@monthly", "2027-02-01T00:00:00Z"),
        ("@yearly", "2028-01-01T00:00:00Z"),
        ("@annually", "2028-01-01T00:00:00Z"),
        ("@DAILY", "2027-01-07T00:00:00Z"),
    ] {
        assert_eq!(next(&cron(expr, "UTC"), from, 1), [first], "{expr}");
    }
}

#[test]
fn month_and_day_names_read_like_numbers() {
    // 2027-01-01 is a Friday.
    assert_eq!(
        next(
            &cron("0 9 * jan,JUL Mon-Fri", "UTC"),
            "2027-01-01T00:00:00Z",
            3
        ),
        [
            "2027-01-01T09:00:00Z",
            "2027-01-04T09:00:00Z",
            "2027-01-05T09:00:00Z"
        ]
    );
    assert_eq!(
        next(&cron("0 9 * * SUN", "UTC"), "2027-01-01T00:00:00Z", 1),
        next(&cron("0 9 * * 0", "UTC"), "2027-01-01T00:00:00Z", 1)
    );
    assert_eq!(
        next(&cron("0 9 * * 7", "UTC"), "2027-01-01T00:00:00Z", 1),
        ["2027-01-03T09:00:00Z"]
    );
}

#[test]
fn steps_lists_and_ranges_combine() {
    assert_eq!(
        next(&cron("0 8-18/5 * * *", "UTC"), "2027-01-01T00:00:00Z", 4),
        [
            "2027-01-01T08:00:00Z",
            "2027-01-01T13:00:00Z",
            "2027-01-01T18:00:00Z",
            "2027-01-02T08:00:00Z"
        ]
    );
    assert_eq!(
        next(&cron("10,40 */12 * * *", "UTC"), "2027-01-01T00:00:00Z", 3),
        [
            "2027-01-01T00:10:00Z",
            "2027-01-01T00:40:00Z",
            "2027-01-01T12:10:00Z"
        ]
    );
}

#[test]
fn vixie_cron_fires_a_day_matching_either_day_field_when_both_are_restricted() {
    // The 13th or any Friday (2027-01-01 is a Friday, the 13th a Wednesday).
    assert_eq!(
        next(&cron("0 0 13 * FRI", "UTC"), "2027-01-01T00:00:00Z", 3),
        [
            "2027-01-08T00:00:00Z",
            "2027-01-13T00:00:00Z",
            "2027-01-15T00:00:00Z"
        ]
    );
    // One day field `*`: the other alone decides.
    assert_eq!(
        next(&cron("0 0 * * FRI", "UTC"), "2027-01-01T00:00:00Z", 2),
        ["2027-01-08T00:00:00Z", "2027-01-15T00:00:00Z"]
    );
    assert_eq!(
        next(&cron("0 0 13 * *", "UTC"), "2027-01-01T00:00:00Z", 2),
        ["2027-01-13T00:00:00Z", "2027-02-13T00:00:00Z"]
    );
}

#[test]
fn cron_next_after_is_strictly_after() {
    let calendar = cron("0 9 * * *", "UTC");
    let tick = ms("2027-01-01T09:00:00Z");
    assert_eq!(calendar.next_after(tick - 1, 0), Some(tick));
    assert_eq!(calendar.next_after(tick, 0), Some(tick + 86_400_000));
    // The anchor means nothing to cron.
    assert_eq!(calendar.next_after(tick - 1, tick + 5), Some(tick));
}

#[test]
fn every_ticks_from_its_anchor() {
    let calendar = every(30_000);
    let anchor = 1_800_000_000_500;
    assert_eq!(calendar.next_after(anchor - 10_000, anchor), Some(anchor));
    assert_eq!(calendar.next_after(0, anchor), Some(anchor));
    assert_eq!(calendar.next_after(anchor, anchor), Some(anchor + 30_000));
    assert_eq!(
        calendar.next_after(anchor + 29_999, anchor),
        Some(anchor + 30_000)
    );
    assert_eq!(
        calendar.next_after(anchor + 30_000, anchor),
        Some(anchor + 60_000)
    );
    assert_eq!(calendar.next_after(MAX_DUE_MS, anchor), None);
    assert_eq!(
        calendar.preview(anchor, anchor, 2),
        [
            (anchor + 30_000, "2027-01-15T08:00:30.500Z".to_owned()),
            (anchor + 60_000, "2027-01-15T08:01:00.500Z".to_owned())
        ]
    );
}

#[test]
fn every_ticks_in_a_week_of_seconds_is_exact_and_arithmetic() {
    let calendar = every(1_000);
    let anchor = ms("2027-01-01T00:00:00Z");
    let week = 7 * 86_400_000;
    let started = Instant::now();
    let (count, newest) = calendar.ticks_in(anchor, anchor + week, anchor, 3);
    assert!(
        started.elapsed().as_millis() < 50,
        "{:?}",
        started.elapsed()
    );
    assert_eq!(count, 604_800);
    assert_eq!(
        newest,
        [anchor + week - 2_000, anchor + week - 1_000, anchor + week]
    );
    // The anchor itself counts when it is inside the span; the span is (after, until].
    assert_eq!(
        calendar.ticks_in(anchor - 1, anchor + 2_500, anchor, 10),
        (3, vec![anchor, anchor + 1_000, anchor + 2_000])
    );
    assert_eq!(
        calendar.ticks_in(anchor, anchor + 999, anchor, 10),
        (0, vec![])
    );
    assert_eq!(
        calendar.ticks_in(anchor - 5_000, anchor - 1, anchor, 10),
        (0, vec![])
    );
    assert_eq!(
        calendar.ticks_in(anchor, anchor + 5_000, anchor, 0),
        (5, vec![])
    );
}

#[test]
fn cron_ticks_in_counts_the_ticks_of_a_span() {
    let calendar = cron("*/5 * * * *", "UTC");
    let after = ms("2027-01-01T00:00:00Z");
    let (count, newest) = calendar.ticks_in(after, after + 3_600_000, 0, 2);
    assert_eq!(count, 12);
    assert_eq!(newest, [after + 3_300_000, after + 3_600_000]);
    // Through New York's repeated hour a wildcard hour counts both passes: 25 hours of ticks.
    let calendar = cron("0 * * * *", "America/New_York");
    let (count, _) = calendar.ticks_in(
        ms("2027-11-07T00:00:00-04:00"),
        ms("2027-11-08T00:00:00-05:00"),
        0,
        0,
    );
    assert_eq!(count, 25);
}

#[test]
fn cron_ticks_in_stops_counting_at_the_step_cap_and_still_finds_the_newest() {
    let calendar = cron("* * * * * *", "UTC");
    let after = ms("2027-01-01T00:00:00Z");
    let until = after + 30 * 86_400_000;
    let (count, newest) = calendar.ticks_in(after, until, 0, 3);
    assert!(count >= TICKS_IN_MAX_STEPS, "{count}");
    assert!(count < 30 * 86_400, "{count}");
    assert_eq!(newest, [until - 2_000, until - 1_000, until]);
}

#[test]
fn local_rfc3339_writes_the_zone_offset() {
    let tick = ms("2027-03-14T07:00:00Z");
    assert_eq!(
        cron("0 3 * * *", "America/New_York").local_rfc3339(tick),
        "2027-03-14T03:00:00-04:00"
    );
    assert_eq!(
        cron("0 3 * * *", "UTC").local_rfc3339(tick),
        "2027-03-14T07:00:00Z"
    );
    assert_eq!(
        every(1_000).local_rfc3339(tick + 250),
        "2027-03-14T07:00:00.250Z"
    );
    assert_eq!(
        cron("0 3 * * *", "Europe/London").local_rfc3339(ms("2027-01-01T00:00:00Z")),
        "2027-01-01T00:00:00+00:00"
    );
    assert_eq!(
        cron("0 3 * * *", "Australia/Lord_Howe").local_rfc3339(ms("2027-01-01T00:00:00Z")),
        "2027-01-01T11:00:00+11:00"
    );
}

#[test]
fn an_invalid_expression_or_zone_is_refused_naming_the_field_and_the_value() {
    for expr in [
        "61 * * * *",
        "* * * *",
        "0 0 0 1 1 * 2027",
        "0 0 L * *",
        "0 0 15W * *",
        "0 0 * * 5#2",
        "0 0 1 * +MON",
        "0 0 ? * *",
        "@reboot",
        "0 0 30 2 *",
        "0 0 * FOO *",
        "0 0 * * JAN",
        "0/10 * * * *",
        "*/0 * * * *",
        "",
    ] {
        let error = Calendar::new(&Cadence::Cron {
            expr: expr.to_owned(),
            tz: "UTC".to_owned(),
        })
        .expect_err(expr);
        assert_eq!(error.field, "cron", "{expr}");
        assert_eq!(error.value, expr);
        assert!(
            error
                .to_string()
                .starts_with(&format!("invalid recurring field 'cron' = {expr:?}: ")),
            "{error}"
        );
    }
    let error = Calendar::new(&Cadence::Cron {
        expr: "0 9 * * *".to_owned(),
        tz: "Mars/Olympus".to_owned(),
    })
    .expect_err("unknown zone");
    assert_eq!((error.field, error.value.as_str()), ("tz", "Mars/Olympus"));
    let error = Calendar::new(&Cadence::Every { every_ms: 0 }).expect_err("zero");
    assert_eq!(error.field, "every");
}

#[test]
fn a_calendar_is_cheap_to_clone_and_shared_across_threads() {
    fn assert_send_sync<T: Send + Sync + Clone>() {}
    assert_send_sync::<Calendar>();
    let calendar = cron("0 9 * * *", "Europe/Berlin");
    let copy = calendar.clone();
    let tick = std::thread::spawn(move || copy.next_after(ms("2027-01-01T00:00:00Z"), 0))
        .join()
        .expect("the thread ran");
    assert_eq!(tick, calendar.next_after(ms("2027-01-01T00:00:00Z"), 0));
}
