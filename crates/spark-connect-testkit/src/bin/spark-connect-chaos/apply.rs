//! From a checked script to the test kit's own values: each `[[fault]]` to
//! a [`Fault`], `[server]` to the settings of a [`TestServerBuilder`].

use std::time::Duration;

use spark_connect_testkit::{Fault, SparkException, TestServerBuilder};

use crate::script::{Action, FaultSpec, ServerSpec};

impl FaultSpec {
    /// The fault of the Rust API this entry stands for.
    pub(crate) fn to_fault(&self) -> Fault {
        let base = match &self.action {
            Action::Status { code, message } => Fault::status(*code, message.clone()),
            Action::Unavailable => Fault::unavailable(),
            Action::Spark {
                error_class,
                sql_state,
                message,
            } => Fault::spark(spark_error(error_class, sql_state, message)),
            Action::SessionNotFound => Fault::session_not_found(),
            Action::OperationNotFound => Fault::operation_not_found(),
            Action::Reset => Fault::reset_connection(),
            Action::LoseRequest => Fault::lose_request(),
            Action::Stall(d) => Fault::stall(*d),
            Action::StallForever => Fault::stall_forever(),
            Action::BadStatusDetails => Fault::bad_status_details(),
            Action::CorruptChunk => Fault::corrupt_chunk(),
            Action::Restart => Fault::restart(),
        };
        let mut fault = base.on(self.rpc).times(self.times);
        if let Some(k) = self.after {
            fault = fault.after_responses(k);
        }
        if let Some(d) = self.retry_info {
            fault = fault.retry_info(d);
        }
        fault
    }
}

/// A Spark error of a class: the server's own exception when it raises that
/// class itself (so its Java classes and parameters are Spark's), else a
/// plain `SparkException` with that class and SQLSTATE.
fn spark_error(error_class: &str, sql_state: &str, message: &str) -> SparkException {
    match error_class {
        "INVALID_CURSOR.DISCONNECTED" => SparkException::cursor_disconnected(),
        "OPERATION_CANCELED" => SparkException::operation_canceled(),
        _ => SparkException::new(error_class, sql_state, message),
    }
}

impl ServerSpec {
    /// Applies the settings to a builder.
    pub(crate) fn apply(&self, mut b: TestServerBuilder) -> TestServerBuilder {
        if let Some(v) = self.rows_per_batch {
            b = b.rows_per_batch(v);
        }
        if let Some(v) = self.retry_buffer_bytes {
            b = b.retry_buffer_bytes(v);
        }
        if let Some(v) = self.max_responses_per_stream {
            b = b.max_responses_per_stream(v);
        }
        if let Some(v) = self.max_bytes_per_stream {
            b = b.max_bytes_per_stream(v);
        }
        if let Some(ms) = self.max_stream_duration_ms {
            b = b.max_stream_duration(Some(Duration::from_millis(ms)));
        }
        if let Some(ms) = self.batch_delay_ms {
            b = b.batch_delay(Duration::from_millis(ms));
        }
        if let Some(v) = self.max_chunk_bytes {
            b = b.max_chunk_bytes(v);
        }
        if let Some(v) = self.execution_progress {
            b = b.execution_progress(v);
        }
        if let Some(v) = self.schema_response {
            b = b.schema_response(v);
        }
        if let Some(t) = &self.token {
            b = b.required_token(t.0.clone());
        }
        if let Some(v) = &self.spark_version {
            b = b.spark_version(v.clone());
        }
        b
    }
}
