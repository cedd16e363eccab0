//! [`UploadStats`]: what an upload did, counted over every attempt; a
//! plain value the driver fills and `DataFrame::upload_stats` returns.

/// What an upload did: counted over every attempt.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct UploadStats {
    /// Distinct artifacts the data became (0 when it went inline).
    pub artifacts: u64,
    /// Artifact sends, resends included.
    pub artifacts_sent: u64,
    /// Artifacts skipped because the server already held them.
    pub artifacts_skipped: u64,
    /// Artifact bytes handed to the transport, resends included.
    pub bytes_sent: u64,
    /// Artifact bytes skipped because the server already held them.
    pub bytes_skipped: u64,
    /// `AddArtifacts` streams opened.
    pub streams: u64,
    /// Attempts retried under the policy (either RPC failed transiently).
    pub retries: u64,
}
