//! Recurring schedules, the pure part: what a schedule's spec is and when its ticks fall.
//!
//! - [`spec`]: the validated spec ([`RecurringSpec`]), parsed from what a user types
//!   ([`RawSpec`], from the CLI, the HTTP API or `cluster.yaml`), and its canonical stored form
//!   ([`RecurringSpec::to_canonical_json`]), compared byte for byte to tell an unchanged upsert.
//! - [`calendar`]: the ticks of a cadence ([`Calendar`]): cron expressions read in an IANA zone
//!   with DESIGN.md's daylight saving rules, or `every` durations from an anchor.
//!
//! Nothing here touches Redis or the clock: every function takes the times it works on.

pub mod calendar;
pub mod spec;

pub use calendar::{Calendar, TICKS_IN_MAX_STEPS};
pub use spec::{Cadence, Misfire, Overlap, RawSpec, RecurringSpec, ScheduleName, SpecError};
