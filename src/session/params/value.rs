//! [`Value`]: one parameter's value, and the conversions from Rust types.
//!
//! Why `Into<Value>` and a type trait, as sqlx's `bind` takes any `Encode +
//! Type`: the Rust type decides the Spark type (`5i32` is an `INT`, `5i64` a
//! `BIGINT`), so a call site reads as the query's types, and a `None` of an
//! `Option<T>` is a `NULL` of `T`'s type, as a typed column needs.

use std::collections::{BTreeMap, HashMap};

use super::types::{Date, Decimal, SqlType, Timestamp, TimestampNtz};

/// The value of one SQL parameter: a Spark literal.
///
/// Built from Rust values with `From` (`Value::from(5i32)`, `"text".into()`,
/// `Some(2.5f64).into()`, `vec![1i64, 2].into()`), or for types a Rust value
/// cannot name (a `NULL` of a given type, arrays of decimals or of dynamic
/// values) with the variants and [`Value::array`] / [`Value::map`].
///
/// | Rust | Spark |
/// |---|---|
/// | `bool` | `BOOLEAN` |
/// | `i8`, `i16`, `i32`, `i64` | `TINYINT`, `SMALLINT`, `INT`, `BIGINT` |
/// | `f32`, `f64` | `FLOAT`, `DOUBLE` |
/// | [`Decimal`] | `DECIMAL(p, s)` sent; Spark types it by its digits (see [`Decimal`]) |
/// | `String`, `&str` | `STRING` |
/// | `Vec<u8>`, `&[u8]` | `BINARY` |
/// | [`Date`], [`Timestamp`], [`TimestampNtz`] | `DATE`, `TIMESTAMP`, `TIMESTAMP_NTZ` |
/// | `Option<T>` | `T`'s type; `None` is a `NULL` of it |
/// | `Vec<T>`, `&[T]` | `ARRAY<T>` sent; an empty one arrives as `array<void>` |
/// | `BTreeMap<K, V>`, `HashMap<K, V>` | `MAP<K, V>` sent; an empty one arrives as `map<void,void>` |
///
/// What Spark does with the types sent (Spark 4.3, measured with
/// `typeof(:v)`; PySpark's arguments get the same): a decimal is typed by
/// its digits, not by the declared precision (`99.50` sent as
/// `DECIMAL(10,2)` is `decimal(4,2)`), and an empty array or map has no
/// element type (`array<void>`, `map<void,void>`). Spark 4.3 has no
/// option to keep the declared type; to have it, say it in the query:
/// `CAST(:v AS DECIMAL(10,2))` is `decimal(10,2)`, `CAST(:a AS
/// ARRAY<BIGINT>)` of an empty array is an empty `array<bigint>`.
///
/// With the `chrono` feature, `NaiveDate` is a `DATE`, `NaiveDateTime` a
/// `TIMESTAMP_NTZ` and `DateTime<Tz>` a `TIMESTAMP`.
///
/// ```
/// use spark_connect_retry::session::params::{SqlType, Value};
///
/// assert_eq!(Value::from(5i32).sql_type(), SqlType::Int);
/// assert_eq!(Value::from(None::<i64>), Value::Null(SqlType::Long));
/// assert_eq!(Value::from(Vec::<&str>::new()).sql_type(), SqlType::array(SqlType::String));
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Value {
    /// A `NULL` of the given type.
    Null(SqlType),
    /// `BOOLEAN`.
    Boolean(bool),
    /// `TINYINT`.
    Byte(i8),
    /// `SMALLINT`.
    Short(i16),
    /// `INT`.
    Int(i32),
    /// `BIGINT`.
    Long(i64),
    /// `FLOAT`.
    Float(f32),
    /// `DOUBLE`.
    Double(f64),
    /// `DECIMAL(p, s)`.
    Decimal(Decimal),
    /// `STRING`.
    String(String),
    /// `BINARY`.
    Binary(Vec<u8>),
    /// `DATE`.
    Date(Date),
    /// `TIMESTAMP`.
    Timestamp(Timestamp),
    /// `TIMESTAMP_NTZ`.
    TimestampNtz(TimestampNtz),
    /// `ARRAY<element>`: every item must be of `element`'s type (or a
    /// `NULL`), checked when the query is sent.
    Array {
        /// The element type.
        element: SqlType,
        /// The items, in order.
        items: Vec<Value>,
    },
    /// `MAP<key, value>`: keys of `key`'s type and never `NULL`, values of
    /// `value`'s type (or `NULL`), checked when the query is sent.
    Map {
        /// The key type.
        key: SqlType,
        /// The value type.
        value: SqlType,
        /// The entries, in order.
        entries: Vec<(Value, Value)>,
    },
}

