//! When a cadence ticks: cron expressions in an IANA zone, or `every` from an anchor.
//!
//! Cron expressions are parsed and matched by `croner`, zones come from `chrono-tz`. croner is
//! asked only for wall clock matches (on a `NaiveDateTime`, so it applies no DST rules of its
//! own); this module turns each matching wall time into real instants with DESIGN.md's rules
//! (cronie's):
//!
//! - a wall time in a spring-forward gap fires once, at the first instant after the gap (every
//!   wall time of one gap lands on that same instant, which is one tick);
//! - a wall time repeated by a fall-back fires at its first occurrence only, unless the hour
//!   field matches every hour (`*`, `*/1`, `0-23`), in which case it fires at both.
//!
//! croner's own zoned search differs from this: it decides by "fixed time" (one second, one
//! minute and one hour value) against "interval" expressions, so an interval expression with a
//! restricted hour (`0,30 1 * * *`, `*/15 2 * * *`) fires both occurrences of a repeated wall time
//! and none of the wall times a gap skips. Hence the wall clock walk here.
//!
//! Day of month and day of week: when both are restricted (neither is exactly `*`), a day
//! matching either fires (Vixie cron; croner's default). croner's extensions (`L`, `W`, `#`,
//! `?`, a leading `+`) and a seventh (year) field are refused: they are not delayq's syntax.

use std::collections::{BTreeSet, VecDeque};
use std::sync::Arc;

use chrono::{
    DateTime, Datelike, LocalResult, NaiveDateTime, Offset, SecondsFormat, TimeZone, Utc,
};
use chrono_tz::Tz;
use croner::Cron;
use delayq_storage::MAX_DUE_MS;

use super::spec::{Cadence, SpecError};

mod syntax;

use syntax::compile_cron;

/// How many wall clock matches [`Calendar::ticks_in`] examines at most for a cron cadence
/// before it stops counting (about a second of work). Past it, the count it returns is a lower
/// bound (it is at least this large) and the newest ticks are looked for near `until_ms`.
pub const TICKS_IN_MAX_STEPS: u64 = 1_000_000;

/// The longest gap walked a second at a time to find its end (no zone has a longer one).
const MAX_GAP_SECONDS: i64 = 2 * 86_400;

/// The ticks of one cadence. Cheap to clone (the compiled expression is shared).
#[derive(Debug, Clone)]
pub struct Calendar {
    kind: Kind,
}

#[derive(Debug, Clone)]
enum Kind {
    Every { every_ms: u64 },
    Cron(Arc<CronCalendar>),
}

#[derive(Debug)]
struct CronCalendar {
    cron: Cron,
    tz: Tz,
    /// Print `Z` rather than `+00:00` (the zone is UTC itself).
    utc: bool,
    /// The hour field matches every hour: a repeated wall time fires at both occurrences.
    both_in_fold: bool,
}

impl Calendar {
    /// Compiles `cadence`.
    ///
    /// # Errors
    /// A [`SpecError`] naming `cron` (a bad or never matching expression), `tz` (a zone that
    /// chrono-tz does not know) or `every` (zero).
    pub fn new(cadence: &Cadence) -> Result<Calendar, SpecError> {
        let kind = match cadence {
            Cadence::Every { every_ms } => {
                if *every_ms == 0 {
                    return Err(SpecError::new("every", "0ms", "must be at least 1s"));
                }
                Kind::Every {
                    every_ms: *every_ms,
                }
            }
            Cadence::Cron { expr, tz } => {
                let zone: Tz = tz.parse().map_err(|_| {
                    SpecError::new(
                        "tz",
                        tz.as_str(),
                        "not an IANA time zone known to chrono-tz (e.g. UTC, Europe/Berlin, America/New_York)",
                    )
                })?;
                let cron = compile_cron(expr)
                    .map_err(|reason| SpecError::new("cron", expr.as_str(), reason))?;
                Kind::Cron(Arc::new(CronCalendar {
                    both_in_fold: cron.pattern.hours.values().len() == 24,
                    utc: matches!(
                        zone.name(),
                        "UTC"
                            | "Etc/UTC"
                            | "Etc/UCT"
                            | "UCT"
                            | "Etc/Universal"
                            | "Universal"
                            | "Etc/Zulu"
                            | "Zulu"
                    ),
                    cron,
                    tz: zone,
                }))
            }
        };
        Ok(Calendar { kind })
    }

