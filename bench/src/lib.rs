//! Benchmarks: nccl-tests-style tables with same-run baselines, and pictures of them.
//!
//! [`plot`] reads nccl-tests' tables (the `*_perf` binaries' output, and oxccl-perf's,
//! which adds a baseline's columns) and draws a comparison as one self-contained SVG:
//! bus bandwidth and time per call against message size, one line per series.

#![forbid(unsafe_code)]

mod error;
pub mod plot;

pub use error::{Error, Result};
