#![doc = include_str!("../README.md")]

pub mod algebra;
pub mod cuda;
pub mod emit;
pub mod error;
pub mod eval;
mod finish;
pub mod ir;
pub mod layout;
pub mod lower;
pub mod multivector;
pub mod numeric;
pub mod poly;
pub mod print_cuda;
pub mod print_rust;
pub mod product;
pub mod program;
pub mod wgp;

pub use algebra::{Algebra, MAX_N};
pub use error::{GaError, Result};
pub use ir::{Builder, Ir, OpCounts, Val};
pub use multivector::Multivector;
pub use poly::{Poly, Sym};
pub use product::{Linear, Product};
pub use program::{Program, Shape};