    /// The first tick strictly after `after_ms`, or `None` when there is none up to
    /// 9999-12-31. For `every`, ticks are `anchor_ms + k × every_ms` (k ≥ 0, so an anchor after
    /// `after_ms` is itself the first tick); a cron cadence ignores `anchor_ms` and ticks on
    /// whole seconds.
    pub fn next_after(&self, after_ms: u64, anchor_ms: u64) -> Option<u64> {
        match &self.kind {
            Kind::Every { every_ms } => every_next_after(*every_ms, after_ms, anchor_ms),
            Kind::Cron(cron) => CronWalk::new(cron, after_ms).next(),
        }
    }

    /// The ticks in `(after_ms, until_ms]`: how many there are, and the newest `keep_newest` of
    /// them in ascending order (for misfire catch-up). `every` is pure arithmetic, whatever the
    /// span; a cron cadence walks at most [`TICKS_IN_MAX_STEPS`] wall clock matches, past which
    /// the count is a lower bound.
    pub fn ticks_in(
        &self,
        after_ms: u64,
        until_ms: u64,
        anchor_ms: u64,
        keep_newest: usize,
    ) -> (u64, Vec<u64>) {
        match &self.kind {
            Kind::Every { every_ms } => {
                every_ticks_in(*every_ms, after_ms, until_ms, anchor_ms, keep_newest)
            }
            Kind::Cron(cron) => cron_ticks_in(cron, after_ms, until_ms, keep_newest),
        }
    }

    /// `tick_ms` as RFC 3339 with the zone's offset (`2027-03-14T03:00:00-04:00`). UTC (the
    /// zone of every `every` cadence, and `tz: UTC`) is written `Z`; other zones at offset zero
    /// (`Europe/London` in winter) as `+00:00`. Fractions of a second only when there are some.
    pub fn local_rfc3339(&self, tick_ms: u64) -> String {
        let Ok(ms) = i64::try_from(tick_ms) else {
            return tick_ms.to_string();
        };
        let text = match &self.kind {
            Kind::Every { .. } => DateTime::<Utc>::from_timestamp_millis(ms)
                .map(|time| time.to_rfc3339_opts(SecondsFormat::AutoSi, true)),
            Kind::Cron(cron) => cron
                .tz
                .timestamp_millis_opt(ms)
                .single()
                .map(|time| time.to_rfc3339_opts(SecondsFormat::AutoSi, cron.utc)),
        };
        text.unwrap_or_else(|| tick_ms.to_string())
    }

    /// The next `count` ticks strictly after `from_ms`, each with [`Calendar::local_rfc3339`]
    /// (what `delayq recurring next` prints).
    pub fn preview(&self, from_ms: u64, anchor_ms: u64, count: usize) -> Vec<(u64, String)> {
        let ticks: Vec<u64> = match &self.kind {
            Kind::Every { every_ms } => {
                let mut ticks = Vec::with_capacity(count.min(1024));
                let mut after = from_ms;
                while ticks.len() < count {
                    match every_next_after(*every_ms, after, anchor_ms) {
                        Some(tick) => {
                            ticks.push(tick);
                            after = tick;
                        }
                        None => break,
                    }
                }
                ticks
            }
            Kind::Cron(cron) => CronWalk::new(cron, from_ms).take(count).collect(),
        };
        ticks
            .into_iter()
            .map(|tick| (tick, self.local_rfc3339(tick)))
            .collect()
    }
}

fn every_next_after(every_ms: u64, after_ms: u64, anchor_ms: u64) -> Option<u64> {
    let tick = if anchor_ms > after_ms {
        anchor_ms
    } else {
        let k = (after_ms - anchor_ms) / every_ms + 1;
        anchor_ms.checked_add(k.checked_mul(every_ms)?)?
    };
    (tick <= MAX_DUE_MS).then_some(tick)
}

