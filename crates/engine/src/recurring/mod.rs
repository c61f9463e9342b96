//! Recurring schedules, the pure part: what a schedule's spec is and when its ticks fall.
//!
//! - [`spec`]: the validated spec ([`RecurringSpec`]), parsed from what a user types
//!   ([`RawSpec`], from the CLI, the HTTP API or `cluster.yaml`), and its canonical stored form
//!   ([`RecurringSpec::to_canonical_json`]), compared byte for byte to tell an unchanged upsert.
//! - [`calendar`]: the ticks of a cadence ([`Calendar`]): cron expressions read in an IANA zone
//!   with DESIGN.md's daylight saving rules, or `every` durations from an anchor.
//!
//! - the state of a schedule in the store and its public view ([`RecurringSchedule`]), the
//!   [`Scheduler`](crate::Scheduler) methods that change it (`set_recurring`, `pause_recurring`,
//!   ...), and the driver that turns ticks into tasks with no leader (see `driver.rs`: one
//!   single-slot compare-and-set per step, tick creation made idempotent by the partition's
//!   tick ledger).
//!
//! The spec and the calendar touch neither Redis nor the clock: every function takes the
//! times it works on.

mod api;
pub mod calendar;
mod driver;
mod record;
pub mod spec;

pub(crate) use api::parse_tick_id;
pub use api::tick_id;
pub use calendar::{Calendar, TICKS_IN_MAX_STEPS};
pub(crate) use driver::run_driver;
pub use driver::{OVERLAP_SKIP_LEAD, TICK_LEAD};
pub use record::{RecurringSchedule, RecurringSet, UpsertResult};
pub use spec::{Cadence, Misfire, Overlap, RawSpec, RecurringSpec, ScheduleName, SpecError};
