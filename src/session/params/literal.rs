//! Values to protocol literals: the check of everything Spark would refuse,
//! then the `Expression.Literal` PySpark 4.3 sends for the same value.
//!
//! Pure (no I/O), so every rule is unit-tested here. Arrays and maps carry
//! their element types in `element_type` / `key_type` / `value_type`, as
//! PySpark 4.3 and the JVM client send them (Spark 4.1 added a root
//! `data_type` that 4.3 prefers when present; both are read by 4.3).

use crate::proto::data_type::{self as dt, Kind};
use crate::proto::expression::literal::{self as lit, LiteralType};
use crate::proto::expression::{ExprType, Literal};
use crate::proto::{DataType, Expression};

use super::error::ValueError;
use super::types::{Decimal, SqlType};
use super::value::Value;

/// Where inside a parameter a problem is: `[2]`, `{key 0}`, `{value 0}`,
/// outermost first.
pub(crate) struct Located {
    pub(crate) path: String,
    pub(crate) problem: ValueError,
}

impl From<ValueError> for Located {
    fn from(problem: ValueError) -> Self {
        Located {
            path: String::new(),
            problem,
        }
    }
}

fn inside(segment: String) -> impl FnOnce(Located) -> Located {
    move |mut l| {
        l.path.insert_str(0, &segment);
        l
    }
}

/// The literal expression of `value`.
pub(crate) fn expression(value: &Value) -> Result<Expression, Located> {
    Ok(Expression {
        expr_type: Some(ExprType::Literal(literal(value)?)),
    })
}

/// The protocol literal of `value`, or what Spark would refuse in it.
pub(crate) fn literal(value: &Value) -> Result<Literal, Located> {
    let literal_type = match value {
        Value::Null(t) => LiteralType::Null(data_type(t)?),
        Value::Boolean(v) => LiteralType::Boolean(*v),
        Value::Byte(v) => LiteralType::Byte(i32::from(*v)),
        Value::Short(v) => LiteralType::Short(i32::from(*v)),
        Value::Int(v) => LiteralType::Integer(*v),
        Value::Long(v) => LiteralType::Long(*v),
        Value::Float(v) => LiteralType::Float(*v),
        Value::Double(v) => LiteralType::Double(*v),
        Value::Decimal(d) => LiteralType::Decimal(decimal(d)?),
        Value::String(v) => LiteralType::String(v.clone()),
        Value::Binary(v) => LiteralType::Binary(v.clone()),
        Value::Date(v) => LiteralType::Date(v.days_since_epoch()),
        Value::Timestamp(v) => LiteralType::Timestamp(v.micros_since_epoch()),
        Value::TimestampNtz(v) => LiteralType::TimestampNtz(v.micros_since_epoch()),
        Value::Array { element, items } => {
            let element_type = data_type(element)?;
            let elements = items
                .iter()
                .enumerate()
                .map(|(i, item)| item_literal(item, element).map_err(inside(format!("[{i}]"))))
                .collect::<Result<_, _>>()?;
            LiteralType::Array(lit::Array {
                element_type: Some(element_type),
                elements,
            })
        }
        Value::Map {
            key,
            value,
            entries,
        } => {
            let key_type = data_type(key)?;
            if matches!(key, SqlType::Map(..)) {
                return Err(ValueError::MapKeyType { key: key.clone() }.into());
            }
            let value_type = data_type(value)?;
            let mut keys = Vec::with_capacity(entries.len());
            let mut values = Vec::with_capacity(entries.len());
            for (i, (k, v)) in entries.iter().enumerate() {
                if matches!(k, Value::Null(_)) {
                    return Err(inside(format!("{{key {i}}}"))(
                        ValueError::NullMapKey.into(),
                    ));
                }
                keys.push(item_literal(k, key).map_err(inside(format!("{{key {i}}}")))?);
                values.push(item_literal(v, value).map_err(inside(format!("{{value {i}}}")))?);
            }
            LiteralType::Map(lit::Map {
                key_type: Some(key_type),
                value_type: Some(value_type),
                keys,
                values,
            })
        }
    };
    Ok(Literal {
        literal_type: Some(literal_type),
        data_type: None,
    })
}

