//! Resuming a query after the server lost its execution, verified.
//!
//! When the server restarts mid-query, the execution is gone: the
//! reattachable stream can no longer continue it, and after the first
//! response the honest outcome is an error (`RESPONSE_ALREADY_RECEIVED`).
//! For a long query the caller would often rather run it again and carry on
//! from where it was, but only if that cannot silently duplicate, skip or
//! change a row: Spark does not promise that a query gives the same rows,
//! in the same order, twice (`rand()`, a non-deterministic sort, a table
//! written in between).
//!
//! So a resumption is *verified*: with the opt-in
//! ([`SparkSessionBuilder::resume_queries`](crate::session::SparkSessionBuilder::resume_queries),
//! or [`ArrowStream::set_resume`](crate::session::ArrowStream::set_resume)), the
//! stream keeps a running digest of the rows it delivered (`RowDigest`:
//! XXH3-128 over a canonical per-column encoding, independent of batch
//! cuts). On losing the execution after responses were received (the
//! operation or the session is gone, or the server-side session changed),
//! and with [`renew_stale_session`](crate::session::SparkSessionBuilder::renew_stale_session)
//! on, it moves to a fresh server-side session (the renewal), executes the
//! same plan under a new operation id, and digests the new result's first N
//! rows (N = rows delivered, cut mid-batch if need be). Equal: it delivers
//! from row N on, each row once. Different, or fewer than N rows: it fails
//! with [`SparkError::ResultChanged`](crate::session::SparkError::ResultChanged)
//! naming N, and delivers nothing more.
//!
//! Only queries are resumed: a plan whose root is a relation, and for SQL
//! text, a statement that starts with `SELECT`, `VALUES` or `TABLE`
//! (`Relation.sql` runs a command such as `INSERT` eagerly, so running it
//! again would repeat its side effects). A command is never re-run.
//! At most the retry policy's budget of resumptions per query
//! ([`budget`]); each is logged once at `warn` with both operation ids.
//!
//! Which errors mean the server lost the execution is the session's call
//! (they are its errors, a floor above this module); what is here is the
//! digest, the comparison and the budget, with no session in them.

use arrow_array::RecordBatch;

use super::change::ResultChange;
use super::digest::{Digest, RowDigest};
use super::error::ResultError;
use crate::proto::{Plan, plan, relation};
use crate::reattach::StreamStats;
use crate::retrying::Retrying;

/// Resumptions allowed per query when a retry policy sets no limit
/// (`max_retries: None`), and PySpark's default policy's limit.
pub(crate) const DEFAULT_MAX_RESUMPTIONS: u32 = 15;

/// The resumptions a retry loop allows per query: the largest
/// `max_retries` of its policies ([`DEFAULT_MAX_RESUMPTIONS`] for a policy
/// without a limit; PySpark's default policy allows 15). No policy: none.
pub(crate) fn budget(retrying: &Retrying) -> u32 {
    retrying
        .policies()
        .iter()
        .map(|p| p.max_retries().unwrap_or(DEFAULT_MAX_RESUMPTIONS))
        .max()
        .unwrap_or(0)
}

/// Why a plan cannot be resumed, or `None` when it can (see the [module
/// docs](self)).
pub(crate) fn not_resumable(plan: &Plan) -> Option<&'static str> {
    let Some(plan::OpType::Root(rel)) = &plan.op_type else {
        return Some("a command is never re-run (it may have side effects)");
    };
    match &rel.rel_type {
        Some(relation::RelType::Sql(sql)) if !is_query(&sql.query) => Some(
            "only SQL that starts with SELECT, VALUES or TABLE is re-run (other statements may have side effects)",
        ),
        Some(_) => None,
        None => Some("the plan has no relation"),
    }
}

/// Whether SQL text is a query by its first keyword (after whitespace,
/// comments and opening parentheses): `SELECT`, `VALUES` or `TABLE`. `WITH`
/// is not: a CTE may precede an `INSERT`; nor is `FROM` (Hive's
/// `FROM t INSERT ...`).
fn is_query(sql: &str) -> bool {
    let mut rest = sql;
    loop {
        rest = rest.trim_start_matches(|c: char| c.is_whitespace() || c == '(');
        if let Some(line) = rest.strip_prefix("--") {
            rest = line.split_once('\n').map_or("", |(_, r)| r);
        } else if let Some(block) = rest.strip_prefix("/*") {
            match block.split_once("*/") {
                Some((_, r)) => rest = r,
                None => return false,
            }
        } else {
            break;
        }
    }
    let word: String = rest
        .chars()
        .take_while(|c| c.is_ascii_alphabetic())
        .collect();
    ["select", "values", "table"]
        .iter()
        .any(|k| word.eq_ignore_ascii_case(k))
}

/// The rows of a re-execution being checked against those delivered.
#[derive(Debug)]
struct Replay {
    /// Rows delivered before the execution was lost.
    target: u64,
    /// Their digest.
    expected: Digest,
    /// The new result's rows so far.
    digest: RowDigest,
    /// Rows of the new result decoded so far (its next batch's offset).
    absorbed: u64,
}

