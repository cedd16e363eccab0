//! The Spark types a parameter can have, and the values Rust has no type
//! for: decimals with their precision and scale, dates and timestamps.
//!
//! Why newtypes and no date or decimal crate: a parameter only has to reach
//! Spark exactly, and Spark's own representation is plain numbers (days and
//! microseconds since the epoch) and decimal strings. Carrying those keeps
//! the crate free of a calendar dependency; the `chrono` feature adds
//! conversions from chrono's types for programs that already use it.

use std::fmt;

/// A Spark SQL data type, as a parameter declares it.
///
/// It types a `NULL` ([`Value::Null`](super::Value::Null)) and the elements of
/// an array or map, so that even an empty array has a known element type.
/// Displays as Spark's DDL (`DECIMAL(5,3)`, `ARRAY<INT>`).
///
/// ```
/// use spark_connect_retry::session::params::SqlType;
///
/// let t = SqlType::map(SqlType::String, SqlType::array(SqlType::decimal(5, 3)));
/// assert_eq!(t.to_string(), "MAP<STRING, ARRAY<DECIMAL(5,3)>>");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SqlType {
    /// `VOID`, the type of an untyped `NULL`.
    Null,
    /// `BOOLEAN`.
    Boolean,
    /// `TINYINT` (`i8`).
    Byte,
    /// `SMALLINT` (`i16`).
    Short,
    /// `INT` (`i32`).
    Int,
    /// `BIGINT` (`i64`).
    Long,
    /// `FLOAT` (`f32`).
    Float,
    /// `DOUBLE` (`f64`).
    Double,
    /// `DECIMAL(precision, scale)`: precision 1 to 38, scale 0 to precision.
    Decimal {
        /// Total number of digits.
        precision: u8,
        /// Digits after the decimal point.
        scale: u8,
    },
    /// `STRING`.
    String,
    /// `BINARY`.
    Binary,
    /// `DATE`.
    Date,
    /// `TIMESTAMP` (an instant; Spark shows it in the session time zone).
    Timestamp,
    /// `TIMESTAMP_NTZ` (a wall-clock time without a time zone).
    TimestampNtz,
    /// `ARRAY<element>`.
    Array(Box<SqlType>),
    /// `MAP<key, value>`.
    Map(Box<SqlType>, Box<SqlType>),
}

impl SqlType {
    /// `DECIMAL(precision, scale)`.
    pub fn decimal(precision: u8, scale: u8) -> Self {
        SqlType::Decimal { precision, scale }
    }
    /// `ARRAY<element>`.
    pub fn array(element: SqlType) -> Self {
        SqlType::Array(Box::new(element))
    }
    /// `MAP<key, value>`.
    pub fn map(key: SqlType, value: SqlType) -> Self {
        SqlType::Map(Box::new(key), Box::new(value))
    }
}

impl fmt::Display for SqlType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SqlType::Null => f.write_str("VOID"),
            SqlType::Boolean => f.write_str("BOOLEAN"),
            SqlType::Byte => f.write_str("TINYINT"),
            SqlType::Short => f.write_str("SMALLINT"),
            SqlType::Int => f.write_str("INT"),
            SqlType::Long => f.write_str("BIGINT"),
            SqlType::Float => f.write_str("FLOAT"),
            SqlType::Double => f.write_str("DOUBLE"),
            SqlType::Decimal { precision, scale } => write!(f, "DECIMAL({precision},{scale})"),
            SqlType::String => f.write_str("STRING"),
            SqlType::Binary => f.write_str("BINARY"),
            SqlType::Date => f.write_str("DATE"),
            SqlType::Timestamp => f.write_str("TIMESTAMP"),
            SqlType::TimestampNtz => f.write_str("TIMESTAMP_NTZ"),
            SqlType::Array(e) => write!(f, "ARRAY<{e}>"),
            SqlType::Map(k, v) => write!(f, "MAP<{k}, {v}>"),
        }
    }
}

