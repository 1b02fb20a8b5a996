//! The single error type of `ember-ga`.

use thiserror::Error;

/// Everything that can go wrong when building algebras, expressions or kernels.
///
/// Every variant names what was expected and what was received, so the message
/// can be shown to a user as is.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum GaError {
    /// The algebra specification could not be parsed.
    #[error("invalid algebra spec {spec:?}: expected \"P,Q\" or \"P,Q,R\" with non-negative integers (e.g. \"3,0,1\"), got {reason}")]
    BadSpec { spec: String, reason: String },

    /// The algebra has too many basis vectors.
    #[error("algebra Cl({p},{q},{r}) has n = p+q+r = {n} basis vectors; expected n <= {max}")]
    TooLarge { p: usize, q: usize, r: usize, n: usize, max: usize },

    /// Two operands live in different algebras.
    #[error("mismatched algebras: expected {expected}, got {got}")]
    AlgebraMismatch { expected: String, got: String },

    /// Two operands come from different symbol contexts (programs).
    #[error("mismatched symbol contexts: expected symbols of context #{expected}, got symbols of context #{got}")]
    ContextMismatch { expected: u64, got: u64 },

    /// A length, count or shape did not match.
    #[error("{what}: expected {expected}, got {got}")]
    Shape { what: String, expected: String, got: String },

    /// A name (expression, language, dtype, symbol group, ...) is unknown.
    #[error("unknown {kind} {got:?}; expected one of: {expected}")]
    Unknown { kind: String, got: String, expected: String },

    /// Any other invalid argument.
    #[error("invalid argument: {0}")]
    Invalid(String),
}

/// Result alias used throughout the crate.
pub type Result<T> = std::result::Result<T, GaError>;

impl GaError {
    pub(crate) fn shape(what: impl Into<String>, expected: impl ToString, got: impl ToString) -> Self {
        GaError::Shape { what: what.into(), expected: expected.to_string(), got: got.to_string() }
    }
    pub(crate) fn unknown(kind: &str, got: &str, expected: &[&str]) -> Self {
        GaError::Unknown { kind: kind.to_string(), got: got.to_string(), expected: expected.join(", ") }
    }
}
