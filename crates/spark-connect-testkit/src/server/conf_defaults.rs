//! The server's own confs: the values a `Config` read finds for a key the
//! session never set, because Spark registers the key with a default.
//!
//! Clients read a few server confs before their first query to decide how to
//! talk to the server; a test double that knows none of them makes those
//! clients take a path they never take against Spark. The JVM client 4.3
//! and PySpark 4.3 read `spark.connect.session.planCompression.threshold`
//! (and PySpark the algorithm too) with `Config.GetOption`; with no value,
//! the JVM client logs "Plan compression is disabled because the server does
//! not support it". The JVM client also reads `spark.sql.session.timeZone`
//! with `Config.Get`, and fails the query when it is not found.
//!
//! The values are Spark 4.3's defaults: plans over 10 MiB go compressed
//! with `ZSTD`, which this server reads (`Plan.compressed_operation`,
//! unless built with `compressed_plans(false)`). A test that wants smaller
//! plans compressed sets the threshold with `TestServerBuilder::conf`.

/// `(key, value)` for each server conf a session reads without setting it.
const DEFAULTS: &[(&str, &str)] = &[
    // Spark's `intConf` default, 10 MiB.
    (
        "spark.connect.session.planCompression.threshold",
        "10485760",
    ),
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
    fn plan_compression_is_answered_as_spark_does() {
        let threshold = server_default("spark.connect.session.planCompression.threshold");
        assert_eq!(threshold, Some("10485760"));
        assert_eq!(server_default("spark.sql.shuffle.partitions.unknown"), None);
    }
}
