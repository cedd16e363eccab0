//! The session's queries: SQL, `range` and any relation, each read as an
//! [`ArrowStream`].

use super::arrow_stream::ArrowStream;
use super::error::SparkError;
use super::params::Params;
use super::spark::SparkSession;
use crate::proto::{self, Plan, Relation};

/// Queries whose results are read as an [`ArrowStream`].
impl SparkSession {
    /// Run `query` and stream its rows as Arrow.
    ///
    /// Eager, as in PySpark: the ExecutePlan is sent now, and `sql()`
    /// returns once the server has analysed the statement (its first
    /// response other than progress: the schema), or fails with the
    /// server's error (a syntax error, a missing table), all under the retry
    /// policy. DDL and DML have run by then, so the stream may be dropped
    /// unread. [`ArrowStream::schema`] is known on return.
    ///
    /// The query travels as `Plan.root = Relation.sql`, one ExecutePlan.
    /// PySpark 4.3 instead sends a `SqlCommand` and then executes the
    /// relation the server returns: two round trips.
    pub async fn sql(&self, query: &str) -> Result<ArrowStream, SparkError> {
        self.sql_relation(proto::Sql {
            query: query.to_owned(),
            ..Default::default()
        })
        .await
    }

    /// Run `query` with parameters bound to its `:name` or `?` markers
    /// ([`params`](super::params)), as [`sql`](Self::sql) runs a query:
    /// eager, one ExecutePlan, replayed, reattached and resumed alike.
    ///
    /// The values travel as typed literals beside the query text, never in
    /// it. A value Spark cannot take fails with
    /// [`SparkError::Params`], naming the parameter, before anything is
    /// sent.
    pub async fn sql_with(
        &self,
        query: &str,
        params: impl Into<Params>,
    ) -> Result<ArrowStream, SparkError> {
        self.sql_relation(params.into().sql_relation(query)?).await
    }

    /// Execute the SQL relation `sql` eagerly (as [`sql`](Self::sql)).
    async fn sql_relation(&self, sql: proto::Sql) -> Result<ArrowStream, SparkError> {
        let mut stream = self.relation(Relation {
            common: None,
            rel_type: Some(proto::relation::RelType::Sql(sql)),
        })?;
        stream.start().await?;
        Ok(stream)
    }

    /// `spark.range(start, end, step)`, streamed as Arrow (column `id`); lazy
    /// like [`relation`](Self::relation).
    pub fn range(&self, start: i64, end: i64, step: i64) -> Result<ArrowStream, SparkError> {
        self.relation(Relation {
            common: None,
            rel_type: Some(proto::relation::RelType::Range(proto::Range {
                start: Some(start),
                end,
                step,
                num_partitions: None,
            })),
        })
    }

    /// Execute a relation and stream its rows as Arrow.
    ///
    /// Lazy, unlike [`sql`](Self::sql): nothing is sent until the stream is
    /// first read, so a relation can be prepared and handed on cheaply. The
    /// operation id is drawn now, and the session's tags taken now; the
    /// builder's configs (on the session's first call) and a renewal of a
    /// stale session happen when it is first read.
    pub fn relation(&self, relation: Relation) -> Result<ArrowStream, SparkError> {
        self.plan_stream(Plan {
            op_type: Some(proto::plan::OpType::Root(relation)),
        })
    }

    /// A lazy stream of `plan`, as [`relation`](Self::relation) describes.
    pub(super) fn plan_stream(&self, plan: Plan) -> Result<ArrowStream, SparkError> {
        self.check_open()?;
        Ok(ArrowStream::new(
            self.clone(),
            plan,
            self.tags(),
            self.options().interrupt_on_drop,
        ))
    }
}
