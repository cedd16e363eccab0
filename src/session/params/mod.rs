//! Parameterized SQL: values travel beside the query, never inside its text.
//!
//! A service that filters by a user's input and builds the SQL text by hand
//! is one quote away from an injection. Spark binds parameters itself: the
//! query names `:name` markers (or `?` markers, by position), and each value
//! travels as a typed literal in the plan, so `'; DROP TABLE t; --` is only a
//! string. [`SparkSession::sql_with`](super::SparkSession::sql_with) sends a
//! query with [`Params`]; it behaves as `sql()` does (eager, retried,
//! reattached and resumed like any query).
//!
//! ```no_run
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), spark_connect_retry::session::SparkError> {
//! use spark_connect_retry::session::SparkSession;
//! use spark_connect_retry::session::params::{Decimal, Params};
//!
//! let spark = SparkSession::builder().remote("sc://localhost:15002").build()?;
//! let rows = spark
//!     .sql_with(
//!         "SELECT * FROM orders WHERE customer = :who AND total > :min",
//!         Params::named()
//!             .bind("who", "O'Brien")
//!             .bind("min", Decimal::new("99.50", 10, 2)),
//!     )
//!     .await?;
//! let firsts = spark
//!     .sql_with("SELECT * FROM range(?) LIMIT ?", Params::positional().bind(100i64).bind(5i32))
//!     .await?;
//! # Ok(()) }
//! ```
//!
//! # Why this shape
//!
//! * **`.bind()` chains, as sqlx** (`query(..).bind(v)`) and the Rust
//!   `spark-connect` crate: one generic `bind` whose Rust type picks the
//!   Spark type ([`Value`]'s table). `None::<T>` is a `NULL` of `T`'s type,
//!   an empty `Vec<T>` an `ARRAY<T>`: Spark needs the type even without a
//!   value.
//! * **Named and positional are two types**, [`NamedParams`] and
//!   [`PositionalParams`], because Spark refuses a query that mixes them;
//!   the official Rust client takes a map or a list for the same reason.
//! * **Nothing fails while binding**, as with every builder of this crate:
//!   names and values are checked when the query is sent, and a value Spark
//!   cannot take fails with a [`ParamError`] naming the parameter (and the
//!   item inside an array or map) before anything is sent.
//! * **Dependency-free values**: decimals as text with precision and scale
//!   (no float in between), dates and timestamps as Spark's own day and
//!   microsecond counts; the `chrono` feature converts chrono's types.
//!
//! On the wire the parameters are the SQL relation's `named_arguments` or
//! `pos_arguments`, literal expressions, as PySpark 4.3 sends them.

mod error;
mod literal;
mod types;
mod value;

pub use error::{ParamError, ParamRef, ValueError};
pub use types::{Date, Decimal, SqlType, Timestamp, TimestampNtz};
pub use value::{HasSqlType, Value};

use std::collections::BTreeMap;

use crate::proto;

/// The parameters of one query: named or positional.
///
/// Made from [`Params::named`] or [`Params::positional`]; every
/// [`SparkSession::sql_with`](super::SparkSession::sql_with) argument
/// converts into it.
#[derive(Debug, Clone, PartialEq)]
pub struct Params(Bound);

#[derive(Debug, Clone, PartialEq)]
enum Bound {
    Named(Vec<(String, Value)>),
    Positional(Vec<Value>),
}

impl Params {
    /// Parameters for `:name` markers.
    pub fn named() -> NamedParams {
        NamedParams::default()
    }

    /// Parameters for `?` markers, in order.
    pub fn positional() -> PositionalParams {
        PositionalParams::default()
    }

    /// The SQL relation of `query` with these parameters, as
    /// [`sql_with`](super::SparkSession::sql_with) sends it; for plans built
    /// by hand (a `SqlCommand`'s `input`, a relation for
    /// [`execute_plan`](super::SparkSession::execute_plan)).
    ///
    /// ```
    /// use spark_connect_retry::proto::expression::{ExprType, literal::LiteralType};
    /// use spark_connect_retry::session::params::Params;
    ///
    /// let params = Params::named()
    ///     .bind("id", 5i32)
    ///     .bind("name", "'; DROP TABLE t; --");
    /// let sql = Params::from(params)
    ///     .sql_relation("SELECT * FROM t WHERE id = :id AND name = :name")
    ///     .unwrap();
    /// let literal = |name: &str| match &sql.named_arguments[name].expr_type {
    ///     Some(ExprType::Literal(l)) => l.literal_type.clone().unwrap(),
    ///     other => panic!("{other:?}"),
    /// };
    /// assert_eq!(literal("id"), LiteralType::Integer(5));
    /// assert_eq!(literal("name"), LiteralType::String("'; DROP TABLE t; --".into()));
    /// // The query text is sent as given: the values are not in it.
    /// assert_eq!(sql.query, "SELECT * FROM t WHERE id = :id AND name = :name");
    /// ```
    pub fn sql_relation(&self, query: &str) -> Result<proto::Sql, ParamError> {
        let mut sql = proto::Sql {
            query: query.to_owned(),
            ..Default::default()
        };
        match &self.0 {
            Bound::Named(args) => {
                let mut named = BTreeMap::new();
                for (name, value) in args {
                    if !is_marker_name(name) {
                        return Err(ParamError::InvalidName { name: name.clone() });
                    }
                    let param = ParamRef::Named(name.clone());
                    let expr = literal::expression(value).map_err(|l| located(param, l))?;
                    if named.insert(name.clone(), expr).is_some() {
                        return Err(ParamError::DuplicateName { name: name.clone() });
                    }
                }
                sql.named_arguments = named;
            }
            Bound::Positional(args) => {
                sql.pos_arguments = args
                    .iter()
                    .enumerate()
                    .map(|(i, value)| {
                        literal::expression(value)
                            .map_err(|l| located(ParamRef::Positional(i + 1), l))
                    })
                    .collect::<Result<_, _>>()?;
            }
        }
        Ok(sql)
    }
}

fn located(param: ParamRef, l: literal::Located) -> ParamError {
    ParamError::InvalidValue {
        param,
        path: l.path,
        problem: l.problem,
    }
}

/// A name a `:name` marker can have: a letter or `_`, then letters, digits
/// or `_` (ASCII). Spark reads a marker as an identifier; this is the part
/// of its identifiers that never needs quoting.
fn is_marker_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

impl Value {
    /// The protocol literal this value is sent as, or what Spark would
    /// refuse in it (the query's [`ParamError`] also says where).
    ///
    /// ```
    /// use spark_connect_retry::proto::expression::literal::LiteralType;
    /// use spark_connect_retry::session::params::{Date, Value};
    ///
    /// let lit = Value::from(Date::from_ymd(2024, 3, 1).unwrap()).to_literal().unwrap();
    /// assert_eq!(lit.literal_type, Some(LiteralType::Date(19783)));
    /// let lit = Value::from(None::<bool>).to_literal().unwrap();
    /// assert!(matches!(lit.literal_type, Some(LiteralType::Null(_))));
    /// ```
    pub fn to_literal(&self) -> Result<proto::expression::Literal, ValueError> {
        literal::literal(self).map_err(|l| l.problem)
    }
}

/// Values for `:name` markers: `Params::named().bind("id", 5)`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NamedParams(Vec<(String, Value)>);

impl NamedParams {
    /// Binds `value` to the marker `:name` (written without the colon).
    pub fn bind(mut self, name: impl Into<String>, value: impl Into<Value>) -> Self {
        self.0.push((name.into(), value.into()));
        self
    }
}

impl<N: Into<String>, V: Into<Value>> FromIterator<(N, V)> for NamedParams {
    fn from_iter<I: IntoIterator<Item = (N, V)>>(iter: I) -> Self {
        NamedParams(
            iter.into_iter()
                .map(|(n, v)| (n.into(), v.into()))
                .collect(),
        )
    }
}

/// Values for `?` markers, in order: `Params::positional().bind(5).bind("x")`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PositionalParams(Vec<Value>);

impl PositionalParams {
    /// Binds `value` to the next `?` marker.
    pub fn bind(mut self, value: impl Into<Value>) -> Self {
        self.0.push(value.into());
        self
    }
}

impl<V: Into<Value>> FromIterator<V> for PositionalParams {
    fn from_iter<I: IntoIterator<Item = V>>(iter: I) -> Self {
        PositionalParams(iter.into_iter().map(Into::into).collect())
    }
}

impl From<NamedParams> for Params {
    fn from(p: NamedParams) -> Self {
        Params(Bound::Named(p.0))
    }
}

impl From<PositionalParams> for Params {
    fn from(p: PositionalParams) -> Self {
        Params(Bound::Positional(p.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::expression::ExprType;
    use crate::proto::expression::literal::LiteralType;

    /// `sql_relation` straight on named or positional parameters.
    trait Relation {
        fn sql_relation(self, query: &str) -> Result<proto::Sql, ParamError>;
    }

    impl<P: Into<Params>> Relation for P {
        fn sql_relation(self, query: &str) -> Result<proto::Sql, ParamError> {
            Params::sql_relation(&self.into(), query)
        }
    }

    fn lit(e: &proto::Expression) -> LiteralType {
        match &e.expr_type {
            Some(ExprType::Literal(l)) => l.literal_type.clone().unwrap(),
            None => panic!("no literal"),
        }
    }

    #[test]
    fn named_parameters_are_named_arguments() {
        let sql = Params::named()
            .bind("b", 2i64)
            .bind("a", "x")
            .sql_relation("SELECT :a, :b")
            .unwrap();
        assert!(sql.pos_arguments.is_empty() && sql.args.is_empty() && sql.pos_args.is_empty());
        let names: Vec<&str> = sql.named_arguments.keys().map(String::as_str).collect();
        assert_eq!(names, ["a", "b"], "sorted: the same bytes in every process");
        assert_eq!(lit(&sql.named_arguments["b"]), LiteralType::Long(2));
    }

    #[test]
    fn positional_parameters_keep_their_order() {
        let sql: proto::Sql = [3i32, 1, 2]
            .into_iter()
            .collect::<PositionalParams>()
            .sql_relation("SELECT ?, ?, ?")
            .unwrap();
        let got: Vec<LiteralType> = sql.pos_arguments.iter().map(lit).collect();
        assert_eq!(got, [3, 1, 2].map(LiteralType::Integer),);
        assert!(sql.named_arguments.is_empty());
    }

    #[test]
    fn names_that_are_not_markers_are_refused() {
        for bad in ["", "1a", "a-b", ":a", "a b", "é", "a;"] {
            let e = Params::named()
                .bind(bad, 1i32)
                .sql_relation("q")
                .unwrap_err();
            assert_eq!(e, ParamError::InvalidName { name: bad.into() }, "{bad:?}");
        }
        for good in ["a", "_", "A_1", "_x9"] {
            assert!(Params::named().bind(good, 1i32).sql_relation("q").is_ok());
        }
        let e = Params::named()
            .bind("id", 1i32)
            .bind("id", 2i32)
            .sql_relation("q")
            .unwrap_err();
        assert_eq!(e, ParamError::DuplicateName { name: "id".into() });
        assert_eq!(e.to_string(), "SQL parameter `:id` is bound twice");
    }

    #[test]
    fn a_bad_value_names_its_parameter() {
        let e = Params::named()
            .bind("ok", 1i32)
            .bind("price", Decimal::new("NaN", 10, 2))
            .sql_relation("q")
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "SQL parameter `:price`: \"NaN\" is not a decimal number (digits, an optional sign and decimal point)"
        );
        let e = Params::positional()
            .bind(1i32)
            .bind(Value::array(
                SqlType::Int,
                [Value::Int(1), Value::from("two")],
            ))
            .sql_relation("q")
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "SQL parameter `?` #2 at [1]: a STRING where the collection holds INT"
        );
        let ParamError::InvalidValue { param, .. } = e else {
            panic!()
        };
        assert_eq!(param, ParamRef::Positional(2));
        let e = Params::named()
            .bind("d", Decimal::new("1", 39, 0))
            .sql_relation("q")
            .unwrap_err();
        assert!(
            e.to_string().contains("DECIMAL(39,0) is not a Spark type"),
            "{e}"
        );
    }
}
