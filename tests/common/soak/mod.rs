//! The history-checked soak (issue 17, item 13): node processes under a fault schedule,
//! producers that schedule, replace, cancel and resend, a recorder of every fire, and an
//! offline checker of the recorded history. Used by `tests/e2e_soak.rs` only (it is not a
//! module of `common`, so the other test binaries do not build it).

pub mod checker;
pub mod cluster;
pub mod faults;
pub mod history;
pub mod producers;
pub mod recorder;
pub mod report;

#[cfg(test)]
mod checker_tests;
