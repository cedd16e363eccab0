//! Every shipped scenario against this workspace's own client
//! (`spark_connect_retry::session::SparkSession`): the rows of `[expect]`,
//! exactly, or the error it names. The client's waits are recorded, not
//! slept, so `min_seconds` (a backoff the server asked for) is checked on
//! the waits the client chose, not on the wall clock.

use serde::Deserialize;
use spark_connect_retry::deps::arrow_array::{Array, Int64Array, RecordBatch};
use spark_connect_retry::retrying::PySparkRetrying;
use spark_connect_retry::retrying::Retrying;
use spark_connect_retry::session::SparkSession;
use tonic_retry::retrying::RecordingSleeper;

use crate::Running;

#[derive(Debug, Deserialize)]
struct Scenario {
    expect: Expect,
}

#[derive(Debug, Deserialize)]
struct Expect {
    query: String,
    rows: Option<u64>,
    error: Option<String>,
    min_seconds: Option<f64>,
}

/// Checks that `batches` are exactly `range(n)` with `x = id * 2`.
fn check_rows(batches: &[RecordBatch], n: u64) -> Result<(), String> {
    let mut next = 0i64;
    for b in batches {
        let col = |name: &str| {
            b.column_by_name(name)
                .and_then(|c| c.as_any().downcast_ref::<Int64Array>().cloned())
                .ok_or_else(|| format!("no Int64 column {name}"))
        };
        let (id, x) = (col("id")?, col("x")?);
        for i in 0..b.num_rows() {
            if id.value(i) != next || x.value(i) != next * 2 {
                return Err(format!("row {next}: id {} x {}", id.value(i), x.value(i)));
            }
            next += 1;
        }
    }
    match u64::try_from(next) {
        Ok(got) if got == n => Ok(()),
        _ => Err(format!("{next} rows, expected {n}")),
    }
}

async fn run(name: &str) {
    let path = crate::scenarios()
        .into_iter()
        .find(|p| p.file_stem().is_some_and(|s| s == name))
        .unwrap_or_else(|| panic!("no scenario {name}"));
    let text = std::fs::read_to_string(&path).unwrap();
    let expect = toml::from_str::<Scenario>(&text).unwrap().expect;
    let server = Running::start(&[path.to_str().unwrap()]);
    let sleeper = RecordingSleeper::new();
    let spark = SparkSession::builder()
        .remote(format!("sc://{}", server.addr))
        .retrying(Retrying::pyspark().with_sleeper(sleeper.clone()))
        .build()
        .unwrap();
    let result = match spark.sql(&expect.query).await {
        Ok(rows) => rows.collect().await,
        Err(e) => Err(e),
    };
    let waited = sleeper.sleeps_ms().iter().sum::<u64>() as f64 / 1000.0;
    let _ = spark.close().await;
    let (status, log) = server.stop();
    match &result {
        Ok(b) => println!(
            "{name}: {} rows, {waited:.2} s of retry waits",
            b.iter().map(|b| b.num_rows()).sum::<usize>()
        ),
        Err(e) => println!("{name}: error {e}, {waited:.2} s of retry waits"),
    }
    assert!(
        status.success(),
        "{name}: the server exited with {status}: {log}"
    );
    match (&expect.error, result) {
        (Some(class), Err(e)) => {
            assert!(e.to_string().contains(class.as_str()), "{name}: {e}");
        }
        (Some(class), Ok(b)) => panic!(
            "{name}: {} batches, expected an error naming {class}",
            b.len()
        ),
        (None, Ok(batches)) => {
            let n = expect.rows.expect("rows or error");
            check_rows(&batches, n).unwrap_or_else(|e| panic!("{name}: {e}\n{log}"));
        }
        (None, Err(e)) => panic!("{name}: {e}\n{log}"),
    }
    if let Some(min) = expect.min_seconds {
        assert!(
            waited >= min,
            "{name}: {waited:.2} s of retry waits, the server asked for {min} s"
        );
    }
    assert!(
        log.matches("fault fired").count() + log.matches("fault spent unfired").count()
            >= text.matches("[[fault]]").count(),
        "{name}: every scripted fault was taken\n{log}"
    );
}

#[tokio::test]
async fn demo() {
    run("demo").await;
}

#[tokio::test]
async fn graceful_ends() {
    run("graceful-ends").await;
}

#[tokio::test]
async fn black_hole() {
    run("black-hole").await;
}

#[tokio::test]
async fn restart() {
    run("restart").await;
}

#[tokio::test]
async fn retry_info() {
    run("retry-info").await;
}
