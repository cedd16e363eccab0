//! Per-RPC deadlines (PySpark 4.3's `RpcDeadlines`).
//!
//! On the reattachable path a deadline bounds one stream *segment*: when it
//! passes the client reattaches at once. tonic's own `grpc-timeout` only
//! covers the time to response headers, so the client enforces these over
//! the whole call itself.

use std::time::Duration;

/// Deadlines per RPC; `None` means no deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RpcDeadlines {
    /// A reattachable ExecutePlan stream segment (600 s).
    pub reattachable_execute_plan: Option<Duration>,
    /// A ReattachExecute stream segment (600 s).
    pub reattach_execute: Option<Duration>,
    /// AnalyzePlan (3 600 s).
    pub analyze_plan: Option<Duration>,
    /// AddArtifacts (3 600 s).
    pub add_artifacts: Option<Duration>,
    /// Config (600 s).
    pub config: Option<Duration>,
    /// Interrupt (600 s).
    pub interrupt: Option<Duration>,
    /// ReleaseSession (600 s).
    pub release_session: Option<Duration>,
    /// ArtifactStatus (600 s).
    pub artifact_status: Option<Duration>,
    /// CloneSession (600 s).
    pub clone_session: Option<Duration>,
    /// GetStatus (600 s).
    pub get_status: Option<Duration>,
    /// FetchErrorDetails (600 s).
    pub fetch_error_details: Option<Duration>,
}

const TEN_MIN: Option<Duration> = Some(Duration::from_secs(600));
const ONE_HOUR: Option<Duration> = Some(Duration::from_secs(3600));

impl Default for RpcDeadlines {
    fn default() -> Self {
        RpcDeadlines {
            reattachable_execute_plan: TEN_MIN,
            reattach_execute: TEN_MIN,
            analyze_plan: ONE_HOUR,
            add_artifacts: ONE_HOUR,
            config: TEN_MIN,
            interrupt: TEN_MIN,
            release_session: TEN_MIN,
            artifact_status: TEN_MIN,
            clone_session: TEN_MIN,
            get_status: TEN_MIN,
            fetch_error_details: TEN_MIN,
        }
    }
}

/// The longest deadline or timeout accepted: 100 years. Anything longer is
/// a mistake (use `None` for "no deadline"), and `Instant::now() + d` must
/// not overflow on any platform.
pub(crate) const MAX_TIMEOUT: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// A deadline that cannot be used, naming the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("RPC deadline `{field}` {reason}")]
pub struct InvalidDeadline {
    /// The field of [`RpcDeadlines`], e.g. `config`.
    pub field: &'static str,
    /// What is wrong with it.
    pub reason: &'static str,
}

/// Check one timeout: not zero, not above [`MAX_TIMEOUT`]; `Err(reason)`.
pub(crate) fn check_timeout(d: Duration) -> Result<(), &'static str> {
    if d.is_zero() {
        Err("must be greater than zero")
    } else if d > MAX_TIMEOUT {
        Err("must be at most 100 years (use None for no deadline)")
    } else {
        Ok(())
    }
}

impl RpcDeadlines {
    /// Every deadline off.
    pub fn disabled() -> Self {
        RpcDeadlines {
            reattachable_execute_plan: None,
            reattach_execute: None,
            analyze_plan: None,
            add_artifacts: None,
            config: None,
            interrupt: None,
            release_session: None,
            artifact_status: None,
            clone_session: None,
            get_status: None,
            fetch_error_details: None,
        }
    }

    /// Check that no deadline is zero (PySpark rejects values ≤ 0) or
    /// longer than 100 years.
    pub fn validate(&self) -> Result<(), InvalidDeadline> {
        let all = [
            ("reattachable_execute_plan", self.reattachable_execute_plan),
            ("reattach_execute", self.reattach_execute),
            ("analyze_plan", self.analyze_plan),
            ("add_artifacts", self.add_artifacts),
            ("config", self.config),
            ("interrupt", self.interrupt),
            ("release_session", self.release_session),
            ("artifact_status", self.artifact_status),
            ("clone_session", self.clone_session),
            ("get_status", self.get_status),
            ("fetch_error_details", self.fetch_error_details),
        ];
        for (field, d) in all {
            if let Some(d) = d {
                check_timeout(d).map_err(|reason| InvalidDeadline { field, reason })?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_match_pyspark_and_zero_is_rejected() {
        let d = RpcDeadlines::default();
        assert_eq!(d.reattachable_execute_plan, Some(Duration::from_secs(600)));
        assert_eq!(d.analyze_plan, Some(Duration::from_secs(3600)));
        assert_eq!(d.fetch_error_details, Some(Duration::from_secs(600)));
        assert!(d.validate().is_ok());
        assert!(RpcDeadlines::disabled().validate().is_ok());
        let bad = RpcDeadlines {
            config: Some(Duration::ZERO),
            ..d
        };
        assert_eq!(bad.validate().unwrap_err().field, "config");
        let huge = RpcDeadlines {
            interrupt: Some(Duration::MAX),
            ..d
        };
        let err = huge.validate().unwrap_err();
        assert_eq!(err.field, "interrupt");
        assert!(err.to_string().contains("at most 100 years"), "{err}");
        let edge = RpcDeadlines {
            interrupt: Some(MAX_TIMEOUT),
            ..d
        };
        assert!(edge.validate().is_ok());
    }
}