impl Value {
    /// An `ARRAY<element>` of `items`.
    ///
    /// ```
    /// use spark_connect_retry::session::params::{Decimal, SqlType, Value};
    ///
    /// let prices = Value::array(
    ///     SqlType::decimal(6, 2),
    ///     [Decimal::new("9.99", 6, 2), Decimal::new("1200.50", 6, 2)],
    /// );
    /// assert_eq!(prices.sql_type().to_string(), "ARRAY<DECIMAL(6,2)>");
    /// ```
    pub fn array<I>(element: SqlType, items: I) -> Self
    where
        I: IntoIterator,
        I::Item: Into<Value>,
    {
        Value::Array {
            element,
            items: items.into_iter().map(Into::into).collect(),
        }
    }

    /// A `MAP<key, value>` of `entries`.
    pub fn map<I, K, V>(key: SqlType, value: SqlType, entries: I) -> Self
    where
        I: IntoIterator<Item = (K, V)>,
        K: Into<Value>,
        V: Into<Value>,
    {
        Value::Map {
            key,
            value,
            entries: entries
                .into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
        }
    }

    /// The value's Spark type.
    pub fn sql_type(&self) -> SqlType {
        match self {
            Value::Null(t) => t.clone(),
            Value::Boolean(_) => SqlType::Boolean,
            Value::Byte(_) => SqlType::Byte,
            Value::Short(_) => SqlType::Short,
            Value::Int(_) => SqlType::Int,
            Value::Long(_) => SqlType::Long,
            Value::Float(_) => SqlType::Float,
            Value::Double(_) => SqlType::Double,
            Value::Decimal(d) => SqlType::decimal(d.precision(), d.scale()),
            Value::String(_) => SqlType::String,
            Value::Binary(_) => SqlType::Binary,
            Value::Date(_) => SqlType::Date,
            Value::Timestamp(_) => SqlType::Timestamp,
            Value::TimestampNtz(_) => SqlType::TimestampNtz,
            Value::Array { element, .. } => SqlType::array(element.clone()),
            Value::Map { key, value, .. } => SqlType::map(key.clone(), value.clone()),
        }
    }
}

/// A Rust type whose values all have one Spark type, known without a value:
/// what lets `None::<T>` be a typed `NULL` and an empty `Vec<T>` a typed
/// array.
pub trait HasSqlType {
    /// The Spark type of every value of `Self`.
    fn sql_type() -> SqlType;
}

macro_rules! scalar {
    ($($ty:ty => $variant:ident, $sql:ident;)*) => {$(
        impl From<$ty> for Value {
            fn from(v: $ty) -> Self {
                Value::$variant(v.into())
            }
        }
        impl HasSqlType for $ty {
            fn sql_type() -> SqlType {
                SqlType::$sql
            }
        }
    )*};
}

scalar! {
    bool => Boolean, Boolean;
    i8 => Byte, Byte;
    i16 => Short, Short;
    i32 => Int, Int;
    i64 => Long, Long;
    f32 => Float, Float;
    f64 => Double, Double;
    String => String, String;
    &str => String, String;
    Vec<u8> => Binary, Binary;
    &[u8] => Binary, Binary;
    Date => Date, Date;
    Timestamp => Timestamp, Timestamp;
    TimestampNtz => TimestampNtz, TimestampNtz;
}

