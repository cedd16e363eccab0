//! Why a parameter cannot be sent: [`ParamError`], naming the parameter.
//!
//! A bad value (a decimal that does not fit its type, an array of mixed
//! types) is the caller's mistake, found before anything reaches the server,
//! so the error says which parameter and where inside it, never just that
//! the query failed.

use std::fmt;

use super::types::SqlType;

/// A parameter a query cannot be sent with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ParamError {
    /// The name cannot be a `:name` marker.
    #[error(
        "invalid SQL parameter name {name:?}: a marker name is a letter or `_` followed by letters, digits or `_`"
    )]
    InvalidName {
        /// The name given.
        name: String,
    },
    /// The same name was bound twice.
    #[error("SQL parameter `:{name}` is bound twice")]
    DuplicateName {
        /// The name.
        name: String,
    },
    /// A value Spark cannot take.
    #[error("SQL parameter {param}{at}: {problem}", at = Path(.path))]
    InvalidValue {
        /// Which parameter.
        param: ParamRef,
        /// Where inside it: empty for the value itself, else e.g. `[2]` for
        /// an array's third item or `{key 0}` for a map's first key.
        path: String,
        /// What is wrong.
        problem: ValueError,
    },
}

/// A parameter, by name or by position.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ParamRef {
    /// The `:name` marker of this name.
    Named(String),
    /// The `?` marker at this position, counting from 1.
    Positional(usize),
}

impl fmt::Display for ParamRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParamRef::Named(name) => write!(f, "`:{name}`"),
            ParamRef::Positional(n) => write!(f, "`?` #{n}"),
        }
    }
}

struct Path<'a>(&'a str);

impl fmt::Display for Path<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            Ok(())
        } else {
            write!(f, " at {}", self.0)
        }
    }
}

/// What is wrong with a value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ValueError {
    /// The decimal's text is not a number (`NaN`, `1e5`, `12,5`, empty).
    #[error("{value:?} is not a decimal number (digits, an optional sign and decimal point)")]
    DecimalNotANumber {
        /// The text given.
        value: String,
    },
    /// The declared precision is outside 1 to 38, or the scale exceeds it.
    #[error(
        "DECIMAL({precision},{scale}) is not a Spark type: precision is 1 to 38, scale 0 to precision"
    )]
    DecimalType {
        /// The declared precision.
        precision: u8,
        /// The declared scale.
        scale: u8,
    },
    /// The decimal has more digits than its type holds.
    #[error("{value} does not fit DECIMAL({precision},{scale})")]
    DecimalOverflow {
        /// The text given.
        value: String,
        /// The declared precision.
        precision: u8,
        /// The declared scale.
        scale: u8,
    },
    /// An item of an array or map is not of the declared element type.
    #[error("a {found} where the collection holds {expected}")]
    ElementType {
        /// The declared type.
        expected: SqlType,
        /// The item's type.
        found: SqlType,
    },
    /// A map key is `NULL`, which Spark's maps do not allow.
    #[error("a map key is NULL")]
    NullMapKey,
    /// A map's key type is a map, which Spark does not allow.
    #[error("a map's keys cannot be of type {key}")]
    MapKeyType {
        /// The declared key type.
        key: SqlType,
    },
}
