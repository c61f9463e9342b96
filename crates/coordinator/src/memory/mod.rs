//! Placeholder while the memory backend is written.
/// A shared in-process cluster hub.
#[derive(Debug, Default)]
pub struct MemoryCluster;
/// A coordinator on a [`MemoryCluster`].
#[derive(Debug)]
pub struct MemoryCoordinator;
