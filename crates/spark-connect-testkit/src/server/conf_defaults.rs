//! The server's own confs: the values a `Config` read finds for a key the
//! session never set, because Spark registers the key with a default.
//!
//! Clients read a few server confs before their first query to decide how to
//! talk to the server; a test double that knows none of them makes those
//! clients take a path they never take against Spark. The JVM client 4.3
//! and PySpark 4.3 read `spark.connect.session.planCompression.threshold`
//! (and PySpark the algorithm too) with `Config.GetOption`; with no value,
//! the JVM client logs "Plan compression is disabled because the server does
//! not support it". The JVM client also reads `spark.sql.session.timeZone`,
//! and fails the query when it finds no value. The JVM client also reads `spark.sql.session.timeZone`
//! with `Config.Get`, and fails the query when it is not found.
//!
//! Spark's default threshold is 10 MiB (`ZSTD`). This server does not read
//! compressed plans (`Plan.compressed_operation`), so it answers as a Spark
//! server started with `--conf spark.connect.session.planCompression.threshold=-1`:
//! compression off, the value clients take for "off".

/// `(key, value)` for each server conf a session reads without setting it.
const DEFAULTS: &[(&str, &str)] = &[
    ("spark.connect.session.planCompression.threshold", "-1"),
    (
        "spark.connect.session.planCompression.defaultAlgorithm",
        "ZSTD",
    ),
    // The JVM client reads it (`Config.GetOption`) before it reads a
    // result; Spark's default is the server JVM's zone.
    ("spark.sql.session.timeZone", "UTC"),
];

/// The server's value of `key`, when Spark would have one for an unset key.
pub(super) fn server_default(key: &str) -> Option<&'static str> {
    DEFAULTS.iter().find(|(k, _)| *k == key).map(|(_, v)| *v)
}

#[cfg(test)]
mod tests {
    use super::server_default;

    #[test]
    fn plan_compression_is_answered_as_off() {
        let threshold = server_default("spark.connect.session.planCompression.threshold");
        assert_eq!(threshold, Some("-1"));
        assert_eq!(server_default("spark.sql.shuffle.partitions.unknown"), None);
    }
}
