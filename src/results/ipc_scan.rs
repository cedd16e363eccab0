//! The headers of an Arrow IPC stream, read without decoding its arrays:
//! the checks a compressed batch needs before arrow-ipc decodes it, and the
//! explanation of a batch it could not decode.
//!
//! Why not leave it all to arrow-ipc: a compressed buffer starts with the
//! length it decompresses to (8 bytes, the sender's word), and arrow-ipc
//! allocates that length before decompressing. A corrupt length of a few
//! terabytes is then an allocation failure, which aborts the process (no
//! `catch_unwind` helps). [`check`] refuses a stated length no real codec
//! output could have (see [`MAX_RATIO`]) and a codec arrow-ipc does not
//! know, before any allocation. And arrow-ipc's errors name neither the
//! column nor the batch: [`explain`] decodes the failed batch one column at
//! a time to find the column (and, for a STRING that is not UTF-8, the
//! row). That costs nothing on the good path: it runs only after a failure.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::{Array, BinaryArray, LargeBinaryArray};
use arrow_buffer::Buffer;
use arrow_ipc::reader::RecordBatchDecoder;
use arrow_ipc::{CompressionType, MessageHeader};
use arrow_schema::{DataType, Field, Schema, SchemaRef};

use super::decode_error::ResultDecodeError;

/// The most a compressed buffer can grow: zstd's densest block (an RLE
/// block, 4 bytes for 128 KiB) is 1 : 32768, LZ4's about 1 : 255. A stated
/// length above `MAX_RATIO` × the compressed bytes + 64 KiB is corrupt.
pub(super) const MAX_RATIO: u64 = 65_536;

/// One message of an IPC stream: its header and its body.
pub(super) struct Msg<'a> {
    pub(super) header: arrow_ipc::Message<'a>,
    pub(super) body: &'a [u8],
}

/// The messages of `data`, in order; ends at the end-of-stream marker, the
/// end of the data, or the first malformed framing (arrow-ipc reports that).
pub(super) fn messages(data: &[u8]) -> impl Iterator<Item = Msg<'_>> {
    let mut pos = 0usize;
    std::iter::from_fn(move || {
        let word = |at: usize| -> Option<i32> {
            let b = data.get(at..at.checked_add(4)?)?;
            Some(i32::from_le_bytes(b.try_into().ok()?))
        };
        let mut len = word(pos)?;
        pos += 4;
        if len == -1 {
            len = word(pos)?;
            pos += 4;
        }
        let len = usize::try_from(len).ok().filter(|l| *l > 0)?;
        let meta = data.get(pos..pos.checked_add(len)?)?;
        pos += len;
        let header = arrow_ipc::root_as_message(meta).ok()?;
        let body_len = usize::try_from(header.bodyLength()).ok()?;
        let body = data.get(pos..pos.checked_add(body_len)?)?;
        pos += body_len;
        Some(Msg { header, body })
    })
}

/// Arrow's name of a codec (`ZSTD`, `LZ4_FRAME`, `CompressionType(7)`).
fn codec_name(codec: CompressionType) -> String {
    match codec.variant_name() {
        Some(name) => name.to_owned(),
        None => format!("CompressionType({})", codec.0),
    }
}

