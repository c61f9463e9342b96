//! delayq's cron syntax: what is checked before croner parses an expression.

use chrono::{DateTime, Utc};
use croner::parser::{CronParser, Seconds, Year};
use croner::Cron;

/// Checks that `expr` is delayq's cron syntax, then has croner parse it.
pub(super) fn compile_cron(expr: &str) -> Result<Cron, String> {
    let expr = expr.trim();
    let pattern = if expr.starts_with('@') {
        match expr.to_ascii_lowercase().as_str() {
            "@midnight" => "@daily".to_owned(),
            "@yearly" | "@annually" | "@monthly" | "@weekly" | "@daily" | "@hourly" => {
                expr.to_owned()
            }
            _ => {
                return Err("unknown nickname (expected @yearly, @annually, @monthly, @weekly, @daily, @midnight or @hourly)".to_owned())
            }
        }
    } else {
        let fields: Vec<&str> = expr.split_whitespace().collect();
        let names: &[&str] = match fields.len() {
            5 => &FIELDS[1..],
            6 => &FIELDS,
            0 => return Err("the expression is empty".to_owned()),
            n => {
                return Err(format!(
                    "expected 5 fields (minute hour day-of-month month day-of-week) or 6 with a leading seconds field, got {n}"
                ))
            }
        };
        for (field, name) in fields.iter().zip(names) {
            check_field(field, name)?;
        }
        expr.to_owned()
    };
    let cron = CronParser::builder()
        .seconds(Seconds::Optional)
        .year(Year::Disallowed)
        .dom_and_dow(false)
        .build()
        .parse(&pattern)
        .map_err(|error| error.to_string())?;
    // A valid expression matches within 28 years of any date (the calendar's cycle); croner
    // answers an error for one that never does (`0 0 30 2 *`).
    let probe = DateTime::<Utc>::UNIX_EPOCH.naive_utc();
    if cron.find_next_occurrence(&probe, true).is_err() {
        return Err("it never matches a real date".to_owned());
    }
    Ok(cron)
}

const FIELDS: [&str; 6] = [
    "seconds",
    "minute",
    "hour",
    "day-of-month",
    "month",
    "day-of-week",
];

const MONTHS: [&str; 12] = [
    "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC",
];
const DAYS: [&str; 7] = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];

/// One field: a comma list of `*`, `N`, `N-M` or a name, each with an optional `/STEP`. The
/// numbers' ranges and the step forms are croner's to check.
fn check_field(field: &str, name: &str) -> Result<(), String> {
    let names: &[&str] = match name {
        "month" => &MONTHS,
        "day-of-week" => &DAYS,
        _ => &[],
    };
    let atom_ok = |atom: &str| {
        !atom.is_empty()
            && (atom.bytes().all(|b| b.is_ascii_digit())
                || names.iter().any(|n| n.eq_ignore_ascii_case(atom)))
    };
    for item in field.split(',') {
        let (range, step) = match item.split_once('/') {
            Some((range, step)) => (range, Some(step)),
            None => (item, None),
        };
        let range_ok = range == "*"
            || match range.split_once('-') {
                Some((low, high)) => atom_ok(low) && atom_ok(high),
                None => atom_ok(range),
            };
        let step_ok = step.is_none_or(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()));
        if !range_ok || !step_ok {
            return Err(format!(
                "the {name} field has {item:?}: only numbers{}, *, lists (a,b), ranges (a-b) and steps (*/n, a-b/n) are allowed",
                if names.is_empty() { "" } else { ", names" }
            ));
        }
    }
    Ok(())
}
