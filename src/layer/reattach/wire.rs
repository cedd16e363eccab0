//! The few fields the layer reads from raw protobuf bytes, and the fields it
//! appends.
//!
//! *Why raw:* the layer sits under any generated stub, whose protos may be
//! newer than ours. Decoding a caller's message into our types and encoding
//! it again would silently drop every field we do not know. So the layer
//! reads only what the reattach rules need (ids, `ResultComplete`, the
//! reattach option) and forwards the caller's bytes as they are. What it
//! must add (an operation id, the reattach option, `last_response_id`) is
//! *appended*: for a scalar field protobuf's last occurrence wins, and a
//! repeated field (`request_options`) concatenates, so an appended
//! `RequestOption` is one more element and the caller's stay as they were.
//!
//! The primitives (keys, varints, skipping a field) are prost's
//! `encoding` module's; nothing here re-implements them. Every read checks
//! its bounds and UTF-8: a hostile peer's bytes give a [`WireError`], never
//! a panic.

use bytes::{BufMut, Bytes, BytesMut};
use prost::Message;
use prost::encoding::{self, DecodeContext, WireType};

/// Bytes that are not the protobuf message they should be.
#[derive(Debug, thiserror::Error)]
#[error("malformed {message}: {reason}")]
pub(crate) struct WireError {
    /// The message being read.
    pub(crate) message: &'static str,
    /// What is wrong.
    pub(crate) reason: String,
}

/// A top-level field's value.
enum Value<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
    /// Fixed-width or group: skipped.
    Other,
}

/// Calls `f(tag, value)` for each top-level field of `msg`, in order.
fn for_each_field<'a>(
    msg: &'a [u8],
    message: &'static str,
    mut f: impl FnMut(u32, Value<'a>) -> Result<(), String>,
) -> Result<(), WireError> {
    let err = |reason: String| WireError { message, reason };
    let mut buf = msg;
    while !buf.is_empty() {
        let (tag, wire_type) = encoding::decode_key(&mut buf).map_err(|e| err(e.to_string()))?;
        let value = match wire_type {
            WireType::Varint => {
                Value::Varint(encoding::decode_varint(&mut buf).map_err(|e| err(e.to_string()))?)
            }
            WireType::LengthDelimited => {
                let len = encoding::decode_varint(&mut buf).map_err(|e| err(e.to_string()))?;
                let len = usize::try_from(len)
                    .ok()
                    .filter(|l| *l <= buf.len())
                    .ok_or_else(|| err(format!("field {tag}: length {len} past the end")))?;
                let (value, rest) = buf.split_at(len);
                buf = rest;
                Value::Bytes(value)
            }
            other => {
                encoding::skip_field(other, tag, &mut buf, DecodeContext::default())
                    .map_err(|e| err(e.to_string()))?;
                Value::Other
            }
        };
        f(tag, value).map_err(err)?;
    }
    Ok(())
}

fn string(tag: u32, value: Value<'_>) -> Result<String, String> {
    match value {
        Value::Bytes(b) => std::str::from_utf8(b)
            .map(str::to_owned)
            .map_err(|_| format!("field {tag}: not UTF-8")),
        _ => Err(format!("field {tag}: not a string")),
    }
}

fn bytes_of(tag: u32, value: Value<'_>) -> Result<&[u8], String> {
    match value {
        Value::Bytes(b) => Ok(b),
        _ => Err(format!("field {tag}: not a message")),
    }
}

/// What the layer reads of an `ExecutePlanRequest` or a
/// `ReattachExecuteRequest`; the ids the reattach rules and the requests
/// built for the caller need.
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct RequestHead {
    pub(crate) session_id: String,
    /// Each occurrence of `user_context`, as sent (a message field given
    /// twice is merged by the server, so each is copied).
    pub(crate) user_context: Vec<Bytes>,
    pub(crate) operation_id: Option<String>,
    pub(crate) client_type: Option<String>,
    pub(crate) observed_server_side_session_id: Option<String>,
    /// ExecutePlan only: the last `reattach_options.reattachable` given.
    pub(crate) reattachable: Option<bool>,
    /// ReattachExecute only.
    pub(crate) last_response_id: Option<String>,
}

/// The field numbers of the two request messages that differ.
struct RequestFields {
    message: &'static str,
    operation_id: u32,
    observed: u32,
    request_options: Option<u32>,
    last_response_id: Option<u32>,
}

const EXECUTE: RequestFields = RequestFields {
    message: "ExecutePlanRequest",
    operation_id: 6,
    observed: 8,
    request_options: Some(5),
    last_response_id: None,
};

const REATTACH: RequestFields = RequestFields {
    message: "ReattachExecuteRequest",
    operation_id: 3,
    observed: 6,
    request_options: None,
    last_response_id: Some(5),
};

/// Reads the head of an `ExecutePlanRequest`.
pub(crate) fn execute_head(msg: &Bytes) -> Result<RequestHead, WireError> {
    request_head(msg, &EXECUTE)
}

/// Reads the head of a `ReattachExecuteRequest`.
pub(crate) fn reattach_head(msg: &Bytes) -> Result<RequestHead, WireError> {
    request_head(msg, &REATTACH)
}

