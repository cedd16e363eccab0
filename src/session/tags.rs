//! Session tags: labels sent with every ExecutePlan, so that operations
//! can be interrupted together ([`SparkSession::interrupt_tag`]).
//!
//! PySpark keeps tags per thread; an async Rust session has no thread to
//! hang them on, so they are per session, shared by its clones (README,
//! "Behaviour, and where we chose"). They are the client's: a renewed
//! session keeps them.

use super::error::SparkError;
use super::options::lock;
use super::spark::SparkSession;
use crate::proto;

impl SparkSession {
    /// Interrupt the operations started with `tag`; returns their ids.
    pub async fn interrupt_tag(&self, tag: &str) -> Result<Vec<String>, SparkError> {
        check_tag(tag)?;
        self.interrupt(
            proto::interrupt_request::InterruptType::Tag,
            Some(proto::interrupt_request::Interrupt::OperationTag(
                tag.to_owned(),
            )),
        )
        .await
    }

    /// Add a tag to every operation this session starts from now on (all
    /// clones share the tags). A tag is non-empty and has no comma.
    pub fn add_tag(&self, tag: &str) -> Result<(), SparkError> {
        check_tag(tag)?;
        let mut tags = lock(self.tag_list());
        if !tags.iter().any(|t| t == tag) {
            tags.push(tag.to_owned());
        }
        Ok(())
    }

    /// Stop adding `tag` to new operations.
    pub fn remove_tag(&self, tag: &str) -> Result<(), SparkError> {
        check_tag(tag)?;
        lock(self.tag_list()).retain(|t| t != tag);
        Ok(())
    }

    /// The tags added to new operations, in the order they were added.
    pub fn tags(&self) -> Vec<String> {
        lock(self.tag_list()).clone()
    }

    /// Remove every tag.
    pub fn clear_tags(&self) {
        lock(self.tag_list()).clear();
    }
}

/// PySpark's tag rule: non-empty, no comma (tags are joined with commas).
pub(super) fn check_tag(tag: &str) -> Result<(), SparkError> {
    let reason = if tag.is_empty() {
        "a tag must not be empty"
    } else if tag.contains(',') {
        "a tag must not contain ','"
    } else {
        return Ok(());
    };
    Err(SparkError::InvalidTag {
        tag: tag.to_owned(),
        reason,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_follow_pyspark_rules() {
        assert!(check_tag("etl").is_ok());
        for bad in ["", "a,b"] {
            match check_tag(bad) {
                Err(SparkError::InvalidTag { tag, .. }) => assert_eq!(tag, bad),
                other => panic!("{bad:?}: {other:?}"),
            }
        }
    }
}
