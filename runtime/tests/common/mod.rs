//! Helpers shared by the runtime integration tests.

pub mod matrix;
