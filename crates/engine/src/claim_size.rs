//! How many tasks a partition's next claim asks for: small at first, doubling while the
//! claims come back full, up to `engine.claim_batch`.
//!
//! A claim takes its handler slots before it is sent and holds them until it returns (see
//! `partition.rs`), so a claim that asks for more than is due keeps slots from the other
//! partitions of its queue for a round trip. With a fixed size of 256 and 512 slots per node,
//! only two partitions of a node could have a claim pending at a time, although each found
//! only a few tasks due while single schedules streamed in (BENCHMARKS.md, issue 18).
//!
//! The decision: a partition's first claim of a round asks for [`FIRST_CLAIM`] tasks (at
//! most `claim_batch`, and never more than the free slots); every claim that comes back full
//! (as many tasks as it asked for: more may be due) doubles the next one, up to
//! `claim_batch`; a claim that comes back short, a paused queue, a limit that made the
//! claim wait, or an error start over at [`FIRST_CLAIM`]. A backlog therefore reaches the
//! full `claim_batch` after a few claims (32, 64, 128, 256: three round trips), and a
//! partition that finds a few tasks at a time holds at most [`FIRST_CLAIM`] slots while its
//! claim waits. The size lives as long as the partition's worker: a round cut short by a
//! due look goes on at the size it had reached.

/// The size of a partition's first claim of a round (and after any claim that came back
/// short).
pub(crate) const FIRST_CLAIM: usize = 32;

/// The size of a partition's next claim.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ClaimSize {
    next: usize,
    max: usize,
    /// Whether the last claim came back full: more is due than was claimed.
    backlogged: bool,
}

impl ClaimSize {
    /// Starts at [`FIRST_CLAIM`], never more than `max` (`engine.claim_batch`, at least 1).
    pub(crate) fn new(max: usize) -> ClaimSize {
        let max = max.max(1);
        ClaimSize {
            next: FIRST_CLAIM.min(max),
            max,
            backlogged: false,
        }
    }

    /// How many tasks the next claim asks for (fewer if fewer slots are free).
    pub(crate) fn next(&self) -> usize {
        self.next
    }

    /// A claim asked for `wanted` tasks and got `got`: a full one doubles the next size (up
    /// to the maximum), a short one starts over.
    pub(crate) fn claimed(&mut self, wanted: usize, got: usize) {
        self.backlogged = got >= wanted;
        if got >= wanted {
            self.next = self.next.saturating_mul(2).min(self.max);
        } else {
            self.reset();
        }
    }

    /// Starts over at [`FIRST_CLAIM`] (a short claim, a pause, a limit, an error).
    pub(crate) fn reset(&mut self) {
        self.next = FIRST_CLAIM.min(self.max);
        self.backlogged = false;
    }

    /// Whether the last claim came back full (more was due than it took): the next claim
    /// may wait a moment for more handler slots (`partition.rs`, `BUSY_GATHERING`).
    pub(crate) fn backlogged(&self) -> bool {
        self.backlogged
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn starts_small_doubles_while_full_and_starts_over_when_short() {
        let mut size = ClaimSize::new(256);
        assert_eq!(size.next(), 32);
        size.claimed(32, 32);
        assert_eq!(size.next(), 64);
        size.claimed(64, 64);
        size.claimed(128, 128);
        assert_eq!(size.next(), 256);
        size.claimed(256, 256);
        assert_eq!(size.next(), 256, "claim_batch bounds it");
        size.claimed(256, 3);
        assert_eq!(size.next(), 32);
    }

    #[test]
    fn a_claim_batch_below_the_first_size_bounds_every_claim() {
        let mut size = ClaimSize::new(8);
        assert_eq!(size.next(), 8);
        size.claimed(8, 8);
        assert_eq!(size.next(), 8);
        assert_eq!(ClaimSize::new(0).next(), 1);
    }

    #[test]
    fn a_claim_cut_by_the_free_slots_still_grows_when_full() {
        let mut size = ClaimSize::new(256);
        // Only 5 slots were free and 5 tasks came: more may be due.
        size.claimed(5, 5);
        assert_eq!(size.next(), 64);
        size.reset();
        assert_eq!(size.next(), 32);
    }
}