/// A decimal number with its declared precision and scale, as Spark's
/// `DECIMAL(p, s)`: the value is kept as written, so no digit is lost to a
/// float.
///
/// Building one never fails; the value is checked when the query is sent
/// (digits with an optional sign and decimal point; at most `scale`
/// fractional digits and `precision - scale` integer digits; precision 1 to
/// 38), and a bad one fails naming its parameter. A value with fewer
/// fractional digits than `scale` is sent padded with zeros (`"1.5"` as
/// `DECIMAL(5,3)` is `1.500`).
///
/// Spark 4.3 types a decimal parameter by its digits, whatever precision
/// is declared (`"12.34"` as `DECIMAL(10,3)` arrives as `12.340`,
/// `DECIMAL(5,3)`; `"99.50"` as `DECIMAL(10,2)` is `decimal(4,2)`): the
/// precision sent only bounds the value. PySpark's `Decimal` arguments are
/// typed the same way, and Spark has no option to keep the declared type:
/// write `CAST(:v AS DECIMAL(10,2))` in the query for that.
///
/// ```
/// use spark_connect_retry::session::params::{Decimal, SqlType, Value};
///
/// let d = Decimal::new("12.34", 5, 3);
/// assert_eq!(Value::from(d.clone()).sql_type(), SqlType::decimal(5, 3));
/// let lit = Value::from(d).to_literal().unwrap();
/// let spark_connect_retry::proto::expression::literal::LiteralType::Decimal(dec) =
///     lit.literal_type.unwrap()
/// else {
///     unreachable!()
/// };
/// assert_eq!((dec.value.as_str(), dec.precision, dec.scale), ("12.340", Some(5), Some(3)));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Decimal {
    value: String,
    precision: u8,
    scale: u8,
}

impl Decimal {
    /// `value` (e.g. `"-12.340"`) as `DECIMAL(precision, scale)`.
    pub fn new(value: impl Into<String>, precision: u8, scale: u8) -> Self {
        Decimal {
            value: value.into(),
            precision,
            scale,
        }
    }
    /// The value as given.
    pub fn value(&self) -> &str {
        &self.value
    }
    /// The declared precision.
    pub fn precision(&self) -> u8 {
        self.precision
    }
    /// The declared scale.
    pub fn scale(&self) -> u8 {
        self.scale
    }
}

/// A calendar date: days since 1970-01-01 (proleptic Gregorian), as Spark
/// keeps a `DATE`.
///
/// ```
/// use spark_connect_retry::session::params::Date;
///
/// assert_eq!(Date::from_ymd(1970, 1, 2).unwrap().days_since_epoch(), 1);
/// assert_eq!(Date::from_ymd(2024, 2, 29).unwrap().days_since_epoch(), 19782);
/// assert_eq!(Date::from_ymd(1969, 12, 31).unwrap().days_since_epoch(), -1);
/// assert!(Date::from_ymd(2023, 2, 29).is_none());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Date(i32);

impl Date {
    /// The date `days` after (before, if negative) 1970-01-01.
    pub fn from_days_since_epoch(days: i32) -> Self {
        Date(days)
    }
    /// The date `year-month-day`, or `None` if there is no such day (or it
    /// is too far from 1970 for an `i32` of days).
    pub fn from_ymd(year: i32, month: u32, day: u32) -> Option<Self> {
        if !(1..=12).contains(&month) || day < 1 || day > days_in_month(year, month) {
            return None;
        }
        i32::try_from(days_from_civil(i64::from(year), month, day))
            .ok()
            .map(Date)
    }
    /// Days since 1970-01-01.
    pub fn days_since_epoch(self) -> i32 {
        self.0
    }
    /// The wall-clock time `hour:minute:second.micros` on this date, or
    /// `None` if a field is out of range.
    ///
    /// ```
    /// use spark_connect_retry::session::params::Date;
    ///
    /// let t = Date::from_ymd(1970, 1, 2).unwrap().and_hms_micro(0, 0, 1, 5).unwrap();
    /// assert_eq!(t.micros_since_epoch(), 86_401_000_005);
    /// ```
    pub fn and_hms_micro(
        self,
        hour: u32,
        minute: u32,
        second: u32,
        micros: u32,
    ) -> Option<TimestampNtz> {
        if hour > 23 || minute > 59 || second > 59 || micros > 999_999 {
            return None;
        }
        let of_day = ((i64::from(hour) * 60 + i64::from(minute)) * 60 + i64::from(second))
            * 1_000_000
            + i64::from(micros);
        Some(TimestampNtz(i64::from(self.0) * 86_400_000_000 + of_day))
    }
}

fn is_leap(year: i32) -> bool {
    (year % 4 == 0 && year % 100 != 0) || year % 400 == 0
}

