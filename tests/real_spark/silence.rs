//! Long silent queries: keepalives, progress reports and short segments keep them alive.

use crate::{Duration, Instant, SparkSession, remote, session};

/// How long the silent query computes: over three times the default idle timeout.
const SILENCE: Duration = Duration::from_secs(35);

/// `SELECT reflect('java.lang.Thread', 'sleep', …)`: one row after
/// [`SILENCE`] of computing, with default settings. Returns the counters.
async fn silent_query(spark: &SparkSession) -> spark_connect_retry::reattach::StreamStats {
    assert!(
        SILENCE
            >= 3 * spark_connect_retry::reattach::ReattachOptions::default()
                .idle_timeout
                .expect("stall detection is on by default")
    );
    let started = Instant::now();
    let mut stream = tokio::time::timeout(
        Duration::from_secs(60),
        spark.sql(&format!(
            "SELECT reflect('java.lang.Thread', 'sleep', {}L) AS slept",
            SILENCE.as_millis()
        )),
    )
    .await
    .expect("sql hung")
    .unwrap();
    let rows = tokio::time::timeout(SILENCE + Duration::from_secs(120), async {
        let mut rows = 0;
        while let Some(b) = stream.next_batch().await {
            rows += b.unwrap().num_rows();
        }
        rows
    })
    .await
    .expect("the silent query hung");
    assert_eq!(rows, 1);
    let stats = stream.stats();
    assert_eq!(stats.re_executes, 0, "never re-executed: {stats:?}");
    assert!(started.elapsed() >= SILENCE);
    stats
}

real_test!(
    long_silent_query_completes_with_default_settings,
    needs = [SPARK]
);
async fn long_silent_query_completes_with_default_settings() {
    let Some(url) = remote("SPARK_CONNECT_TEST_REMOTE") else {
        return;
    };
    let spark = session(&url);
    let stats = silent_query(&spark).await;
    eprintln!(
        "silent query, progress reports on: {} responses, {} stalls",
        stats.responses, stats.stalls
    );
    spark.close().await.expect("close");
}

real_test!(
    long_silent_query_without_progress_reports_completes,
    needs = [SPARK]
);
async fn long_silent_query_without_progress_reports_completes() {
    let Some(url) = remote("SPARK_CONNECT_TEST_REMOTE") else {
        return;
    };
    let spark = session(&url);
    // A session SQL conf, settable at run time; negative disables the reports.
    let key = "spark.connect.progress.reportInterval";
    tokio::time::timeout(Duration::from_secs(60), spark.config_set(&[(key, "-1")]))
        .await
        .expect("config hung")
        .unwrap();
    let stats = silent_query(&spark).await;
    eprintln!(
        "silent query, progress reports off: {} responses, {} stalls ({} answered), {} reattaches",
        stats.responses, stats.stalls, stats.stalls_answered, stats.reattaches
    );
    // Truly silent on the wire: stall detection fired, and only reattached.
    assert!(stats.stalls >= 3, "{stats:?}");
    spark.close().await.expect("close");
}

real_test!(
    silent_query_through_one_second_segments_completes,
    needs = [GRACEFUL]
);
/// The progress rule must not mistake a real server's graceful segment ends
/// for a hot loop: against `senderMaxStreamDuration=1s` with progress
/// reports off, the silent query's stream ends empty every second for 35 s.
async fn silent_query_through_one_second_segments_completes() {
    let Some(url) = remote("SPARK_CONNECT_TEST_REMOTE_GRACEFUL") else {
        return;
    };
    let spark = session(&url);
    let key = "spark.connect.progress.reportInterval";
    tokio::time::timeout(Duration::from_secs(60), spark.config_set(&[(key, "-1")]))
        .await
        .expect("config hung")
        .unwrap();
    let stats = silent_query(&spark).await;
    eprintln!(
        "silent query, 1 s segments: {} graceful ends, {} reattaches, {} empty backoffs",
        stats.graceful_ends, stats.reattaches, stats.empty_backoffs
    );
    assert!(stats.graceful_ends >= 20, "{stats:?}");
    assert_eq!(
        stats.empty_backoffs, 0,
        "long-lived segments owe nothing: {stats:?}"
    );
    spark.close().await.expect("close");
}
