//! A session's artifacts, and how a finished upload enters them.
//!
//! Tests of uploads under retries must show that every artifact ends up on
//! the server exactly once, whatever was cut. The store therefore keeps, per
//! name, the bytes and how many times they were written. What it does with a
//! finished `AddArtifacts` stream follows Spark 4.3
//! (`SparkConnectAddArtifactsHandler.flushStagedArtifacts`,
//! `ArtifactManager.addArtifact`):
//!
//! * an artifact whose CRC did not match is not stored; its summary says so
//!   and the call still succeeds (the client decides what to do);
//! * `cache/<hash>` replaces an artifact of that name (Spark logs a warning);
//! * any other name that exists already: same bytes is a no-op, other bytes
//!   fail the call with `ARTIFACT_ALREADY_EXISTS` once the rest of the
//!   stream has been stored.

use std::collections::{BTreeMap, HashMap};

use bytes::Bytes;

use super::upload::Staged;
use crate::error::SparkException;
use crate::local::CACHE_PREFIX;
use spark_connect_retry::proto::add_artifacts_response::ArtifactSummary;

/// The artifacts of one session.
#[derive(Debug, Default)]
pub(super) struct Artifacts {
    pub(super) files: BTreeMap<String, Bytes>,
    /// How many times each name was written (stored or replaced).
    pub(super) writes: HashMap<String, u64>,
}

/// What storing a finished upload did.
#[derive(Debug, Default)]
pub(super) struct Commit {
    /// One per artifact of the stream, in order, as Spark answers.
    pub(super) summaries: Vec<ArtifactSummary>,
    /// The names written.
    pub(super) stored: Vec<String>,
    /// The error that fails the call (the first `ARTIFACT_ALREADY_EXISTS`).
    pub(super) error: Option<SparkException>,
}

impl Artifacts {
    /// Stores a finished upload.
    pub(super) fn commit(&mut self, staged: Vec<Staged>) -> Commit {
        let mut out = Commit::default();
        for artifact in staged {
            out.summaries.push(ArtifactSummary {
                name: artifact.name.clone(),
                is_crc_successful: artifact.crc_ok,
            });
            if !artifact.crc_ok {
                continue;
            }
            let is_cache = artifact.name.starts_with(CACHE_PREFIX);
            match self.files.get(&artifact.name) {
                Some(held) if !is_cache && held[..] == artifact.data[..] => continue,
                Some(_) if !is_cache => {
                    out.error.get_or_insert_with(|| {
                        SparkException::artifact_already_exists(&artifact.name)
                    });
                    continue;
                }
                _ => {}
            }
            *self.writes.entry(artifact.name.clone()).or_default() += 1;
            out.stored.push(artifact.name.clone());
            self.files.insert(artifact.name, Bytes::from(artifact.data));
        }
        out
    }

    /// ArtifactStatus: only `cache/` artifacts can exist, as in Spark (it
    /// looks names up in the block manager's cache).
    pub(super) fn exists(&self, name: &str) -> bool {
        name.starts_with(CACHE_PREFIX) && self.files.contains_key(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn staged(name: &str, data: &[u8], crc_ok: bool) -> Staged {
        Staged {
            name: name.to_owned(),
            data: data.to_vec(),
            crc_ok,
        }
    }

    #[test]
    fn crc_failures_are_reported_not_stored() {
        let mut a = Artifacts::default();
        let c = a.commit(vec![
            staged("cache/x", b"1", false),
            staged("cache/y", b"2", true),
        ]);
        let summary: Vec<(&str, bool)> = c
            .summaries
            .iter()
            .map(|s| (s.name.as_str(), s.is_crc_successful))
            .collect();
        assert_eq!(summary, vec![("cache/x", false), ("cache/y", true)]);
        assert_eq!(c.stored, vec!["cache/y"]);
        assert!(c.error.is_none());
        assert!(!a.exists("cache/x"));
        assert!(a.exists("cache/y"));
    }

    #[test]
    fn cache_artifacts_are_replaced_and_counted() {
        let mut a = Artifacts::default();
        a.commit(vec![staged("cache/x", b"1", true)]);
        let c = a.commit(vec![staged("cache/x", b"2", true)]);
        assert!(c.error.is_none());
        assert_eq!(&a.files["cache/x"][..], b"2");
        assert_eq!(a.writes["cache/x"], 2);
    }

    #[test]
    fn other_names_are_never_overwritten() {
        let mut a = Artifacts::default();
        a.commit(vec![staged("jars/a.jar", b"1", true)]);
        let same = a.commit(vec![staged("jars/a.jar", b"1", true)]);
        assert!(same.error.is_none() && same.stored.is_empty());
        let c = a.commit(vec![
            staged("jars/a.jar", b"2", true),
            staged("files/b", b"3", true),
        ]);
        let e = c.error.expect("ARTIFACT_ALREADY_EXISTS");
        assert_eq!(e.error_class.as_deref(), Some("ARTIFACT_ALREADY_EXISTS"));
        assert_eq!(&a.files["jars/a.jar"][..], b"1");
        assert_eq!(
            c.stored,
            vec!["files/b"],
            "the rest of the stream is stored"
        );
        assert_eq!(a.writes["jars/a.jar"], 1);
        assert!(
            !a.exists("files/b"),
            "ArtifactStatus only knows cache/ names"
        );
    }
}