fn request_head(msg: &Bytes, fields: &RequestFields) -> Result<RequestHead, WireError> {
    let mut head = RequestHead::default();
    for_each_field(msg, fields.message, |tag, value| {
        match tag {
            1 => head.session_id = string(tag, value)?,
            2 => head.user_context.push(msg.slice_ref(bytes_of(tag, value)?)),
            4 => head.client_type = Some(string(tag, value)?),
            t if t == fields.operation_id => head.operation_id = Some(string(tag, value)?),
            t if t == fields.observed => {
                head.observed_server_side_session_id = Some(string(tag, value)?)
            }
            t if Some(t) == fields.last_response_id => {
                head.last_response_id = Some(string(tag, value)?)
            }
            t if Some(t) == fields.request_options => {
                if let Some(r) = reattach_option(bytes_of(tag, value)?)? {
                    head.reattachable = Some(r);
                }
            }
            _ => {}
        }
        Ok(())
    })?;
    Ok(head)
}

/// The session and operation ids of a `ReleaseExecuteRequest`.
pub(crate) fn release_ids(msg: &[u8]) -> Result<(String, String), WireError> {
    let (mut session_id, mut operation_id) = (String::new(), String::new());
    for_each_field(msg, "ReleaseExecuteRequest", |tag, value| {
        match tag {
            1 => session_id = string(tag, value)?,
            3 => operation_id = string(tag, value)?,
            _ => {}
        }
        Ok(())
    })?;
    Ok((session_id, operation_id))
}

/// `RequestOption.reattach_options.reattachable`, if this option is one.
fn reattach_option(option: &[u8]) -> Result<Option<bool>, String> {
    let mut found = None;
    for_each_field(option, "RequestOption", |tag, value| {
        if tag == 1 {
            let mut reattachable = false;
            for_each_field(bytes_of(tag, value)?, "ReattachOptions", |t, v| {
                if let (1, Value::Varint(n)) = (t, v) {
                    reattachable = n != 0;
                }
                Ok(())
            })
            .map_err(|e| e.to_string())?;
            found = Some(reattachable);
        }
        Ok(())
    })
    .map_err(|e| e.to_string())?;
    Ok(found)
}

/// What the layer reads of an `ExecutePlanResponse`.
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct ResponseHead {
    pub(crate) session_id: String,
    pub(crate) server_side_session_id: String,
    pub(crate) response_id: String,
    /// The response is `ResultComplete`: the last member of the
    /// `response_type` oneof we know is field 14 (as prost would decode it).
    pub(crate) result_complete: bool,
}

/// The `response_type` oneof's members we know (field numbers).
const RESPONSE_TYPES: &[u32] = &[2, 5, 8, 9, 10, 11, 14, 16, 17, 18, 19, 20, 21, 22, 23, 999];

/// Reads the head of an `ExecutePlanResponse`.
pub(crate) fn response_head(msg: &[u8]) -> Result<ResponseHead, WireError> {
    let mut head = ResponseHead::default();
    for_each_field(msg, "ExecutePlanResponse", |tag, value| {
        match tag {
            1 => head.session_id = string(tag, value)?,
            13 => head.response_id = string(tag, value)?,
            15 => head.server_side_session_id = string(tag, value)?,
            t if RESPONSE_TYPES.contains(&t) => {
                bytes_of(tag, value)?;
                head.result_complete = t == 14;
            }
            _ => {}
        }
        Ok(())
    })?;
    Ok(head)
}

fn put_string(tag: u32, value: &str, out: &mut BytesMut) {
    encoding::string::encode(tag, &value.to_owned(), out);
}

fn put_message(tag: u32, value: &[u8], out: &mut BytesMut) {
    encoding::encode_key(tag, WireType::LengthDelimited, out);
    encoding::encode_varint(value.len() as u64, out);
    out.put_slice(value);
}

/// The caller's ExecutePlanRequest with `operation_id` and the reattach
/// option appended when absent: byte for byte otherwise.
pub(crate) fn execute_request(msg: &Bytes, head: &RequestHead, operation_id: &str) -> Bytes {
    let set_id = head.operation_id.as_deref() != Some(operation_id);
    let set_option = head.reattachable != Some(true);
    if !set_id && !set_option {
        return msg.clone();
    }
    let mut out = BytesMut::with_capacity(msg.len() + 64);
    out.put_slice(msg);
    if set_id {
        put_string(EXECUTE.operation_id, operation_id, &mut out);
    }
    if set_option {
        // RequestOption { reattach_options (1): ReattachOptions { reattachable (1): true } }
        let mut reattach = BytesMut::new();
        encoding::bool::encode(1, &true, &mut reattach);
        let mut option = BytesMut::new();
        put_message(1, &reattach, &mut option);
        put_message(5, &option, &mut out);
    }
    out.freeze()
}

/// A request the reattach core made for the caller's execution (a
/// ReattachExecute or ReleaseExecute, whose ids the core took from the
/// caller's request), with the caller's user context appended as sent
/// (field 2 in both): the core's copy of the request has none, so nothing
/// is sent twice, and fields of it our protos do not know pass unchanged.
pub(crate) fn with_user_context(req: &impl Message, head: &RequestHead) -> Bytes {
    let mut out = BytesMut::from(req.encode_to_vec().as_slice());
    for uc in &head.user_context {
        put_message(2, uc, &mut out);
    }
    out.freeze()
}

/// The caller's own ReattachExecuteRequest moved on to `last`: its bytes
/// with `last_response_id` appended (the last occurrence wins).
pub(crate) fn reattach_from(msg: &Bytes, head: &RequestHead, last: Option<&str>) -> Bytes {
    match last.filter(|l| !l.is_empty()) {
        Some(id) if head.last_response_id.as_deref() != Some(id) => {
            let mut out = BytesMut::with_capacity(msg.len() + id.len() + 2);
            out.put_slice(msg);
            put_string(REATTACH.last_response_id.unwrap_or(5), id, &mut out);
            out.freeze()
        }
        _ => msg.clone(),
    }
}

#[cfg(test)]
mod tests;