fn every_ticks_in(
    every_ms: u64,
    after_ms: u64,
    until_ms: u64,
    anchor_ms: u64,
    keep: usize,
) -> (u64, Vec<u64>) {
    let until_ms = until_ms.min(MAX_DUE_MS);
    if until_ms <= after_ms || until_ms < anchor_ms {
        return (0, Vec::new());
    }
    let first_k = if anchor_ms > after_ms {
        0
    } else {
        (after_ms - anchor_ms) / every_ms + 1
    };
    let last_k = (until_ms - anchor_ms) / every_ms;
    if last_k < first_k {
        return (0, Vec::new());
    }
    let count = last_k - first_k + 1;
    let kept = count.min(keep as u64);
    let newest = (last_k + 1 - kept..=last_k)
        .map(|k| anchor_ms + k * every_ms)
        .collect();
    (count, newest)
}

fn cron_ticks_in(
    cron: &CronCalendar,
    after_ms: u64,
    until_ms: u64,
    keep: usize,
) -> (u64, Vec<u64>) {
    let (count, mut newest, capped, last) = collect_ticks(cron, after_ms, until_ms, keep);
    if !capped {
        return (count, newest.into());
    }
    // Stopped counting: look for the newest ticks in ever wider windows ending at `until_ms`.
    let mut width: u64 = 3_600_000;
    loop {
        let from = until_ms.saturating_sub(width).max(last);
        let (tail_count, tail, tail_capped, _) = collect_ticks(cron, from, until_ms, keep);
        if from == last && !tail_capped {
            newest.extend(tail);
            while newest.len() > keep {
                newest.pop_front();
            }
            return (count + tail_count, newest.into());
        }
        if tail.len() >= keep || tail_capped {
            return (count + tail_count, tail.into());
        }
        width = width.saturating_mul(2);
    }
}

/// Walks the ticks in `(after_ms, until_ms]`: their count, the newest `keep`, whether the walk
/// stopped at [`TICKS_IN_MAX_STEPS`], and the last tick counted (or `after_ms`).
fn collect_ticks(
    cron: &CronCalendar,
    after_ms: u64,
    until_ms: u64,
    keep: usize,
) -> (u64, VecDeque<u64>, bool, u64) {
    let mut walk = CronWalk::new(cron, after_ms);
    let mut count = 0;
    let mut newest = VecDeque::with_capacity(keep.min(1024));
    let mut last = after_ms;
    if until_ms <= after_ms {
        return (0, newest, false, last);
    }
    while let Some(tick) = walk.next() {
        if tick > until_ms {
            return (count, newest, false, last);
        }
        count += 1;
        last = tick;
        if keep > 0 {
            if newest.len() == keep {
                newest.pop_front();
            }
            newest.push_back(tick);
        }
        if walk.steps >= TICKS_IN_MAX_STEPS {
            return (count, newest, true, last);
        }
    }
    (count, newest, false, last)
}

/// The ticks of a cron cadence after an instant, ascending, as an iterator.
///
/// It walks croner's wall clock matches in order and resolves each into its instants. The
/// earliest instant of a wall time never decreases as the wall time grows (it is the first
/// instant whose wall clock reaches it), and every instant of a wall time is at or after that
/// one, so a resolved instant is final once a later wall time's earliest instant passes it.
struct CronWalk<'a> {
    cal: &'a CronCalendar,
    /// Ticks at or before this are not emitted (the start, then each emitted tick).
    floor_ms: i64,
    /// The wall time where the walk starts (inclusive).
    start: NaiveDateTime,
    /// The last wall clock match resolved.
    last: Option<NaiveDateTime>,
    /// The earliest instant of `last`: no later wall time resolves before it.
    frontier_ms: i64,
    /// Resolved instants not yet emitted.
    pending: BTreeSet<i64>,
    exhausted: bool,
    /// Wall clock matches resolved so far.
    steps: u64,
    /// The last gap walked: (a wall time in it, its first wall time after it, the instant).
    gap: Option<(NaiveDateTime, NaiveDateTime, i64)>,
}

