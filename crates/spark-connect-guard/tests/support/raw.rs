//! A gRPC server over a real loopback socket that records each request's
//! raw bytes and answers with raw bytes: what a server sees byte for byte,
//! and what a hostile server can send.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use bytes::{BufMut, Bytes, BytesMut};
use http_body::Frame;
use http_body_util::BodyExt;
use tokio::net::TcpListener;
use tokio_stream::wrappers::TcpListenerStream;

/// One recorded call: its path, headers and body bytes.
#[derive(Debug, Clone)]
pub struct Call {
    pub path: String,
    pub headers: http::HeaderMap,
    pub body: Bytes,
}

/// What the server answers every call with: body chunks, then trailers
/// (`None`: the body just ends).
#[derive(Clone)]
pub struct Reply {
    pub chunks: Vec<Bytes>,
    pub trailers: Option<http::HeaderMap>,
}

impl Reply {
    /// `messages` as gRPC messages, then `grpc-status: 0`.
    pub fn ok(messages: &[Bytes]) -> Reply {
        Reply {
            chunks: messages.iter().map(|m| frame(m)).collect(),
            trailers: Some(status_trailers(0)),
        }
    }
}

pub fn status_trailers(code: u8) -> http::HeaderMap {
    let mut t = http::HeaderMap::new();
    t.insert("grpc-status", http::HeaderValue::from(i32::from(code)));
    t
}

/// `msg` as one uncompressed gRPC message.
pub fn frame(msg: &[u8]) -> Bytes {
    let mut b = BytesMut::new();
    b.put_u8(0);
    b.put_u32(msg.len() as u32);
    b.put_slice(msg);
    b.freeze()
}

/// The running server.
pub struct RawServer {
    pub addr: SocketAddr,
    pub calls: Arc<Mutex<Vec<Call>>>,
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl RawServer {
    pub async fn start(reply: Reply) -> RawServer {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let calls: Arc<Mutex<Vec<Call>>> = Arc::default();
        let recorded = calls.clone();
        let svc = tower::service_fn(move |req: http::Request<tonic::body::Body>| {
            let (recorded, reply) = (recorded.clone(), reply.clone());
            async move {
                let (parts, body) = req.into_parts();
                let body = body
                    .collect()
                    .await
                    .map(|c| c.to_bytes())
                    .unwrap_or_default();
                recorded.lock().unwrap().push(Call {
                    path: parts.uri.path().to_owned(),
                    headers: parts.headers,
                    body,
                });
                let mut frames: Vec<Result<Frame<Bytes>, Infallible>> = reply
                    .chunks
                    .into_iter()
                    .map(|c| Ok(Frame::data(c)))
                    .collect();
                if let Some(t) = reply.trailers {
                    frames.push(Ok(Frame::trailers(t)));
                }
                let body = http_body_util::StreamBody::new(tokio_stream::iter(frames));
                let mut resp = http::Response::new(tonic::body::Body::new(body));
                resp.headers_mut().insert(
                    "content-type",
                    http::HeaderValue::from_static("application/grpc"),
                );
                Ok::<_, Infallible>(resp)
            }
        });
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(async move {
            let _ = tonic::transport::Server::builder()
                .serve_with_incoming_shutdown(svc, TcpListenerStream::new(listener), async {
                    let _ = stopped.await;
                })
                .await;
        });
        RawServer {
            addr,
            calls,
            _stop: stop,
        }
    }

    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn calls(&self) -> Vec<Call> {
        self.calls.lock().unwrap().clone()
    }
}
