//! Tests of spec validation, the error texts and the stored form.

use super::*;

fn raw_cron(expr: &str) -> RawSpec {
    RawSpec {
        queue: Some("reports".to_owned()),
        cron: Some(expr.to_owned()),
        ..RawSpec::default()
    }
}

fn raw_every(every: &str) -> RawSpec {
    RawSpec {
        queue: Some("reports".to_owned()),
        every: Some(every.to_owned()),
        ..RawSpec::default()
    }
}

/// Validates `raw`, expecting an error on `field` for `value`.
fn refused(raw: RawSpec, field: &str, value: &str) -> SpecError {
    let error = raw.validate().expect_err("an invalid spec");
    assert_eq!(error.field, field, "{error}");
    assert_eq!(error.value, value, "{error}");
    let text = error.to_string();
    assert!(
        text.starts_with(&format!("invalid recurring field '{field}' = {value:?}: ")),
        "{text}"
    );
    error
}

#[test]
fn a_minimal_cron_spec_takes_the_defaults() {
    let spec = raw_cron("0 9 * * *").validate().expect("valid");
    assert_eq!(spec.queue.as_str(), "reports");
    assert_eq!(
        spec.cadence,
        Cadence::Cron {
            expr: "0 9 * * *".to_owned(),
            tz: "UTC".to_owned()
        }
    );
    assert_eq!(spec.misfire, Misfire::Once);
    assert_eq!(spec.overlap, Overlap::Allow);
    assert_eq!(spec.misfire_grace_ms, 60_000);
    assert_eq!(spec.max_catchup, 100);
    assert_eq!(
        (spec.payload, spec.start_at_ms, spec.end_at_ms),
        (None, None, None)
    );
}

#[test]
fn every_field_as_typed_is_parsed() {
    let spec = RawSpec {
        queue: Some(" reports ".to_owned()),
        cron: Some(" 0 9 * * * ".to_owned()),
        tz: Some("Europe/Berlin".to_owned()),
        payload: Some(" {\"kind\":\"daily\"} ".to_owned()),
        misfire: Some("ALL".to_owned()),
        misfire_grace: Some("1m 30s".to_owned()),
        max_catchup: Some("250".to_owned()),
        overlap: Some("skip".to_owned()),
        start_at: Some("2027-01-01T01:00:00+01:00".to_owned()),
        end_at: Some("1830297600000".to_owned()),
        ..RawSpec::default()
    }
    .validate()
    .expect("valid");
    assert_eq!(
        spec.cadence,
        Cadence::Cron {
            expr: "0 9 * * *".to_owned(),
            tz: "Europe/Berlin".to_owned()
        }
    );
    assert_eq!(spec.payload.as_deref(), Some(" {\"kind\":\"daily\"} "));
    assert_eq!(spec.misfire, Misfire::All);
    assert_eq!(spec.misfire_grace_ms, 90_000);
    assert_eq!(spec.max_catchup, 250);
    assert_eq!(spec.overlap, Overlap::Skip);
    assert_eq!(spec.start_at_ms, Some(1_798_761_600_000));
    assert_eq!(spec.end_at_ms, Some(1_830_297_600_000));
    assert_eq!(spec.describe_cadence(), "cron \"0 9 * * *\" Europe/Berlin");
}

#[test]
fn every_is_a_humantime_duration_of_at_least_a_second() {
    let spec = raw_every("30s").validate().expect("valid");
    assert_eq!(spec.cadence, Cadence::Every { every_ms: 30_000 });
    assert_eq!(spec.describe_cadence(), "every 30s");
    assert_eq!(
        raw_every("1h 30m")
            .validate()
            .expect("valid")
            .describe_cadence(),
        "every 1h 30m"
    );
    refused(raw_every("999ms"), "every", "999ms");
    refused(raw_every("5 parsecs"), "every", "5 parsecs");
    refused(raw_every("1s 500us"), "every", "1s 500us");
}

