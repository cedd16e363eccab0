//! Spark's `DataType` message as an Arrow schema.
//!
//! Spark sends a result's schema before its first row, as its own type
//! description. Users want it as the Arrow schema the batches will have, and
//! they need it even when no batch comes (an empty result). The mapping is
//! Spark's own (`ArrowUtils.toArrowType`), so it matches the batches, with
//! one gap: Spark's description carries no time zone, so a `TIMESTAMP` is
//! `Timestamp(Microsecond, "UTC")` here, while the batches carry the session
//! time zone (the instant is the same).

use std::sync::Arc;

use arrow_schema::{DataType, Field, Fields, IntervalUnit, Schema, SchemaRef, TimeUnit};

use super::error::ResultError;
use crate::proto::data_type::{Kind, StructField};

/// The time zone given to `TIMESTAMP` columns (see the module docs).
pub(crate) const TIMESTAMP_ZONE: &str = "UTC";

/// Spark's default decimal: `DECIMAL(10, 0)`.
const DEFAULT_DECIMAL: (i32, i32) = (10, 0);

/// Nested types deeper than this are refused (a hostile server could
/// otherwise make the conversion recurse without bound).
const MAX_DEPTH: usize = 64;

/// The Arrow schema of a result whose Spark type is `dt` (a struct).
pub(crate) fn arrow_schema(dt: &crate::proto::DataType) -> Result<SchemaRef, ResultError> {
    match &dt.kind {
        Some(Kind::Struct(s)) => Ok(Arc::new(Schema::new(fields(&s.fields, 0)?))),
        other => Err(bad(format!(
            "a result schema must be a struct, got {}",
            kind_name(other.as_ref())
        ))),
    }
}

fn fields(fields: &[StructField], depth: usize) -> Result<Fields, ResultError> {
    fields
        .iter()
        .map(|f| {
            let dt = f
                .data_type
                .as_ref()
                .ok_or_else(|| bad(format!("field {:?} has no type", f.name)))?;
            Ok(Field::new(&f.name, convert(dt, depth + 1)?, f.nullable))
        })
        .collect()
}

fn convert(dt: &crate::proto::DataType, depth: usize) -> Result<DataType, ResultError> {
    if depth > MAX_DEPTH {
        return Err(bad(format!("types nested deeper than {MAX_DEPTH}")));
    }
    let child = |dt: &Option<Box<crate::proto::DataType>>, what: &str| {
        dt.as_deref()
            .ok_or_else(|| bad(format!("{what} has no type")))
            .and_then(|t| convert(t, depth + 1))
    };
    Ok(match dt.kind.as_ref() {
        Some(Kind::Null(_)) => DataType::Null,
        Some(Kind::Boolean(_)) => DataType::Boolean,
        Some(Kind::Byte(_)) => DataType::Int8,
        Some(Kind::Short(_)) => DataType::Int16,
        Some(Kind::Integer(_)) => DataType::Int32,
        Some(Kind::Long(_)) => DataType::Int64,
        Some(Kind::Float(_)) => DataType::Float32,
        Some(Kind::Double(_)) => DataType::Float64,
        Some(Kind::Decimal(d)) => {
            let precision = d.precision.unwrap_or(DEFAULT_DECIMAL.0);
            let scale = d.scale.unwrap_or(DEFAULT_DECIMAL.1);
            match (u8::try_from(precision), i8::try_from(scale)) {
                (Ok(p @ 1..=38), Ok(s)) if i32::from(s) <= precision => DataType::Decimal128(p, s),
                _ => return Err(bad(format!("DECIMAL({precision}, {scale})"))),
            }
        }
        Some(Kind::String(_) | Kind::Char(_) | Kind::VarChar(_)) => DataType::Utf8,
        Some(Kind::Binary(_)) => DataType::Binary,
        Some(Kind::Date(_)) => DataType::Date32,
        Some(Kind::Timestamp(_)) => {
            DataType::Timestamp(TimeUnit::Microsecond, Some(TIMESTAMP_ZONE.into()))
        }
        Some(Kind::TimestampNtz(_)) => DataType::Timestamp(TimeUnit::Microsecond, None),
        Some(Kind::CalendarInterval(_)) => DataType::Interval(IntervalUnit::MonthDayNano),
        Some(Kind::YearMonthInterval(_)) => DataType::Interval(IntervalUnit::YearMonth),
        Some(Kind::DayTimeInterval(_)) => DataType::Duration(TimeUnit::Microsecond),
        Some(Kind::Array(a)) => DataType::List(Arc::new(Field::new(
            "element",
            child(&a.element_type, "array element")?,
            a.contains_null,
        ))),
        Some(Kind::Struct(s)) => DataType::Struct(fields(&s.fields, depth)?),
        Some(Kind::Map(m)) => {
            let entries = Fields::from(vec![
                Field::new("key", child(&m.key_type, "map key")?, false),
                Field::new(
                    "value",
                    child(&m.value_type, "map value")?,
                    m.value_contains_null,
                ),
            ]);
            DataType::Map(
                Arc::new(Field::new("entries", DataType::Struct(entries), false)),
                false,
            )
        }
        Some(Kind::Variant(_)) => DataType::Struct(Fields::from(vec![
            Field::new("value", DataType::Binary, false),
            Field::new("metadata", DataType::Binary, false),
        ])),
        Some(Kind::Udt(u)) => child(&u.sql_type, "user-defined type")?,
        other => {
            return Err(bad(format!("no Arrow type for {}", kind_name(other))));
        }
    })
}