/// A resumable stream's state: the plan, the digest of delivered rows, the
/// re-execution being verified.
#[derive(Debug)]
pub(crate) struct Resume {
    budget: u32,
    used: u32,
    delivered: RowDigest,
    replay: Option<Replay>,
    /// Counters of the executions before the current one.
    prior: StreamStats,
    /// The operation of the current execution.
    operation_id: String,
}

impl Resume {
    pub(crate) fn new(budget: u32, operation_id: &str) -> Box<Self> {
        Box::new(Resume {
            budget,
            used: 0,
            delivered: RowDigest::default(),
            replay: None,
            prior: StreamStats::default(),
            operation_id: operation_id.to_owned(),
        })
    }

    /// The row offset the next batch must start at: the stream's own count,
    /// or during a replay the new result's.
    pub(crate) fn offset(&self, rows: u64) -> u64 {
        self.replay.as_ref().map_or(rows, |r| r.absorbed)
    }

    /// The stream's row count after a batch of `n` rows was decoded.
    pub(crate) fn absorbed(&mut self, rows: u64, n: u64) -> u64 {
        match self.replay.as_mut() {
            Some(r) => {
                r.absorbed += n;
                rows.max(r.absorbed)
            }
            None => rows + n,
        }
    }

    /// A decoded batch on its way to the caller: digested and passed on;
    /// during a replay, digested against the rows delivered and passed on
    /// only from row N (`None`: nothing of it is new).
    pub(crate) fn deliver(
        &mut self,
        batch: RecordBatch,
    ) -> Result<Option<RecordBatch>, ResultError> {
        let Some(mut replay) = self.replay.take() else {
            self.delivered.update(&batch)?;
            return Ok(Some(batch));
        };
        let need = replay.target - replay.digest.rows();
        let n = batch.num_rows() as u64;
        let head = if n > need {
            batch.slice(0, need as usize)
        } else {
            batch.clone()
        };
        replay.digest.update(&head)?;
        if replay.digest.rows() < replay.target {
            self.replay = Some(replay);
            return Ok(None);
        }
        if replay.digest.finish() != replay.expected {
            return Err(self.changed(ResultChange::Rows, replay.target));
        }
        tracing::info!(
            operation_id = self.operation_id,
            rows = replay.target,
            "resumed query: the re-executed result's first rows match the rows delivered"
        );
        self.delivered = replay.digest;
        if n <= need {
            return Ok(None);
        }
        let tail = batch.slice(need as usize, (n - need) as usize);
        self.delivered.update(&tail)?;
        Ok(Some(tail))
    }

    /// The execution ended: an error if a re-execution ended before
    /// reaching the rows delivered.
    pub(crate) fn at_end(&mut self) -> Result<(), ResultError> {
        match self.replay.take() {
            Some(r) => Err(self.changed(
                ResultChange::Shorter {
                    rows: r.digest.rows(),
                },
                r.target,
            )),
            None => Ok(()),
        }
    }

    fn changed(&self, change: ResultChange, delivered: u64) -> ResultError {
        ResultError::ResultChanged {
            delivered,
            operation_id: self.operation_id.clone(),
            change,
        }
    }

    /// The server lost the execution (the session judged its error, which
    /// it alone can read), having counted `current`: the operation id to
    /// run the plan again under, or `None` when the budget is spent (the
    /// caller keeps its error). `error_class` is the lost execution's, for
    /// the log.
    pub(crate) fn begin(
        &mut self,
        error_class: Option<&str>,
        current: StreamStats,
    ) -> Option<String> {
        if self.used >= self.budget {
            tracing::debug!(
                operation_id = self.operation_id,
                resumptions = self.used,
                "execution lost again; the resumption budget is spent"
            );
            return None;
        }
        self.used += 1;
        self.prior = add(self.prior, current);
        let old = std::mem::replace(&mut self.operation_id, uuid::Uuid::new_v4().to_string());
        let target = self.delivered.rows();
        tracing::warn!(
            old_operation_id = old,
            new_operation_id = self.operation_id,
            rows_delivered = target,
            resumption = self.used,
            budget = self.budget,
            error_class,
            "the server lost the query's execution; re-executing it to resume after the rows \
             already delivered, verified by digest"
        );
        self.replay = (target > 0).then(|| Replay {
            target,
            expected: self.delivered.finish(),
            digest: RowDigest::default(),
            absorbed: 0,
        });
        Some(self.operation_id.clone())
    }

    /// The stream's counters: the earlier executions' and the current one's,
    /// with the resumptions.
    pub(crate) fn stats(&self, current: StreamStats) -> StreamStats {
        let mut c = add(self.prior, current);
        c.resumptions = u64::from(self.used);
        c
    }
}

