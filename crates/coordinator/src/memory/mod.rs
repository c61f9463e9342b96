//! The in-memory coordinator: many nodes in one process over a shared [`MemoryCluster`].

mod coordinator;
mod hub;

pub use coordinator::MemoryCoordinator;
pub use hub::MemoryCluster;
