//! Placeholder: the in-memory backend is being written.
use crate::model::StoreOptions;

/// The in-memory task store.
#[derive(Debug)]
pub struct MemoryStore {
    _options: StoreOptions,
}

impl MemoryStore {
    /// A new empty store.
    pub fn new(options: StoreOptions) -> Self {
        MemoryStore { _options: options }
    }
}
