//! Parameterized SQL against Spark 4.3: every literal type through a named
//! and a positional parameter, an injection attempt that stays a value, and
//! a parameterized query cut mid-stream by the fault proxy, exact.
//!
//! The expected types and values are what PySpark 4.3.0 gets for the same
//! queries against the same server (`spark.sql("SELECT :v AS v, typeof(:v)
//! AS t", args={"v": …})` and `args=[…]`, `toArrow()`, session time zone
//! UTC), recorded once:
//!
//! | PySpark value | Arrow type | `typeof` |
//! |---|---|---|
//! | `None` | `null` | `void` |
//! | `True` | `bool` | `boolean` |
//! | `np.int8(-8)`, `np.int16(-300)`, `7`, `2**40` | `int8`, `int16`, `int32`, `int64` | `tinyint`, `smallint`, `int`, `bigint` |
//! | `np.float32(1.5)`, `2.25` | `float`, `double` | `float`, `double` |
//! | `Decimal("12.340")` | `decimal128(5, 3)` | `decimal(5,3)` |
//! | `"'; DROP TABLE t; --"` | `string` | `string` |
//! | `bytearray(b"\x00\xff")` | `binary` | `binary` |
//! | `date(2024, 2, 29)` | `date32[day]` | `date` |
//! | `datetime(2024, 2, 29, 12, 30, 1, 7, tzinfo=utc)` | `timestamp[us, tz=UTC]` | `timestamp` |
//! | the same, naive, with `spark.sql.timestampType=TIMESTAMP_NTZ` | `timestamp[us]` | `timestamp_ntz` |
//! | `[1, 2, 3]` | `list<element: int32 not null>` | `array<int>` |
//! | `create_map(lit("a"), lit(1))` | `map<string, int32>` | `map<string,int>` |
//! | `Decimal("12.340")` sent as `DECIMAL(10,0)` | `decimal128(5, 3)` | `decimal(5,3)` |
//!
//! PySpark cannot send a typed `NULL`, an empty array or a decimal of a
//! declared precision; those rows assert what Spark answers this client.

use std::collections::BTreeMap;

use arrow_array::ArrayRef;
use arrow_schema::DataType;
use spark_connect_retry::session::params::{
    Date, Decimal, Params, SqlType, Timestamp, TimestampNtz, Value,
};

use crate::{
    Check, CutMode, CutSchedule, Direction, Duration, FaultProxy, RecordBatch, SparkSession,
    absorb, addr_of, assert_exact, debug_events_on_failure, remote, session,
};

/// `value` through `:v` and through `?`: each time the Arrow type of the
/// result column, Spark's `typeof`, and the value as Arrow displays it.
async fn round_trip(spark: &SparkSession, value: &Value) -> [(DataType, String, String); 2] {
    let named = spark
        .sql_with(
            "SELECT :v AS v, typeof(:v) AS t",
            Params::named().bind("v", value.clone()),
        )
        .await
        .unwrap_or_else(|e| panic!("named {value:?}: {e}"));
    let positional = spark
        .sql_with(
            "SELECT ? AS v, typeof(?) AS t",
            Params::positional().bind(value.clone()).bind(value.clone()),
        )
        .await
        .unwrap_or_else(|e| panic!("positional {value:?}: {e}"));
    let mut out = vec![];
    for stream in [named, positional] {
        let batches = stream.collect().await.unwrap();
        let rows: Vec<&RecordBatch> = batches.iter().filter(|b| b.num_rows() > 0).collect();
        assert_eq!(rows.len(), 1, "{value:?}: one row");
        let b = rows[0];
        let shown = |col: &ArrayRef| {
            arrow_cast::display::ArrayFormatter::try_new(col.as_ref(), &Default::default())
                .unwrap()
                .value(0)
                .to_string()
        };
        out.push((
            b.column(0).data_type().clone(),
            shown(b.column(1)),
            shown(b.column(0)),
        ));
    }
    out.try_into().unwrap()
}