impl From<&String> for Value {
    fn from(v: &String) -> Self {
        Value::String(v.clone())
    }
}

impl From<Decimal> for Value {
    fn from(v: Decimal) -> Self {
        Value::Decimal(v)
    }
}

impl<T: Into<Value> + HasSqlType> From<Option<T>> for Value {
    fn from(v: Option<T>) -> Self {
        match v {
            Some(v) => v.into(),
            None => Value::Null(T::sql_type()),
        }
    }
}

impl<T: HasSqlType> HasSqlType for Option<T> {
    fn sql_type() -> SqlType {
        T::sql_type()
    }
}

impl<T: Into<Value> + HasSqlType> From<Vec<T>> for Value {
    fn from(v: Vec<T>) -> Self {
        Value::array(T::sql_type(), v)
    }
}

impl<T: Into<Value> + HasSqlType + Clone> From<&[T]> for Value {
    fn from(v: &[T]) -> Self {
        Value::array(T::sql_type(), v.iter().cloned())
    }
}

impl<T: HasSqlType> HasSqlType for Vec<T> {
    fn sql_type() -> SqlType {
        SqlType::array(T::sql_type())
    }
}

impl<K, V> From<BTreeMap<K, V>> for Value
where
    K: Into<Value> + HasSqlType,
    V: Into<Value> + HasSqlType,
{
    fn from(m: BTreeMap<K, V>) -> Self {
        Value::map(K::sql_type(), V::sql_type(), m)
    }
}

impl<K: HasSqlType, V: HasSqlType> HasSqlType for BTreeMap<K, V> {
    fn sql_type() -> SqlType {
        SqlType::map(K::sql_type(), V::sql_type())
    }
}

impl<K, V, S> From<HashMap<K, V, S>> for Value
where
    K: Into<Value> + HasSqlType,
    V: Into<Value> + HasSqlType,
{
    fn from(m: HashMap<K, V, S>) -> Self {
        Value::map(K::sql_type(), V::sql_type(), m)
    }
}

impl<K: HasSqlType, V: HasSqlType, S> HasSqlType for HashMap<K, V, S> {
    fn sql_type() -> SqlType {
        SqlType::map(K::sql_type(), V::sql_type())
    }
}

#[cfg(feature = "chrono")]
mod chrono_values {
    //! chrono's dates and times as parameters.

    use super::{HasSqlType, Value};
    use crate::session::params::types::{Date, SqlType, Timestamp, TimestampNtz};

    /// Days from 0001-01-01 (chrono's day 1 of the common era) to 1970-01-01.
    const CE_TO_UNIX_DAYS: i32 = 719_163;

    impl From<chrono::NaiveDate> for Date {
        fn from(d: chrono::NaiveDate) -> Self {
            use chrono::Datelike as _;
            Date::from_days_since_epoch(d.num_days_from_ce() - CE_TO_UNIX_DAYS)
        }
    }

    impl From<chrono::NaiveDateTime> for TimestampNtz {
        fn from(t: chrono::NaiveDateTime) -> Self {
            TimestampNtz::from_micros(t.and_utc().timestamp_micros())
        }
    }

    impl<Tz: chrono::TimeZone> From<chrono::DateTime<Tz>> for Timestamp {
        fn from(t: chrono::DateTime<Tz>) -> Self {
            Timestamp::from_micros(t.timestamp_micros())
        }
    }

    impl From<chrono::NaiveDate> for Value {
        fn from(d: chrono::NaiveDate) -> Self {
            Value::Date(d.into())
        }
    }

    impl From<chrono::NaiveDateTime> for Value {
        fn from(t: chrono::NaiveDateTime) -> Self {
            Value::TimestampNtz(t.into())
        }
    }