fn kind_name(kind: Option<&Kind>) -> &'static str {
    match kind {
        None => "a type with no kind",
        Some(Kind::Unparsed(_)) => "an unparsed type",
        Some(Kind::Struct(_)) => "struct",
        Some(_) => "a non-struct type",
    }
}

fn bad(what: String) -> ResultError {
    ResultError::Protocol(format!("result schema: {what}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::data_type as dt;

    fn t(kind: Kind) -> crate::proto::DataType {
        crate::proto::DataType { kind: Some(kind) }
    }

    fn field(name: &str, kind: Kind, nullable: bool) -> StructField {
        StructField {
            name: name.into(),
            data_type: Some(t(kind)),
            nullable,
            metadata: None,
        }
    }

    #[test]
    fn spark_types_map_as_arrow_utils_does() {
        let schema = arrow_schema(&t(Kind::Struct(dt::Struct {
            fields: vec![
                field("id", Kind::Long(Default::default()), false),
                field("s", Kind::String(Default::default()), true),
                field(
                    "d",
                    Kind::Decimal(dt::Decimal {
                        precision: Some(20),
                        scale: Some(4),
                        ..Default::default()
                    }),
                    true,
                ),
                field("ts", Kind::Timestamp(Default::default()), true),
                field("ntz", Kind::TimestampNtz(Default::default()), true),
                field(
                    "a",
                    Kind::Array(Box::new(dt::Array {
                        element_type: Some(Box::new(t(Kind::Integer(Default::default())))),
                        contains_null: true,
                        ..Default::default()
                    })),
                    false,
                ),
                field(
                    "m",
                    Kind::Map(Box::new(dt::Map {
                        key_type: Some(Box::new(t(Kind::String(Default::default())))),
                        value_type: Some(Box::new(t(Kind::Double(Default::default())))),
                        value_contains_null: false,
                        ..Default::default()
                    })),
                    true,
                ),
            ],
            ..Default::default()
        })))
        .unwrap();
        let types: Vec<String> = schema
            .fields()
            .iter()
            .map(|f| format!("{}:{}:{}", f.name(), f.data_type(), f.is_nullable()))
            .collect();
        assert_eq!(types[0], "id:Int64:false");
        assert_eq!(types[1], "s:Utf8:true");
        assert_eq!(types[2], "d:Decimal128(20, 4):true");
        assert_eq!(
            schema.field(3).data_type(),
            &DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()))
        );
        assert_eq!(
            schema.field(4).data_type(),
            &DataType::Timestamp(TimeUnit::Microsecond, None)
        );
        match schema.field(5).data_type() {
            DataType::List(f) => {
                assert_eq!((f.data_type(), f.is_nullable()), (&DataType::Int32, true))
            }
            other => panic!("{other}"),
        }
        assert!(matches!(
            schema.field(6).data_type(),
            DataType::Map(_, false)
        ));
    }

    #[test]
    fn hostile_types_are_errors() {
        let missing = t(Kind::Struct(dt::Struct {
            fields: vec![StructField {
                name: "x".into(),
                ..Default::default()
            }],
            ..Default::default()
        }));
        assert!(arrow_schema(&missing).is_err());
        assert!(arrow_schema(&t(Kind::Long(Default::default()))).is_err());
        assert!(arrow_schema(&crate::proto::DataType::default()).is_err());
        let bad_decimal = t(Kind::Decimal(dt::Decimal {
            precision: Some(50),
            scale: Some(2),
            ..Default::default()
        }));
        assert!(convert(&bad_decimal, 0).is_err());
        // Nesting without end is refused, not a stack overflow.
        let mut deep = t(Kind::Long(Default::default()));
        for _ in 0..200 {
            deep = t(Kind::Array(Box::new(dt::Array {
                element_type: Some(Box::new(deep)),
                ..Default::default()
            })));
        }
        let err = convert(&deep, 0).unwrap_err();
        assert!(err.to_string().contains("nested deeper"), "{err}");
    }
}