real_test!(every_literal_type_round_trips, needs = [SPARK]);
async fn every_literal_type_round_trips() {
    let Some(url) = remote("SPARK_CONNECT_TEST_REMOTE") else {
        return;
    };
    let spark = session(&url);
    spark
        .config_set(&[("spark.sql.session.timeZone", "+00:00")])
        .await
        .unwrap();
    let day = Date::from_ymd(2024, 2, 29).unwrap();
    let wall = day.and_hms_micro(12, 30, 1, 7).unwrap();
    // (value, the result's Arrow type as arrow displays it, Spark's typeof,
    // the value as arrow displays it).
    let cases: Vec<(Value, &str, &str, &str)> = vec![
        (Value::Null(SqlType::Null), "Null", "void", ""),
        (true.into(), "Boolean", "boolean", "true"),
        ((-8i8).into(), "Int8", "tinyint", "-8"),
        ((-300i16).into(), "Int16", "smallint", "-300"),
        (7i32.into(), "Int32", "int", "7"),
        ((1i64 << 40).into(), "Int64", "bigint", "1099511627776"),
        (1.5f32.into(), "Float32", "float", "1.5"),
        (2.25f64.into(), "Float64", "double", "2.25"),
        (
            Decimal::new("12.340", 5, 3).into(),
            "Decimal128(5, 3)",
            "decimal(5,3)",
            "12.340",
        ),
        // Spark 4.3 types a decimal parameter by its digits (it substitutes
        // the literal's SQL text, `12.340BD`): the scale is kept (the value
        // is sent padded), the declared precision only bounds the value.
        (
            Decimal::new("12.34", 10, 3).into(),
            "Decimal128(5, 3)",
            "decimal(5,3)",
            "12.340",
        ),
        (
            Decimal::new("-0.5", 38, 20).into(),
            "Decimal128(20, 20)",
            "decimal(20,20)",
            "-0.50000000000000000000",
        ),
        (
            "'; DROP TABLE t; --".into(),
            "Utf8",
            "string",
            "'; DROP TABLE t; --",
        ),
        (vec![0u8, 255].into(), "Binary", "binary", "00ff"),
        (day.into(), "Date32", "date", "2024-02-29"),
        (
            wall.and_utc().into(),
            "Timestamp(µs, \"+00:00\")",
            "timestamp",
            "2024-02-29T12:30:01.000007Z",
        ),
        (
            wall.into(),
            "Timestamp(µs)",
            "timestamp_ntz",
            "2024-02-29T12:30:01.000007",
        ),
        (
            vec![1i32, 2, 3].into(),
            "List(non-null Int32, field: 'element')",
            "array<int>",
            "[1, 2, 3]",
        ),
        // An empty array's element type travels, but Spark 4.3 substitutes
        // `ARRAY()`, whose type is `ARRAY<VOID>` (it casts where used).
        (
            Vec::<i64>::new().into(),
            "List(non-null Null, field: 'element')",
            "array<void>",
            "[]",
        ),
        // PySpark 4.3 cannot send this one (`INVALID_SQL_ARG`).
        (
            vec![Some("a"), None].into(),
            "List(Utf8, field: 'element')",
            "array<string>",
            "[a, ]",
        ),
        (
            BTreeMap::from([("a", 1i32)]).into(),
            "Map(\"entries\": non-null Struct(\"key\": non-null Utf8, \"value\": non-null Int32), unsorted)",
            "map<string,int>",
            "{a: 1}",
        ),
        (None::<i32>.into(), "Int32", "int", ""),
        (
            Value::Null(SqlType::decimal(5, 3)),
            "Decimal128(5, 3)",
            "decimal(5,3)",
            "",
        ),
        (
            Timestamp::from_micros(0).into(),
            "Timestamp(µs, \"+00:00\")",
            "timestamp",
            "1970-01-01T00:00:00Z",
        ),
        (
            TimestampNtz::from_micros(-1).into(),
            "Timestamp(µs)",
            "timestamp_ntz",
            "1969-12-31T23:59:59.999999",
        ),
    ];
    for (value, arrow_type, typeof_, shown) in cases {
        for (i, (arrow, t, v)) in round_trip(&spark, &value).await.into_iter().enumerate() {
            let how = ["named", "positional"][i];
            assert_eq!(
                (arrow.to_string().as_str(), t.as_str(), v.as_str()),
                (arrow_type, typeof_, shown),
                "{how} {value:?}"
            );
        }
    }
    spark.close().await.unwrap();
}