    impl<Tz: chrono::TimeZone> From<chrono::DateTime<Tz>> for Value {
        fn from(t: chrono::DateTime<Tz>) -> Self {
            Value::Timestamp(t.into())
        }
    }

    impl HasSqlType for chrono::NaiveDate {
        fn sql_type() -> SqlType {
            SqlType::Date
        }
    }

    impl HasSqlType for chrono::NaiveDateTime {
        fn sql_type() -> SqlType {
            SqlType::TimestampNtz
        }
    }

    impl<Tz: chrono::TimeZone> HasSqlType for chrono::DateTime<Tz> {
        fn sql_type() -> SqlType {
            SqlType::Timestamp
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn chrono_values_match_the_newtypes() {
            let d = chrono::NaiveDate::from_ymd_opt(2024, 2, 29).unwrap();
            assert_eq!(Date::from(d), Date::from_ymd(2024, 2, 29).unwrap());
            let ntz = d.and_hms_micro_opt(12, 30, 1, 7).unwrap();
            assert_eq!(
                TimestampNtz::from(ntz),
                Date::from_ymd(2024, 2, 29)
                    .unwrap()
                    .and_hms_micro(12, 30, 1, 7)
                    .unwrap()
            );
            let utc = ntz.and_utc();
            assert_eq!(
                Value::from(utc),
                Value::Timestamp(TimestampNtz::from(ntz).and_utc())
            );
            assert_eq!(
                Value::from(None::<chrono::NaiveDate>),
                Value::Null(SqlType::Date)
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rust_types_pick_the_spark_type() {
        let cases: Vec<(Value, SqlType)> = vec![
            (true.into(), SqlType::Boolean),
            (1i8.into(), SqlType::Byte),
            (1i16.into(), SqlType::Short),
            (1i32.into(), SqlType::Int),
            (1i64.into(), SqlType::Long),
            (1f32.into(), SqlType::Float),
            (1f64.into(), SqlType::Double),
            ("s".into(), SqlType::String),
            (String::from("s").into(), SqlType::String),
            (vec![1u8, 2].into(), SqlType::Binary),
            ((&[1u8][..]).into(), SqlType::Binary),
            (Date::from_days_since_epoch(0).into(), SqlType::Date),
            (Timestamp::from_micros(0).into(), SqlType::Timestamp),
            (TimestampNtz::from_micros(0).into(), SqlType::TimestampNtz),
            (Decimal::new("1", 3, 1).into(), SqlType::decimal(3, 1)),
            (None::<String>.into(), SqlType::String),
            (vec![Some(1i32), None].into(), SqlType::array(SqlType::Int)),
            (
                vec![vec![1i8], vec![]].into(),
                SqlType::array(SqlType::array(SqlType::Byte)),
            ),
            (
                (&[Date::from_days_since_epoch(1)][..]).into(),
                SqlType::array(SqlType::Date),
            ),
            (
                BTreeMap::<String, Vec<i64>>::new().into(),
                SqlType::map(SqlType::String, SqlType::array(SqlType::Long)),
            ),
            (
                HashMap::from([(1i32, Some(true))]).into(),
                SqlType::map(SqlType::Int, SqlType::Boolean),
            ),
        ];
        for (value, want) in cases {
            assert_eq!(value.sql_type(), want, "{value:?}");
        }
    }

    #[test]
    fn none_is_a_typed_null_and_some_is_the_value() {
        assert_eq!(Value::from(Some(3i16)), Value::Short(3));
        assert_eq!(
            Value::from(None::<Vec<i32>>),
            Value::Null(SqlType::array(SqlType::Int))
        );
        let v = Value::from(vec![Some("a"), None]);
        let Value::Array { items, .. } = v else {
            panic!()
        };
        assert_eq!(
            items,
            [Value::String("a".into()), Value::Null(SqlType::String)]
        );
    }
}
