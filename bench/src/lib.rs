//! Benchmarks: nccl-tests-style tables with same-run baselines.

#![forbid(unsafe_code)]