real_test!(an_injection_attempt_is_only_a_value, needs = [SPARK]);
async fn an_injection_attempt_is_only_a_value() {
    let Some(url) = remote("SPARK_CONNECT_TEST_REMOTE") else {
        return;
    };
    let spark = session(&url);
    let table = format!("t_{}", &spark.session_id().replace('-', "")[..12]);
    let evil = format!("x'; DROP TABLE {table}; --");
    spark
        .sql(&format!(
            "CREATE TABLE {table} (id BIGINT, name STRING) USING parquet"
        ))
        .await
        .unwrap();
    // A parameterized command: runs eagerly, as sql() does.
    spark
        .sql_with(
            &format!("INSERT INTO {table} VALUES (:id, :name)"),
            Params::named().bind("id", 1i64).bind("name", evil.as_str()),
        )
        .await
        .unwrap();
    spark
        .sql_with(
            &format!("INSERT INTO {table} VALUES (?, ?)"),
            Params::positional().bind(2i64).bind("plain"),
        )
        .await
        .unwrap();
    let names = |batches: Vec<RecordBatch>| -> Vec<String> {
        batches
            .iter()
            .flat_map(|b| {
                let col = b
                    .column(0)
                    .as_any()
                    .downcast_ref::<arrow_array::StringArray>()
                    .unwrap();
                col.iter()
                    .map(|s| s.unwrap().to_owned())
                    .collect::<Vec<_>>()
            })
            .collect()
    };
    let found = spark
        .sql_with(
            &format!("SELECT name FROM {table} WHERE name = :name"),
            Params::named().bind("name", evil.as_str()),
        )
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    assert_eq!(
        names(found),
        std::slice::from_ref(&evil),
        "the value matched itself"
    );
    // The table is still there, with both rows.
    let all = spark
        .sql(&format!("SELECT name FROM {table} ORDER BY id"))
        .await
        .expect("the table survived")
        .collect()
        .await
        .unwrap();
    assert_eq!(names(all), [evil, "plain".to_owned()]);
    spark
        .sql(&format!("DROP TABLE {table}"))
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    spark.close().await.unwrap();
}

real_test!(
    a_parameterized_query_cut_mid_stream_is_exact,
    needs = [SPARK]
);
async fn a_parameterized_query_cut_mid_stream_is_exact() {
    let Some(url) = remote("SPARK_CONNECT_TEST_REMOTE") else {
        return;
    };
    const N: i64 = 2_000_000;
    debug_events_on_failure();
    // Two resets of the server's stream, 5 MB and 15 MB into a connection.
    let proxy = FaultProxy::builder(addr_of(&url))
        .cut_schedule(
            Direction::ServerToClient,
            CutSchedule::new([5_000_000, 15_000_000]),
        )
        .cut_mode(CutMode::Reset)
        .start()
        .await
        .unwrap();
    let spark = session(&proxy.remote());
    let run = async {
        let mixed = spark
            .sql_with(
                "SELECT id, id * :k AS x FROM range(?, ?)",
                Params::named().bind("k", 2i64),
            )
            .await;
        // Named and positional markers cannot be mixed: Spark says so.
        let e = match mixed {
            Ok(_) => panic!("a mixed query fails"),
            Err(e) => e.to_string(),
        };
        assert!(
            e.contains("UNBOUND_SQL_PARAMETER") || e.contains("INVALID_QUERY_MIXED"),
            "{e}"
        );
        let mut stream = spark
            .sql_with(
                "SELECT id, id * :k AS x FROM range(:n)",
                Params::named().bind("k", 2i64).bind("n", N),
            )
            .await
            .unwrap();
        let mut check = Check {
            in_order: true,
            ..Default::default()
        };
        while let Some(b) = stream.next_batch().await {
            absorb(&mut check, &b.unwrap());
        }
        (check, stream.stats())
    };
    let (check, stats) = tokio::time::timeout(Duration::from_secs(180), run)
        .await
        .unwrap_or_else(|_| panic!("hung; proxy {:?}", proxy.stats()));
    assert_exact(&check, N);
    let p = proxy.stats();
    assert!(p.cuts >= 1, "the proxy cut the stream: {p:?}");
    assert!(stats.reattaches >= 1, "resumed by reattaching: {stats:?}");
    assert_eq!(stats.re_executes, 0, "never re-executed: {stats:?}");
    eprintln!(
        "parameterized 2M rows exact through {} cuts: {} reattaches, {} retries",
        p.cuts, stats.reattaches, stats.policy_retries
    );
    spark.close().await.unwrap();
    proxy.shutdown().await;
}
