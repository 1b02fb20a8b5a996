//! ember-ga: geometric-algebra engine and kernel generator.

pub mod algebra;
pub mod error;
pub mod numeric;
pub mod poly;
pub mod product;
pub mod wgp;

pub use algebra::{Algebra, MAX_N};
pub use error::{GaError, Result};
pub use product::{Linear, Product};
