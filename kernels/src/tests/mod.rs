//! The kernels against an independent reference, edge cases, properties and a timing probe.

mod conversions;
mod edges;
mod fp8_paths;
mod matrix;
mod properties;
mod reference;
mod speed;