#[test]
fn each_invalid_field_is_refused_naming_the_field_and_the_value() {
    refused(
        RawSpec {
            queue: None,
            ..raw_cron("0 9 * * *")
        },
        "queue",
        "",
    );
    refused(
        RawSpec {
            queue: Some("bad:queue".to_owned()),
            ..raw_cron("0 9 * * *")
        },
        "queue",
        "bad:queue",
    );
    refused(
        RawSpec {
            queue: Some("q".to_owned()),
            ..RawSpec::default()
        },
        "cron",
        "",
    );
    refused(
        RawSpec {
            every: Some("30s".to_owned()),
            ..raw_cron("0 9 * * *")
        },
        "every",
        "30s",
    );
    refused(
        RawSpec {
            tz: Some("UTC".to_owned()),
            ..raw_every("30s")
        },
        "tz",
        "UTC",
    );
    refused(
        RawSpec {
            tz: Some("Mars/Olympus".to_owned()),
            ..raw_cron("0 9 * * *")
        },
        "tz",
        "Mars/Olympus",
    );
    refused(
        RawSpec {
            tz: Some(String::new()),
            ..raw_cron("0 9 * * *")
        },
        "tz",
        "",
    );
    refused(raw_cron("61 * * * *"), "cron", "61 * * * *");
    refused(raw_cron("0 9 * *"), "cron", "0 9 * *");
    refused(raw_cron("@reboot"), "cron", "@reboot");
    refused(
        RawSpec {
            misfire: Some("twice".to_owned()),
            ..raw_cron("0 9 * * *")
        },
        "misfire",
        "twice",
    );
    refused(
        RawSpec {
            overlap: Some("queue".to_owned()),
            ..raw_cron("0 9 * * *")
        },
        "overlap",
        "queue",
    );
    refused(
        RawSpec {
            misfire_grace: Some("soon".to_owned()),
            ..raw_cron("0 9 * * *")
        },
        "misfire_grace",
        "soon",
    );
    for bad in ["0", "10001", "-1", "ten", "1.5"] {
        refused(
            RawSpec {
                max_catchup: Some(bad.to_owned()),
                ..raw_cron("0 9 * * *")
            },
            "max_catchup",
            bad,
        );
    }
    refused(
        RawSpec {
            start_at: Some("tomorrow".to_owned()),
            ..raw_cron("0 9 * * *")
        },
        "start_at",
        "tomorrow",
    );
    refused(
        RawSpec {
            end_at: Some("2027-01-01T00:00:00".to_owned()),
            ..raw_cron("0 9 * * *")
        },
        "end_at",
        "2027-01-01T00:00:00",
    );
    refused(
        RawSpec {
            start_at: Some("2027-06-01T00:00:00Z".to_owned()),
            end_at: Some("2027-01-01T00:00:00Z".to_owned()),
            ..raw_cron("0 9 * * *")
        },
        "end_at",
        "2027-01-01T00:00:00Z",
    );
}

#[test]
fn epoch_seconds_are_refused_with_a_hint() {
    let error = refused(
        RawSpec {
            start_at: Some("1800000000".to_owned()),
            ..raw_cron("0 9 * * *")
        },
        "start_at",
        "1800000000",
    );
    assert!(
        error.reason.contains("looks like seconds since the epoch"),
        "{error}"
    );
    assert!(error.reason.contains("1800000000000"), "{error}");
    assert_eq!(parse_time_ms("at", "1800000000000"), Ok(1_800_000_000_000));
    assert_eq!(
        parse_time_ms("at", "2027-01-15T09:00:00.5+01:00"),
        Ok(1_800_000_000_500)
    );
    assert!(parse_time_ms("at", "99999-01-01T00:00:00Z").is_err());
    assert!(parse_time_ms("at", "1969-12-31T23:59:59Z").is_err());
}

#[test]
fn schedule_names_are_checked() {
    assert_eq!(
        ScheduleName::new("nightly-report:v2.1_x").map(|n| n.to_string()),
        Ok("nightly-report:v2.1_x".to_owned())
    );
    for bad in ["", "a@b", "with space", "ü"] {
        let error = ScheduleName::new(bad).expect_err(bad);
        assert_eq!((error.field, error.value.as_str()), ("name", bad));
    }
    assert!(ScheduleName::new(&"n".repeat(128)).is_ok());
    assert!(ScheduleName::new(&"n".repeat(129)).is_err());
    let name: ScheduleName = serde_json::from_str("\"daily\"").expect("a name");
    assert_eq!(
        serde_json::to_string(&name).ok().as_deref(),
        Some("\"daily\"")
    );
    assert!(serde_json::from_str::<ScheduleName>("\"a@b\"").is_err());
}