fn add(a: StreamStats, b: StreamStats) -> StreamStats {
    let mut c = b;
    c.responses += a.responses;
    c.reattaches += a.reattaches;
    c.re_executes += a.re_executes;
    c.policy_retries += a.policy_retries;
    c.immediate_retries += a.immediate_retries;
    c.graceful_ends += a.graceful_ends;
    c.stalls += a.stalls;
    c.stalls_answered += a.stalls_answered;
    c.token_refreshes += a.token_refreshes;
    c
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::{Array, Int64Array};
    use arrow_schema::{DataType, Field, Schema};

    use super::*;
    use crate::policy::PySparkPolicy;
    use crate::proto::{self, Relation};
    use crate::retrying::PySparkRetrying;

    fn ids(range: std::ops::Range<i64>) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false)]));
        RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from_iter_values(range))]).unwrap()
    }

    fn values(b: &RecordBatch) -> Vec<i64> {
        b.column(0)
            .as_any()
            .downcast_ref::<Int64Array>()
            .unwrap()
            .values()
            .to_vec()
    }

    /// The error class of an execution the server lost.
    const LOST: Option<&str> = Some("INVALID_HANDLE.OPERATION_NOT_FOUND");

    fn sql(q: &str) -> Plan {
        Plan {
            op_type: Some(plan::OpType::Root(Relation {
                common: None,
                rel_type: Some(relation::RelType::Sql(proto::Sql {
                    query: q.into(),
                    ..Default::default()
                })),
            })),
        }
    }

    #[test]
    fn only_queries_are_resumable() {
        for q in [
            "SELECT 1",
            "  select id from range(3)",
            "(SELECT 1) UNION (SELECT 2)",
            "-- a comment\nVALUES (1)",
            "/* x */ TABLE t",
        ] {
            assert_eq!(not_resumable(&sql(q)), None, "{q}");
        }
        for q in [
            "INSERT INTO t SELECT 1",
            "WITH a AS (SELECT 1) INSERT INTO t SELECT * FROM a",
            "FROM t INSERT INTO u SELECT *",
            "CREATE TABLE t AS SELECT 1",
            "/* unterminated SELECT",
            "selectx",
            "",
        ] {
            assert!(not_resumable(&sql(q)).is_some(), "{q}");
        }
        let command = Plan {
            op_type: Some(plan::OpType::Command(proto::Command::default())),
        };
        assert!(not_resumable(&command).unwrap().contains("command"));
    }

    /// Delivered in cuts of 4, lost at `n`, replayed in cuts of 3.
    fn resume_at(n: i64, replay: &[RecordBatch]) -> Result<Vec<i64>, ResultError> {
        let mut r = Resume::new(2, "op");
        let mut seen = Vec::new();
        let mut at = 0;
        while at < n {
            let b = ids(at..(at + 4).min(n));
            at += b.num_rows() as i64;
            seen.extend(values(&r.deliver(b)?.unwrap()));
        }
        r.begin(LOST, StreamStats::default())
            .expect("within the budget");
        for b in replay {
            if let Some(out) = r.deliver(b.clone())? {
                seen.extend(values(&out));
            }
        }
        r.at_end()?;
        Ok(seen)
    }

    fn in_threes(range: std::ops::Range<i64>) -> Vec<RecordBatch> {
        let v: Vec<i64> = range.collect();
        v.chunks(3).map(|c| ids(c[0]..c[c.len() - 1] + 1)).collect()
    }

    #[test]
    fn the_same_rows_resume_exactly_at_any_cut() {
        for n in 0..=20 {
            assert_eq!(
                resume_at(n, &in_threes(0..20)).unwrap(),
                (0..20).collect::<Vec<_>>(),
                "lost after {n} rows"
            );
        }
    }

    #[test]
    fn other_or_fewer_rows_fail_naming_the_rows_delivered() {
        let mut changed = in_threes(0..20);
        changed[1] = ids(100..103); // rows 3..6
        match resume_at(8, &changed) {
            Err(ResultError::ResultChanged {
                delivered: 8,
                change: ResultChange::Rows,
                ..
            }) => {}
            other => panic!("{other:?}"),
        }
        // A change after the rows delivered is new data, not a change.
        assert_eq!(resume_at(3, &changed).unwrap()[..4], [0, 1, 2, 100]);
        match resume_at(8, &in_threes(0..7)) {
            Err(ResultError::ResultChanged {
                delivered: 8,
                change: ResultChange::Shorter { rows: 7 },
                ..
            }) => {}
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_budget_bounds_resumptions() {
        let mut r = Resume::new(1, "op");
        let first = StreamStats {
            responses: 5,
            reattaches: 1,
            ..Default::default()
        };
        let op = r.begin(LOST, first).unwrap();
        assert_ne!(op, "op");
        assert_eq!(r.begin(LOST, StreamStats::default()), None, "budget spent");
        let now = r.stats(StreamStats {
            responses: 2,
            ..Default::default()
        });
        assert_eq!((now.responses, now.reattaches, now.resumptions), (7, 1, 1));
        let policy = |n| {
            crate::policy::RetryPolicy::pyspark_builder()
                .max_retries(n)
                .build()
                .unwrap()
        };
        assert_eq!(
            budget(&Retrying::pyspark_with(vec![
                policy(Some(3)),
                policy(Some(5))
            ])),
            5
        );
        assert_eq!(
            budget(&Retrying::pyspark_with(vec![policy(None)])),
            DEFAULT_MAX_RESUMPTIONS
        );
        assert_eq!(budget(&Retrying::pyspark_with(Vec::new())), 0);
    }
}
