//! gRPC messages as bytes: a tonic codec that passes them through, the
//! reading of a caller's one request message, and the framing of the
//! messages handed back.
//!
//! *Why:* the layer forwards the caller's messages and the server's
//! responses without knowing their types (see `wire`), so it speaks gRPC
//! with `Bytes` as the message type. tonic still does the HTTP/2 and
//! status work (trailers, `grpc-status-details-bin`, transport errors with
//! their source chain, which the retry policy classifies).

use bytes::{Buf, BufMut, Bytes, BytesMut};
use http_body_util::BodyExt;
use tonic::Status;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};

/// A tonic codec whose messages are their encoded bytes.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct RawCodec;

impl Codec for RawCodec {
    type Encode = Bytes;
    type Decode = Bytes;
    type Encoder = RawCodec;
    type Decoder = RawCodec;
    fn encoder(&mut self) -> Self::Encoder {
        RawCodec
    }
    fn decoder(&mut self) -> Self::Decoder {
        RawCodec
    }
}

impl Encoder for RawCodec {
    type Item = Bytes;
    type Error = Status;
    fn encode(&mut self, item: Bytes, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put_slice(&item);
        Ok(())
    }
}

impl Decoder for RawCodec {
    type Item = Bytes;
    type Error = Status;
    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Bytes>, Status> {
        Ok(Some(src.copy_to_bytes(src.remaining())))
    }
}

/// The length of a gRPC message header: the compressed flag and the length.
const HEADER: usize = 5;

/// What a caller's request body holds.
#[derive(Debug)]
pub(crate) enum RequestBody {
    /// One uncompressed message.
    Message(Bytes),
    /// One compressed message: forwarded as it came (the whole body).
    Compressed(Bytes),
}

/// Reads the one message of a unary-request call (ExecutePlan,
/// ReattachExecute) from `body`, at most `limit` bytes. A body that is not
/// exactly one gRPC message is a status naming the problem.
pub(crate) async fn read_request(
    mut body: tonic::body::Body,
    limit: usize,
) -> Result<RequestBody, Status> {
    let mut buf = BytesMut::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| Status::internal(format!("reading the request: {e}")))?;
        if let Ok(data) = frame.into_data() {
            if buf.len() + data.len() > limit.saturating_add(HEADER) {
                return Err(Status::resource_exhausted(format!(
                    "request message larger than the limit of {limit} bytes"
                )));
            }
            buf.put(data);
        }
    }
    let buf = buf.freeze();
    if buf.len() < HEADER {
        return Err(Status::internal(
            "malformed request: no complete gRPC message header",
        ));
    }
    let flag = buf[0];
    let len = u32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]) as usize;
    if buf.len() - HEADER != len {
        return Err(Status::internal(format!(
            "malformed request: a {len}-byte message announced, {} bytes sent (one message expected)",
            buf.len() - HEADER
        )));
    }
    match flag {
        0 => Ok(RequestBody::Message(buf.slice(HEADER..))),
        1 => Ok(RequestBody::Compressed(buf)),
        other => Err(Status::internal(format!(
            "malformed request: compressed flag {other}"
        ))),
    }
}

/// `msg` as one uncompressed gRPC message.
pub(crate) fn framed(msg: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(HEADER + msg.len());
    out.put_u8(0);
    // A response larger than 4 GiB cannot have been decoded by tonic.
    out.put_u32(u32::try_from(msg.len()).unwrap_or(u32::MAX));
    out.put_slice(msg);
    out.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn read(bytes: &'static [u8]) -> Result<RequestBody, Status> {
        let body = tonic::body::Body::new(http_body_util::Full::new(Bytes::from_static(bytes)));
        read_request(body, 16).await
    }

    #[tokio::test]
    async fn one_message_exactly() {
        let ok = read(&[0, 0, 0, 0, 2, 7, 8]).await.unwrap();
        assert!(matches!(ok, RequestBody::Message(m) if m[..] == [7, 8]));
        let c = read(&[1, 0, 0, 0, 1, 9]).await.unwrap();
        assert!(matches!(c, RequestBody::Compressed(m) if m.len() == 6));
        for bad in [
            &[][..],
            &[0, 0, 0][..],
            &[0, 0, 0, 0, 3, 1][..],
            &[0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0][..],
            &[2, 0, 0, 0, 0][..],
        ] {
            let body =
                tonic::body::Body::new(http_body_util::Full::new(Bytes::copy_from_slice(bad)));
            let err = read_request(body, 16).await.unwrap_err();
            assert_eq!(err.code(), tonic::Code::Internal, "{bad:?}");
        }
        let err = read(&[
            0, 0, 0, 0, 20, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        ])
        .await
        .unwrap_err();
        assert_eq!(err.code(), tonic::Code::ResourceExhausted);
        assert_eq!(&framed(&[5])[..], &[0, 0, 0, 0, 1, 5]);
    }
}