fn days_in_month(year: i32, month: u32) -> u32 {
    match month {
        2 if is_leap(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a valid proleptic Gregorian date (H. Hinnant's
/// `days_from_civil`).
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = i64::from((month + 9) % 12);
    let doy = (153 * mp + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// An instant: microseconds since 1970-01-01T00:00:00Z, as Spark keeps a
/// `TIMESTAMP` (with local time zone). Spark shows it in the session's
/// time zone (`spark.sql.session.timeZone`).
///
/// ```
/// use std::time::{Duration, UNIX_EPOCH};
/// use spark_connect_retry::session::params::Timestamp;
///
/// let t = Timestamp::from_system_time(UNIX_EPOCH + Duration::from_micros(1_500_000)).unwrap();
/// assert_eq!(t, Timestamp::from_micros(1_500_000));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Timestamp(i64);

impl Timestamp {
    /// The instant `micros` microseconds after the Unix epoch.
    pub fn from_micros(micros: i64) -> Self {
        Timestamp(micros)
    }
    /// A `SystemTime`, truncated to microseconds (toward the past); `None`
    /// beyond ±292,000 years.
    pub fn from_system_time(t: std::time::SystemTime) -> Option<Self> {
        let micros = match t.duration_since(std::time::UNIX_EPOCH) {
            Ok(after) => i64::try_from(after.as_micros()).ok()?,
            Err(before) => {
                let d = before.duration();
                let whole = i64::try_from(d.as_micros()).ok()?;
                // A fraction of a microsecond before a whole one rounds down.
                let extra = i64::from(d.subsec_nanos() % 1000 != 0);
                whole.checked_add(extra)?.checked_neg()?
            }
        };
        Some(Timestamp(micros))
    }
    /// Microseconds since the Unix epoch.
    pub fn micros_since_epoch(self) -> i64 {
        self.0
    }
}

/// A wall-clock date and time without a time zone: microseconds since
/// 1970-01-01T00:00:00, as Spark keeps a `TIMESTAMP_NTZ`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TimestampNtz(i64);

impl TimestampNtz {
    /// `micros` microseconds after 1970-01-01T00:00:00.
    pub fn from_micros(micros: i64) -> Self {
        TimestampNtz(micros)
    }
    /// Microseconds since 1970-01-01T00:00:00.
    pub fn micros_since_epoch(self) -> i64 {
        self.0
    }
    /// This wall-clock time read in UTC, as an instant.
    pub fn and_utc(self) -> Timestamp {
        Timestamp(self.0)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_system_time_is_truncated_toward_the_past() {
        use std::time::{Duration, UNIX_EPOCH};
        let t = |d| super::Timestamp::from_system_time(d).map(|t| t.micros_since_epoch());
        assert_eq!(t(UNIX_EPOCH + Duration::from_nanos(1_500_999)), Some(1_500));
        assert_eq!(t(UNIX_EPOCH - Duration::from_micros(2)), Some(-2));
        // 0.5 µs before the epoch is in the microsecond that starts at -1.
        assert_eq!(t(UNIX_EPOCH - Duration::from_nanos(500)), Some(-1));
        assert_eq!(t(UNIX_EPOCH - Duration::from_nanos(2_001)), Some(-3));
    }

    use super::*;

    #[test]
    fn civil_days_match_a_day_by_day_walk() {
        // Walk 1960-01-01 .. 2030-12-31 a day at a time from a known anchor.
        let mut days = Date::from_ymd(1960, 1, 1).unwrap().days_since_epoch();
        assert_eq!(days, -3653);
        for year in 1960..=2030 {
            for month in 1..=12 {
                for day in 1..=days_in_month(year, month) {
                    assert_eq!(
                        Date::from_ymd(year, month, day).unwrap().days_since_epoch(),
                        days,
                        "{year}-{month}-{day}"
                    );
                    days += 1;
                }
            }
        }
    }

    #[test]
    fn far_dates_and_bad_fields() {
        assert_eq!(
            Date::from_ymd(1, 1, 1).unwrap().days_since_epoch(),
            -719_162
        );
        assert_eq!(
            Date::from_ymd(9999, 12, 31).unwrap().days_since_epoch(),
            2_932_896
        );
        assert!(Date::from_ymd(2000, 2, 29).is_some());
        assert!(Date::from_ymd(1900, 2, 29).is_none());
        assert!(Date::from_ymd(2020, 13, 1).is_none());
        assert!(Date::from_ymd(2020, 4, 31).is_none());
        assert!(Date::from_ymd(2020, 1, 0).is_none());
        let d = Date::from_ymd(2020, 1, 1).unwrap();
        assert!(d.and_hms_micro(24, 0, 0, 0).is_none());
        assert!(d.and_hms_micro(0, 0, 0, 1_000_000).is_none());
        let before = Date::from_days_since_epoch(-1).and_hms_micro(23, 59, 59, 999_999);
        assert_eq!(before.unwrap().micros_since_epoch(), -1);
    }

    #[test]
    fn system_time_before_the_epoch_rounds_toward_the_past() {
        use std::time::{Duration, UNIX_EPOCH};
        let t = UNIX_EPOCH - Duration::from_nanos(1500);
        assert_eq!(
            Timestamp::from_system_time(t).unwrap().micros_since_epoch(),
            -2
        );
        let t = UNIX_EPOCH - Duration::from_micros(3);
        assert_eq!(
            Timestamp::from_system_time(t).unwrap().micros_since_epoch(),
            -3
        );
    }
}