impl<'a> CronWalk<'a> {
    fn new(cal: &'a CronCalendar, after_ms: u64) -> Self {
        let floor_ms = i64::try_from(after_ms).unwrap_or(i64::MAX);
        // The smallest wall clock any instant after `after_ms` shows: its UTC time plus the
        // smallest offset in force over the next 26 hours (sampled hourly; offsets never drop
        // by more than that), floored to the second. Wall times before it only resolve to
        // instants at or before `after_ms`.
        let min_offset_s = (0..=26)
            .filter_map(|hour: i64| {
                let at = DateTime::<Utc>::from_timestamp_millis(
                    floor_ms.checked_add(hour * 3_600_000)?,
                )?;
                Some(i64::from(
                    cal.tz
                        .offset_from_utc_datetime(&at.naive_utc())
                        .fix()
                        .local_minus_utc(),
                ))
            })
            .min()
            .unwrap_or(0);
        let start = DateTime::<Utc>::from_timestamp(floor_ms.div_euclid(1000) + min_offset_s, 0)
            .map(|time| time.naive_utc());
        CronWalk {
            cal,
            floor_ms,
            exhausted: start.is_none(),
            start: start.unwrap_or_default(),
            last: None,
            frontier_ms: i64::MIN,
            pending: BTreeSet::new(),
            steps: 0,
            gap: None,
        }
    }

    /// Resolves the next wall clock match.
    fn step(&mut self) {
        let found = match self.last {
            None => self.cal.cron.find_next_occurrence(&self.start, true),
            Some(last) => self.cal.cron.find_next_occurrence(&last, false),
        };
        let Ok(wall) = found else {
            self.exhausted = true;
            return;
        };
        self.last = Some(wall);
        self.steps += 1;
        if wall.year() > 9999 {
            self.exhausted = true;
            return;
        }
        let Some((earliest, later)) = self.resolve(wall) else {
            return;
        };
        self.frontier_ms = earliest;
        for instant in std::iter::once(earliest).chain(later) {
            if instant > self.floor_ms {
                self.pending.insert(instant);
            }
        }
        if i64::try_from(MAX_DUE_MS).is_ok_and(|max| earliest > max) {
            self.exhausted = true;
        }
    }

    /// The instants of `wall`: its earliest, and the later one of a repeated wall time when
    /// both fire.
    fn resolve(&mut self, wall: NaiveDateTime) -> Option<(i64, Option<i64>)> {
        match self.cal.tz.from_local_datetime(&wall) {
            LocalResult::Single(time) => Some((time.timestamp_millis(), None)),
            LocalResult::Ambiguous(a, b) => {
                let (a, b) = (a.timestamp_millis(), b.timestamp_millis());
                Some((a.min(b), self.cal.both_in_fold.then_some(a.max(b))))
            }
            LocalResult::None => self.after_gap(wall).map(|instant| (instant, None)),
        }
    }

    /// The first instant after the gap that skips `wall`.
    fn after_gap(&mut self, wall: NaiveDateTime) -> Option<i64> {
        if let Some((from, end, instant)) = self.gap {
            if from <= wall && wall < end {
                return Some(instant);
            }
        }
        let mut probe = wall;
        for _ in 0..MAX_GAP_SECONDS {
            probe = probe.checked_add_signed(chrono::TimeDelta::seconds(1))?;
            let instant = match self.cal.tz.from_local_datetime(&probe) {
                LocalResult::Single(time) => time.timestamp_millis(),
                LocalResult::Ambiguous(a, b) => a.timestamp_millis().min(b.timestamp_millis()),
                LocalResult::None => continue,
            };
            self.gap = Some((wall, probe, instant));
            return Some(instant);
        }
        None
    }
}

impl Iterator for CronWalk<'_> {
    type Item = u64;

    fn next(&mut self) -> Option<u64> {
        loop {
            if let Some(&first) = self.pending.first() {
                if self.exhausted || first < self.frontier_ms {
                    self.pending.pop_first();
                    self.floor_ms = first;
                    return u64::try_from(first).ok().filter(|tick| *tick <= MAX_DUE_MS);
                }
            } else if self.exhausted {
                return None;
            }
            self.step();
        }
    }
}

#[cfg(test)]
mod tests;
