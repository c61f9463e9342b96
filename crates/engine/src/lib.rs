//! # delayq-engine
//!
//! The scheduler runtime that applications embed.

#![warn(missing_docs)]

pub mod config;
