//! SQL parameters of the test server's grammar: integer literals bound to
//! `:name` and `?` markers where the grammar takes a number
//! (`range(:n)`, `range(?, ?)`), so that a client's parameterized query can
//! be run, replayed and reattached here like any other.

use std::collections::BTreeMap;

use crate::error::{SparkException, unsupported};
use spark_connect_retry::proto::expression::{ExprType, Literal, literal::LiteralType};
use spark_connect_retry::proto::{Expression, Sql};

/// A marker's value: an integer, or a literal of another type (which the
/// grammar cannot use).
type Bound = Option<i64>;

/// The parameters of one SQL relation.
#[derive(Debug, Default)]
pub(crate) struct Args {
    named: BTreeMap<String, Bound>,
    positional: Vec<Bound>,
}

fn integer(l: &Literal) -> Bound {
    match l.literal_type {
        Some(LiteralType::Byte(v) | LiteralType::Short(v) | LiteralType::Integer(v)) => {
            Some(i64::from(v))
        }
        Some(LiteralType::Long(v)) => Some(v),
        _ => None,
    }
}

fn expression(e: &Expression) -> Bound {
    match &e.expr_type {
        Some(ExprType::Literal(l)) => integer(l),
        None => None,
    }
}

impl Args {
    /// The parameters `sql` carries, in either of the protocol's forms
    /// (`named_arguments` / `pos_arguments`, or the older `args` /
    /// `pos_args`).
    pub(crate) fn of(sql: &Sql) -> Self {
        let mut named: BTreeMap<String, Bound> = sql
            .args
            .iter()
            .map(|(k, v)| (k.clone(), integer(v)))
            .collect();
        named.extend(
            sql.named_arguments
                .iter()
                .map(|(k, v)| (k.clone(), expression(v))),
        );
        let mut positional: Vec<Bound> = sql.pos_args.iter().map(integer).collect();
        positional.extend(sql.pos_arguments.iter().map(expression));
        Args { named, positional }
    }

    /// The value of `:name`.
    pub(crate) fn named(&self, name: &str) -> Result<i64, SparkException> {
        match self.named.get(name) {
            Some(v) => v.ok_or_else(|| not_an_integer(name)),
            None => Err(unbound(name)),
        }
    }

    /// The value of the `index`th `?` (from 0).
    pub(crate) fn positional(&self, index: usize) -> Result<i64, SparkException> {
        match self.positional.get(index) {
            Some(v) => v.ok_or_else(|| not_an_integer(&format!("_{index}"))),
            None => Err(unbound(&format!("_{index}"))),
        }
    }
}

fn not_an_integer(name: &str) -> SparkException {
    unsupported(&format!("parameter {name}: only integer literals"))
}

/// Spark's `UNBOUND_SQL_PARAMETER` (SQLSTATE 42P02).
fn unbound(name: &str) -> SparkException {
    SparkException::new(
        "UNBOUND_SQL_PARAMETER",
        "42P02",
        format!(
            "Found the unbound parameter: {name}. Please, fix `args` and provide a mapping of \
             the parameter to either a SQL literal or collection constructor functions such as \
             `map()`, `array()`, `struct()`."
        ),
    )
    .with_parameter("name", name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lit(t: LiteralType) -> Literal {
        Literal {
            literal_type: Some(t),
            data_type: None,
        }
    }

    #[test]
    fn both_forms_of_the_protocol_bind() {
        let sql = Sql {
            query: "q".into(),
            args: [("old".to_owned(), lit(LiteralType::Short(3)))].into(),
            named_arguments: [(
                "n".to_owned(),
                Expression {
                    expr_type: Some(ExprType::Literal(lit(LiteralType::Long(10)))),
                },
            )]
            .into(),
            pos_args: vec![lit(LiteralType::Integer(1))],
            pos_arguments: vec![Expression {
                expr_type: Some(ExprType::Literal(lit(LiteralType::String("x".into())))),
            }],
        };
        let args = Args::of(&sql);
        assert_eq!(args.named("n").unwrap(), 10);
        assert_eq!(args.named("old").unwrap(), 3);
        assert_eq!(args.positional(0).unwrap(), 1);
        let e = args.positional(1).unwrap_err();
        assert_eq!(e.classes[0], "java.lang.UnsupportedOperationException");
        let e = args.named("missing").unwrap_err();
        assert_eq!(e.error_class.as_deref(), Some("UNBOUND_SQL_PARAMETER"));
        assert_eq!(e.message_parameters["name"], "missing");
    }
}