/// Before decoding: every record batch of `data` uses a codec arrow-ipc
/// decodes, and states lengths its compressed buffers could have. Returns
/// the codec of the batch (none when uncompressed).
pub(super) fn check(data: &[u8], batch_start: u64) -> Result<Option<String>, ResultDecodeError> {
    let mut schema: Option<Schema> = None;
    let mut codec_seen = None;
    for msg in messages(data) {
        match msg.header.header_type() {
            MessageHeader::Schema => {
                schema = msg
                    .header
                    .header_as_schema()
                    .and_then(|s| arrow_ipc::convert::try_fb_to_schema(s).ok());
            }
            MessageHeader::RecordBatch | MessageHeader::DictionaryBatch => {
                let batch = match msg.header.header_type() {
                    MessageHeader::RecordBatch => msg.header.header_as_record_batch(),
                    _ => msg
                        .header
                        .header_as_dictionary_batch()
                        .and_then(|d| d.data()),
                };
                let Some(batch) = batch else { continue };
                let Some(compression) = batch.compression() else {
                    continue;
                };
                let codec = compression.codec();
                let name = codec_name(codec);
                if !matches!(codec, CompressionType::ZSTD | CompressionType::LZ4_FRAME) {
                    return Err(ResultDecodeError::UnsupportedCodec {
                        batch_start,
                        codec: name,
                    });
                }
                let columns = schema
                    .as_ref()
                    .filter(|_| msg.header.header_type() == MessageHeader::RecordBatch)
                    .and_then(|s| {
                        let views = batch.variadicBufferCounts().is_some_and(|v| !v.is_empty());
                        column_of_buffers(s, views)
                    });
                for (i, buf) in batch.buffers().into_iter().flatten().enumerate() {
                    let stated = stated_length(msg.body, buf.offset(), buf.length());
                    let column = || {
                        let s = schema.as_ref()?;
                        let c = *columns.as_ref()?.get(i)?;
                        Some(s.field(c).name().clone())
                    };
                    if let Err(reason) = stated {
                        return Err(ResultDecodeError::CorruptBuffer {
                            batch_start,
                            codec: name,
                            column: column(),
                            reason,
                        });
                    }
                }
                codec_seen = Some(name);
            }
            _ => {}
        }
    }
    Ok(codec_seen)
}

/// The length a compressed buffer states, checked against what its
/// compressed bytes could produce. Buffers outside the body are left to
/// arrow-ipc (it reports them).
fn stated_length(body: &[u8], offset: i64, length: i64) -> Result<(), String> {
    let (Ok(offset), Ok(length)) = (usize::try_from(offset), usize::try_from(length)) else {
        return Ok(());
    };
    if length == 0 {
        return Ok(());
    }
    let Some(bytes) = offset
        .checked_add(length)
        .and_then(|end| body.get(offset..end))
    else {
        return Ok(());
    };
    let Some(prefix) = bytes.get(..8) else {
        return Err(format!(
            "a {length}-byte buffer, shorter than its 8-byte length prefix"
        ));
    };
    let stated = i64::from_le_bytes(prefix.try_into().expect("8 bytes"));
    let bound = (length as u64 - 8)
        .saturating_mul(MAX_RATIO)
        .saturating_add(64 * 1024);
    match stated {
        -1 => Ok(()),
        n if n < 0 => Err(format!("it states a decompressed length of {n}")),
        n if n as u64 > bound => Err(format!(
            "it states a decompressed length of {n} bytes for {} compressed bytes",
            length - 8
        )),
        _ => Ok(()),
    }
}

/// The top-level column of each buffer of a record batch, in order, or
/// `None` for a layout this does not follow (views, unions).
fn column_of_buffers(schema: &Schema, views: bool) -> Option<Vec<usize>> {
    if views {
        return None;
    }
    let mut out = Vec::new();
    for (c, f) in schema.fields().iter().enumerate() {
        out.extend(std::iter::repeat_n(c, buffers(f.data_type())?));
    }
    Some(out)
}

/// How many IPC buffers a field of type `dt` has (Arrow's V5 layout).
fn buffers(dt: &DataType) -> Option<usize> {
    use DataType::*;
    Some(match dt {
        Null => 0,
        Utf8 | Binary | LargeUtf8 | LargeBinary => 3,
        List(f) | LargeList(f) | Map(f, _) => 2 + buffers(f.data_type())?,
        ListView(f) | LargeListView(f) => 3 + buffers(f.data_type())?,
        FixedSizeList(f, _) => 1 + buffers(f.data_type())?,
        Struct(fs) => {
            1 + fs
                .iter()
                .map(|f| buffers(f.data_type()))
                .sum::<Option<usize>>()?
        }
        RunEndEncoded(a, b) => buffers(a.data_type())? + buffers(b.data_type())?,
        Utf8View | BinaryView | Union(..) => return None,
        _ => 2,
    })
}

