//! What `ember check`, `ember bench` and the test suites share: comparison with the f64 reference,
//! timing and roofline floors, and input validation.

pub mod bench;
pub mod check;
pub mod validate;
