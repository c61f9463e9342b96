//! Placeholder: configuration types are being written.
