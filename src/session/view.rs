//! Temporary views over a [`DataFrame`]: local data made visible to SQL.
//!
//! Data is uploaded to be used in queries: a lookup table joined with a
//! large one, a fixture under test. SQL reads tables by name, so PySpark
//! lets a DataFrame be named with `df.createOrReplaceTempView("t")`. This
//! is the same `CreateDataFrameViewCommand`, sent as PySpark sends it: one
//! ExecutePlan with the command, read to its end before the call returns,
//! under the retry policy and reattachable like any execution.
//!
//! The view lives as long as the server-side session. A cached relation's
//! artifacts stay in that session too, so a view over uploaded data is
//! valid for the session's lifetime.

use super::dataframe::DataFrame;
use super::error::SparkError;
use crate::proto::{self, command::CommandType};

impl DataFrame {
    /// Name this DataFrame as a session temporary view, replacing a view of
    /// that name (PySpark's `createOrReplaceTempView`). Eager: the view
    /// exists when this returns, for [`SparkSession::sql`](super::SparkSession::sql)
    /// and every later plan of the session.
    ///
    /// An empty name fails here with [`SparkError::InvalidViewName`];
    /// other names are the server's to check (Spark's
    /// `_LEGACY_ERROR_TEMP_1321`, "Invalid view name", for one it cannot
    /// parse).
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::sync::Arc;
    /// use arrow_array::{Array, Int64Array, RecordBatch};
    /// use arrow_schema::{DataType, Field, Schema};
    /// use spark_connect_retry::session::SparkSession;
    ///
    /// let spark = SparkSession::connect("sc://localhost:15002")?;
    /// let schema = Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false)]));
    /// let ids = RecordBatch::try_new(schema.clone(), vec![Arc::new(Int64Array::from(vec![3, 5, 7]))])?;
    /// spark.create_dataframe(schema, [ids]).await?.create_or_replace_temp_view("lookup").await?;
    /// let batches = spark.sql("SELECT sum(id) FROM lookup").await?.collect().await?;
    /// let sum = batches[0].column(0).as_any().downcast_ref::<Int64Array>().unwrap();
    /// assert_eq!(sum.value(0), 15);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn create_or_replace_temp_view(&self, name: &str) -> Result<(), SparkError> {
        self.create_view(name, true).await
    }

    /// Name this DataFrame as a session temporary view (PySpark's
    /// `createTempView`); if the session has a view of that name, this
    /// fails with Spark's `TEMP_TABLE_OR_VIEW_ALREADY_EXISTS` and the view
    /// is left as it was. Otherwise as
    /// [`create_or_replace_temp_view`](Self::create_or_replace_temp_view).
    pub async fn create_temp_view(&self, name: &str) -> Result<(), SparkError> {
        self.create_view(name, false).await
    }

    async fn create_view(&self, name: &str, replace: bool) -> Result<(), SparkError> {
        if name.is_empty() {
            return Err(SparkError::InvalidViewName {
                name: name.to_owned(),
                reason: "a view name is not empty",
            });
        }
        let command = proto::Command {
            command_type: Some(CommandType::CreateDataframeView(
                proto::CreateDataFrameViewCommand {
                    input: Some(self.relation().clone()),
                    name: name.to_owned(),
                    is_global: false,
                    replace,
                },
            )),
        };
        let mut stream = self.session().plan_stream(proto::Plan {
            op_type: Some(proto::plan::OpType::Command(command)),
        })?;
        // A command answers with progress at most; its end is the result.
        while let Some(resp) = stream.next_response().await {
            resp?;
        }
        Ok(())
    }
}