/// An item of a collection whose items are `element`s: of that type, or a
/// `NULL` of it (an untyped `NULL` is taken as one).
fn item_literal(item: &Value, element: &SqlType) -> Result<Literal, Located> {
    match item {
        Value::Null(SqlType::Null) => literal(&Value::Null(element.clone())),
        _ => {
            let found = item.sql_type();
            if &found != element {
                return Err(ValueError::ElementType {
                    expected: element.clone(),
                    found,
                }
                .into());
            }
            literal(item)
        }
    }
}

/// The protocol type of `t`.
pub(crate) fn data_type(t: &SqlType) -> Result<DataType, ValueError> {
    let kind = match t {
        SqlType::Null => Kind::Null(dt::Null::default()),
        SqlType::Boolean => Kind::Boolean(dt::Boolean::default()),
        SqlType::Byte => Kind::Byte(dt::Byte::default()),
        SqlType::Short => Kind::Short(dt::Short::default()),
        SqlType::Int => Kind::Integer(dt::Integer::default()),
        SqlType::Long => Kind::Long(dt::Long::default()),
        SqlType::Float => Kind::Float(dt::Float::default()),
        SqlType::Double => Kind::Double(dt::Double::default()),
        SqlType::Decimal { precision, scale } => {
            check_decimal_type(*precision, *scale)?;
            Kind::Decimal(dt::Decimal {
                scale: Some(i32::from(*scale)),
                precision: Some(i32::from(*precision)),
                type_variation_reference: 0,
            })
        }
        SqlType::String => Kind::String(dt::String::default()),
        SqlType::Binary => Kind::Binary(dt::Binary::default()),
        SqlType::Date => Kind::Date(dt::Date::default()),
        SqlType::Timestamp => Kind::Timestamp(dt::Timestamp::default()),
        SqlType::TimestampNtz => Kind::TimestampNtz(dt::TimestampNtz::default()),
        SqlType::Array(e) => Kind::Array(Box::new(dt::Array {
            element_type: Some(Box::new(data_type(e)?)),
            contains_null: true,
            type_variation_reference: 0,
        })),
        SqlType::Map(k, v) => {
            if matches!(**k, SqlType::Map(..)) {
                return Err(ValueError::MapKeyType { key: (**k).clone() });
            }
            Kind::Map(Box::new(dt::Map {
                key_type: Some(Box::new(data_type(k)?)),
                value_type: Some(Box::new(data_type(v)?)),
                value_contains_null: true,
                type_variation_reference: 0,
            }))
        }
    };
    Ok(DataType { kind: Some(kind) })
}

fn check_decimal_type(precision: u8, scale: u8) -> Result<(), ValueError> {
    if (1..=38).contains(&precision) && scale <= precision {
        Ok(())
    } else {
        Err(ValueError::DecimalType { precision, scale })
    }
}

