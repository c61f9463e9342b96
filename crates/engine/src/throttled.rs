//! Warnings about events that can come in floods (unconfirmed writes, handlers that could not
//! start for lack of resources), logged at most once per [`LOG_PERIOD`] with the count since
//! the previous one: the first of a burst at once, the rest of it within a period.

use std::collections::btree_map::Entry;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// At most one warning per this period (per log).
pub(crate) const LOG_PERIOD: Duration = Duration::from_secs(10);

/// Writes one warning: the key, how many events since the last warning, the milliseconds
/// since that warning (`None` for the first), and the detail of the latest event.
pub(crate) type Emit<K, D> = fn(&K, u64, Option<u64>, &D);

/// A rate-limited warning, counted per key (an operation, a queue), process-wide like the
/// metrics it goes with.
pub(crate) struct ThrottledLog<K, D> {
    state: Mutex<State<K, D>>,
    emit: Emit<K, D>,
}

/// What has been logged, and what is still to be.
struct State<K, D> {
    /// When the last warning went out.
    last_logged: Option<Instant>,
    /// Events since then, by key, with the latest detail.
    pending: BTreeMap<K, (u64, D)>,
    /// Whether a task is due to log `pending` once the period is over.
    flush_armed: bool,
}

impl<K, D> ThrottledLog<K, D>
where
    K: Ord + Send + 'static,
    D: Send + 'static,
{
    /// A log that writes its warnings through `emit`.
    pub(crate) const fn new(emit: Emit<K, D>) -> Self {
        ThrottledLog {
            state: Mutex::new(State {
                last_logged: None,
                pending: BTreeMap::new(),
                flush_armed: false,
            }),
            emit,
        }
    }

    /// Counts one event of `key` and logs it now or within the period.
    pub(crate) fn record(&'static self, key: K, detail: D) {
        let now = Instant::now();
        let mut state = self.state.lock();
        match state.pending.entry(key) {
            Entry::Vacant(entry) => {
                entry.insert((1, detail));
            }
            Entry::Occupied(mut entry) => {
                let (count, latest) = entry.get_mut();
                *count += 1;
                *latest = detail;
            }
        }
        if state.flush_armed {
            return;
        }
        let next = state.last_logged.map(|last| last + LOG_PERIOD);
        match next {
            Some(next) if next > now => {
                state.flush_armed = true;
                drop(state);
                // Outside a runtime (never on the firing path) the count waits for the next one.
                if let Ok(handle) = tokio::runtime::Handle::try_current() {
                    handle.spawn(async move {
                        tokio::time::sleep_until(next.into()).await;
                        let mut state = self.state.lock();
                        state.flush_armed = false;
                        self.emit_pending(&mut state, Instant::now());
                    });
                } else {
                    self.state.lock().flush_armed = false;
                }
            }
            _ => self.emit_pending(&mut state, now),
        }
    }

    fn emit_pending(&self, state: &mut State<K, D>, now: Instant) {
        let since_last_ms = state
            .last_logged
            .map(|last| now.duration_since(last).as_millis() as u64);
        for (key, (count, detail)) in std::mem::take(&mut state.pending) {
            (self.emit)(&key, count, since_last_ms, &detail);
        }
        state.last_logged = Some(now);
    }
}