/// After arrow-ipc failed on `data`: which column of which record batch,
/// and why, when a column decoded alone fails. `first_row` is the result
/// row `data` starts at. `None` when no single column explains it (the
/// framing itself is broken); the caller keeps arrow's error.
pub(super) fn explain(data: &[u8], first_row: u64) -> Option<ResultDecodeError> {
    let mut schema: Option<SchemaRef> = None;
    let mut row = first_row;
    for msg in messages(data) {
        match msg.header.header_type() {
            MessageHeader::Schema => {
                schema = msg
                    .header
                    .header_as_schema()
                    .and_then(|s| arrow_ipc::convert::try_fb_to_schema(s).ok())
                    .map(Arc::new);
            }
            MessageHeader::RecordBatch => {
                let (Some(s), Some(batch)) = (&schema, msg.header.header_as_record_batch()) else {
                    return None;
                };
                let body = Buffer::from(msg.body.to_vec());
                let version = msg.header.version();
                let codec = batch.compression().map(|c| codec_name(c.codec()));
                let no_dicts = HashMap::new();
                let decode_one = |schema: &SchemaRef, c: usize| {
                    let projection = [c];
                    RecordBatchDecoder::try_new(&body, batch, schema.clone(), &no_dicts, &version)?
                        .with_projection(Some(&projection))
                        .read_record_batch()
                };
                for (c, field) in s.fields().iter().enumerate() {
                    let Err(e) = decode_one(s, c) else { continue };
                    // A top-level STRING read as the bytes it is: the first
                    // value that is not UTF-8 names the row.
                    if let Some(bytes_schema) = as_bytes(s, c)
                        && let Ok(b) = decode_one(&bytes_schema, c)
                        && let Some(r) = first_not_utf8(b.column(0).as_ref())
                    {
                        return Some(ResultDecodeError::NotUtf8 {
                            batch_start: first_row,
                            column: field.name().clone(),
                            row: Some(row + r as u64),
                        });
                    }
                    let text = e.to_string();
                    if text.contains("UTF8") || text.contains("utf-8") || text.contains("utf8") {
                        return Some(ResultDecodeError::NotUtf8 {
                            batch_start: first_row,
                            column: field.name().clone(),
                            row: None,
                        });
                    }
                    return codec.map(|codec| ResultDecodeError::CorruptBuffer {
                        batch_start: first_row,
                        codec,
                        column: Some(field.name().clone()),
                        reason: text,
                    });
                }
                row += u64::try_from(batch.length()).unwrap_or(0);
            }
            _ => {}
        }
    }
    None
}

/// `schema` with column `c` as bytes, if it is a top-level STRING.
fn as_bytes(schema: &SchemaRef, c: usize) -> Option<SchemaRef> {
    let field = schema.field(c);
    let bytes = match field.data_type() {
        DataType::Utf8 => DataType::Binary,
        DataType::LargeUtf8 => DataType::LargeBinary,
        _ => return None,
    };
    let mut fields: Vec<Field> = schema.fields().iter().map(|f| f.as_ref().clone()).collect();
    fields[c] = field.as_ref().clone().with_data_type(bytes);
    Some(Arc::new(Schema::new_with_metadata(
        fields,
        schema.metadata().clone(),
    )))
}

/// The index of the first non-null value of a binary column that is not UTF-8.
fn first_not_utf8(array: &dyn Array) -> Option<usize> {
    let bad = |v: Option<&[u8]>| v.is_some_and(|v| std::str::from_utf8(v).is_err());
    if let Some(a) = array.as_any().downcast_ref::<BinaryArray>() {
        return a.iter().position(bad);
    }
    let a = array.as_any().downcast_ref::<LargeBinaryArray>()?;
    a.iter().position(bad)
}