#[test]
fn misfire_and_overlap_read_their_names() {
    assert_eq!("skip".parse::<Misfire>(), Ok(Misfire::Skip));
    assert_eq!(" Once ".parse::<Misfire>(), Ok(Misfire::Once));
    assert_eq!("all".parse::<Misfire>(), Ok(Misfire::All));
    assert_eq!("allow".parse::<Overlap>(), Ok(Overlap::Allow));
    assert_eq!("skip".parse::<Overlap>(), Ok(Overlap::Skip));
    assert_eq!(
        "never".parse::<Misfire>().map_err(|e| e.field),
        Err("misfire")
    );
    assert_eq!(
        serde_json::to_string(&Misfire::All).ok().as_deref(),
        Some("\"all\"")
    );
    assert_eq!(
        serde_json::from_str::<Overlap>("\"skip\"").ok(),
        Some(Overlap::Skip)
    );
    assert_eq!(Misfire::default().as_str(), "once");
    assert_eq!(Overlap::default().as_str(), "allow");
}

#[test]
fn a_raw_spec_deserializes_from_an_http_body_with_numbers_or_strings() {
    let raw: RawSpec = serde_json::from_str(
        r#"{"queue":"reports","every":"30s","max_catchup":7,"start_at":1800000000000,"misfire":"all"}"#,
    )
    .expect("a raw spec");
    let spec = raw.validate().expect("valid");
    assert_eq!(
        (spec.max_catchup, spec.start_at_ms),
        (7, Some(1_800_000_000_000))
    );
    let raw: RawSpec =
        serde_json::from_str(r#"{"queue":"reports","cron":"@daily","max_catchup":"7"}"#)
            .expect("a raw spec");
    assert_eq!(raw.validate().map(|spec| spec.max_catchup), Ok(7));
    assert!(
        serde_json::from_str::<RawSpec>(r#"{"queue":"q","cron":"@daily","color":"red"}"#).is_err()
    );
}

#[test]
fn the_canonical_json_is_deterministic_and_reads_back() {
    let spec = RawSpec {
        tz: Some("Europe/Berlin".to_owned()),
        payload: Some("{\"kind\":\"daily\"}".to_owned()),
        start_at: Some("2027-01-01T00:00:00Z".to_owned()),
        ..raw_cron("0 9 * * *")
    }
    .validate()
    .expect("valid");
    let json = spec.to_canonical_json();
    assert_eq!(
        json,
        r#"{"v":1,"queue":"reports","cron":"0 9 * * *","tz":"Europe/Berlin","payload":"{\"kind\":\"daily\"}","misfire":"once","misfire_grace_ms":60000,"max_catchup":100,"overlap":"allow","start_at_ms":1798761600000}"#
    );
    assert_eq!(spec.clone().to_canonical_json(), json);
    assert_eq!(RecurringSpec::from_stored_json(&json), Ok(spec.clone()));
    // The same spec typed differently stores the same bytes.
    let typed_otherwise = RawSpec {
        queue: Some(" reports".to_owned()),
        tz: Some(" Europe/Berlin ".to_owned()),
        payload: Some("{\"kind\":\"daily\"}".to_owned()),
        start_at: Some("1798761600000".to_owned()),
        misfire: Some("once".to_owned()),
        misfire_grace: Some("60s".to_owned()),
        ..raw_cron(" 0 9 * * * ")
    };
    assert_eq!(
        typed_otherwise.validate().map(|s| s.to_canonical_json()),
        Ok(json)
    );
    let every = raw_every("5m").validate().expect("valid");
    let json = every.to_canonical_json();
    assert!(json.contains(r#""every_ms":300000"#), "{json}");
    assert_eq!(RecurringSpec::from_stored_json(&json), Ok(every));
}

#[test]
fn a_stored_spec_of_another_version_or_shape_is_refused() {
    for bad in [
        "not json",
        r#"{"v":2,"queue":"q","every_ms":1000,"misfire":"once","misfire_grace_ms":1,"max_catchup":1,"overlap":"allow"}"#,
        r#"{"v":1,"queue":"q","cron":"@daily","every_ms":1000,"misfire":"once","misfire_grace_ms":1,"max_catchup":1,"overlap":"allow"}"#,
    ] {
        assert_eq!(
            RecurringSpec::from_stored_json(bad).map_err(|e| e.field),
            Err("spec"),
            "{bad}"
        );
    }
    let bad_cron = r#"{"v":1,"queue":"q","cron":"61 * * * *","tz":"UTC","misfire":"once","misfire_grace_ms":1,"max_catchup":1,"overlap":"allow"}"#;
    assert_eq!(
        RecurringSpec::from_stored_json(bad_cron).map_err(|e| e.field),
        Err("cron")
    );
    let bad_every = r#"{"v":1,"queue":"q","every_ms":10,"misfire":"once","misfire_grace_ms":1,"max_catchup":1,"overlap":"allow"}"#;
    assert_eq!(
        RecurringSpec::from_stored_json(bad_every).map_err(|e| e.field),
        Err("every")
    );
}