/// The decimal literal: the value with exactly `scale` fractional digits
/// (Spark types the literal by its digits, so `1.5` as `DECIMAL(5,3)` is
/// sent as `1.500`), and the declared precision and scale.
fn decimal(d: &Decimal) -> Result<lit::Decimal, ValueError> {
    let (precision, scale) = (d.precision(), d.scale());
    check_decimal_type(precision, scale)?;
    let text = d.value();
    let not_a_number = || ValueError::DecimalNotANumber {
        value: text.to_owned(),
    };
    let (negative, body) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    let (int, frac) = body.split_once('.').unwrap_or((body, ""));
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if (int.is_empty() && frac.is_empty()) || !digits(int) || !digits(frac) {
        return Err(not_a_number());
    }
    let int = int.trim_start_matches('0');
    if frac.len() > usize::from(scale) || int.len() > usize::from(precision - scale) {
        return Err(ValueError::DecimalOverflow {
            value: text.to_owned(),
            precision,
            scale,
        });
    }
    let zero = int.is_empty() && frac.bytes().all(|b| b == b'0');
    let mut value = String::with_capacity(usize::from(precision) + 3);
    if negative && !zero {
        value.push('-');
    }
    value.push_str(if int.is_empty() { "0" } else { int });
    if scale > 0 {
        value.push('.');
        value.push_str(frac);
        value.extend(std::iter::repeat_n('0', usize::from(scale) - frac.len()));
    }
    Ok(lit::Decimal {
        value,
        precision: Some(i32::from(precision)),
        scale: Some(i32::from(scale)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::params::types::{Date, Timestamp, TimestampNtz};

    fn lt(v: impl Into<Value>) -> LiteralType {
        literal(&v.into()).ok().unwrap().literal_type.unwrap()
    }

    fn problem(v: impl Into<Value>) -> (String, ValueError) {
        let l = literal(&v.into()).err().unwrap();
        (l.path, l.problem)
    }

    fn dec(v: &str, p: u8, s: u8) -> Result<String, ValueError> {
        decimal(&Decimal::new(v, p, s)).map(|d| d.value)
    }

    #[test]
    fn scalars_take_the_literal_variant_pyspark_sends() {
        assert_eq!(lt(true), LiteralType::Boolean(true));
        assert_eq!(lt(-3i8), LiteralType::Byte(-3));
        assert_eq!(lt(-300i16), LiteralType::Short(-300));
        assert_eq!(lt(7i32), LiteralType::Integer(7));
        assert_eq!(lt(i64::MIN), LiteralType::Long(i64::MIN));
        assert_eq!(lt(1.5f32), LiteralType::Float(1.5));
        assert_eq!(lt(f64::INFINITY), LiteralType::Double(f64::INFINITY));
        assert_eq!(lt("x"), LiteralType::String("x".into()));
        assert_eq!(lt(vec![0u8, 255]), LiteralType::Binary(vec![0, 255]));
        assert_eq!(lt(Date::from_days_since_epoch(-5)), LiteralType::Date(-5));
        assert_eq!(lt(Timestamp::from_micros(9)), LiteralType::Timestamp(9));
        assert_eq!(
            lt(TimestampNtz::from_micros(-9)),
            LiteralType::TimestampNtz(-9)
        );
        let LiteralType::Null(t) = lt(None::<i16>) else {
            panic!()
        };
        assert_eq!(t.kind, Some(Kind::Short(Default::default())));
    }

    #[test]
    fn decimals_keep_precision_and_scale_and_pad_the_fraction() {
        assert_eq!(dec("12.34", 5, 3).unwrap(), "12.340");
        assert_eq!(dec("+007.5", 2, 1).unwrap(), "7.5");
        assert_eq!(dec("-0.000", 4, 3).unwrap(), "0.000");
        assert_eq!(dec("-.5", 1, 1).unwrap(), "-0.5");
        assert_eq!(dec("5.", 1, 0).unwrap(), "5");
        assert_eq!(
            dec("99999999999999999999999999999999999999", 38, 0).unwrap(),
            "99999999999999999999999999999999999999"
        );
        let d = decimal(&Decimal::new("1", 10, 2)).unwrap();
        assert_eq!((d.precision, d.scale), (Some(10), Some(2)));
    }

    #[test]
    fn decimals_spark_cannot_take_are_named() {
        for bad in [
            "NaN", "inf", "1e5", "12,5", "", "-", ".", "1.2.3", " 1", "0x10",
        ] {
            assert_eq!(
                dec(bad, 10, 2),
                Err(ValueError::DecimalNotANumber { value: bad.into() }),
                "{bad:?}"
            );
        }
        assert!(matches!(
            dec("1", 39, 0),
            Err(ValueError::DecimalType { precision: 39, .. })
        ));
        assert!(matches!(
            dec("1", 0, 0),
            Err(ValueError::DecimalType { .. })
        ));
        assert!(matches!(
            dec("1", 3, 4),
            Err(ValueError::DecimalType { .. })
        ));
        // Too many fractional digits, or integer digits.
        assert!(matches!(
            dec("1.2345", 5, 3),
            Err(ValueError::DecimalOverflow { .. })
        ));
        assert!(matches!(
            dec("123.4", 5, 3),
            Err(ValueError::DecimalOverflow { .. })
        ));
        // Leading zeros are not digits of the value.
        assert_eq!(dec("0012.3", 5, 3).unwrap(), "12.300");
        // The type of a NULL is checked too.
        assert!(matches!(
            problem(Value::Null(SqlType::decimal(40, 1))).1,
            ValueError::DecimalType { .. }
        ));
    }

    #[test]
    fn arrays_carry_their_element_type_even_when_empty() {
        let LiteralType::Array(a) = lt(Vec::<i64>::new()) else {
            panic!()
        };
        assert!(a.elements.is_empty());
        assert_eq!(
            a.element_type.unwrap().kind,
            Some(Kind::Long(Default::default()))
        );
        let LiteralType::Array(a) = lt(vec![Some("a"), None]) else {
            panic!()
        };
        assert_eq!(a.elements.len(), 2);
        assert!(matches!(
            a.elements[1].literal_type,
            Some(LiteralType::Null(_))
        ));
        // An untyped NULL item takes the element type.
        let LiteralType::Array(a) = lt(Value::array(SqlType::Int, [Value::Null(SqlType::Null)]))
        else {
            panic!()
        };
        let Some(LiteralType::Null(t)) = &a.elements[0].literal_type else {
            panic!()
        };
        assert_eq!(t.kind, Some(Kind::Integer(Default::default())));
    }

    #[test]
    fn mixed_collections_name_the_item() {
        let mixed = Value::array(SqlType::Int, [Value::Int(1), Value::Long(2)]);
        assert_eq!(
            problem(mixed),
            (
                "[1]".into(),
                ValueError::ElementType {
                    expected: SqlType::Int,
                    found: SqlType::Long
                }
            )
        );
        let nested = Value::array(
            SqlType::array(SqlType::decimal(5, 2)),
            [Value::array(
                SqlType::decimal(5, 2),
                [Decimal::new("1.5", 5, 2), Decimal::new("NaN", 5, 2)],
            )],
        );
        let (path, p) = problem(nested);
        assert_eq!(path, "[0][1]");
        assert!(matches!(p, ValueError::DecimalNotANumber { .. }));
        let null_key = Value::map(
            SqlType::String,
            SqlType::Int,
            [
                (Value::from("a"), Value::Int(1)),
                (Value::Null(SqlType::String), Value::Int(2)),
            ],
        );
        assert_eq!(
            problem(null_key),
            ("{key 1}".into(), ValueError::NullMapKey)
        );
        let bad_value = Value::map(SqlType::String, SqlType::Int, [("a", "b")]);
        assert_eq!(problem(bad_value).0, "{value 0}");
        let map_key = Value::map(
            SqlType::map(SqlType::Int, SqlType::Int),
            SqlType::Int,
            Vec::<(Value, Value)>::new(),
        );
        assert!(matches!(problem(map_key).1, ValueError::MapKeyType { .. }));
    }

    #[test]
    fn maps_keep_entry_order() {
        let m = Value::map(SqlType::String, SqlType::Long, [("b", 2i64), ("a", 1)]);
        let LiteralType::Map(m) = lt(m) else { panic!() };
        let keys: Vec<_> = m
            .keys
            .iter()
            .map(|k| k.literal_type.clone().unwrap())
            .collect();
        assert_eq!(
            keys,
            [
                LiteralType::String("b".into()),
                LiteralType::String("a".into())
            ]
        );
        assert_eq!(
            m.value_type.unwrap().kind,
            Some(Kind::Long(Default::default()))
        );
    }
}
