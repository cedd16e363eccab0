//! Local data in: the caller's Arrow batches cut into IPC chunks the way
//! PySpark cuts them (`chunks`), and uploaded as cached artifacts exactly
//! once under the retry policy (`upload`).
//!
//! Kept apart from the session because these are rules about data, with
//! no session in them: how big a chunk gets, what is held in memory, what
//! is sent again after a cut (the session drives the upload's RPCs). The module is
//! private; `SparkSession::create_dataframe` is the way in, and users name
//! [`UploadError`](upload::UploadError) and
//! [`UploadStats`](upload::UploadStats) under [`session`](crate::session).

pub(crate) mod chunks;
pub(crate) mod upload;
