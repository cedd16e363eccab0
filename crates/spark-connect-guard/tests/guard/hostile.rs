//! Bytes: a field our protos do not know reaches the server unchanged, and
//! a hostile server's malformed answers end the stream with a status.

use bytes::{BufMut, Bytes, BytesMut};
use prost::Message;
use spark_connect_retry::layer::ReattachLayer;
use spark_connect_stub::spark::connect as stub;
use stub::spark_connect_service_client::SparkConnectServiceClient;
use tonic_retry::retrying::RecordingSleeper;
use tower::Layer;

use crate::support::raw::{RawServer, Reply, frame, status_trailers};
use crate::support::{SESSION, drain, retrying, sql_request};

/// A tonic codec whose messages are their bytes: a caller that sends
/// fields no generated type has.
#[derive(Clone, Copy, Default)]
struct Raw;

impl tonic::codec::Codec for Raw {
    type Encode = Bytes;
    type Decode = Bytes;
    type Encoder = Raw;
    type Decoder = Raw;
    fn encoder(&mut self) -> Raw {
        Raw
    }
    fn decoder(&mut self) -> Raw {
        Raw
    }
}

impl tonic::codec::Encoder for Raw {
    type Item = Bytes;
    type Error = tonic::Status;
    fn encode(
        &mut self,
        item: Bytes,
        dst: &mut tonic::codec::EncodeBuf<'_>,
    ) -> Result<(), tonic::Status> {
        dst.put_slice(&item);
        Ok(())
    }
}

impl tonic::codec::Decoder for Raw {
    type Item = Bytes;
    type Error = tonic::Status;
    fn decode(
        &mut self,
        src: &mut tonic::codec::DecodeBuf<'_>,
    ) -> Result<Option<Bytes>, tonic::Status> {
        use bytes::Buf;
        Ok(Some(src.copy_to_bytes(src.remaining())))
    }
}

fn complete_response() -> Bytes {
    stub::ExecutePlanResponse {
        session_id: SESSION.into(),
        server_side_session_id: "ss".into(),
        response_id: "r1".into(),
        response_type: Some(stub::execute_plan_response::ResponseType::ResultComplete(
            stub::execute_plan_response::ResultComplete {},
        )),
        ..Default::default()
    }
    .encode_to_vec()
    .into()
}

#[tokio::test]
async fn a_field_our_protos_do_not_know_arrives_unchanged() {
    let server = RawServer::start(Reply::ok(&[complete_response()])).await;
    let channel = tonic::transport::Endpoint::from_shared(server.endpoint())
        .unwrap()
        .connect_lazy();
    let sleeper = RecordingSleeper::new();
    let service = ReattachLayer::new()
        .retrying(retrying(&sleeper))
        .layer(channel);
    let mut grpc = tonic::client::Grpc::new(service);

    let mut sent = BytesMut::from(&sql_request("SELECT 1").encode_to_vec()[..]);
    // Field 4242, a string: in no version of our protos.
    prost::encoding::string::encode(4242, &"from a newer Spark".to_owned(), &mut sent);
    let sent = sent.freeze();
    let mut req = tonic::Request::new(sent.clone());
    req.metadata_mut()
        .insert("x-custom", "kept".parse().unwrap());
    grpc.ready().await.unwrap();
    let resp = grpc
        .server_streaming(
            req,
            http::uri::PathAndQuery::from_static("/spark.connect.SparkConnectService/ExecutePlan"),
            Raw,
        )
        .await
        .unwrap();
    let mut stream = resp.into_inner();
    let got = stream.message().await.unwrap().expect("the response");
    assert_eq!(
        got,
        complete_response(),
        "the response reaches the caller as sent"
    );
    assert!(stream.message().await.unwrap().is_none());

    let calls = server.calls();
    let call = calls
        .iter()
        .find(|c| c.path.ends_with("/ExecutePlan"))
        .expect("an ExecutePlan");
    assert_eq!(call.headers.get("x-custom").unwrap(), "kept");
    let body = &call.body[5..];
    assert_eq!(
        &body[..sent.len()],
        &sent[..],
        "the caller's bytes, unchanged and first"
    );
    // What the layer appended: an operation id and the reattach option.
    let decoded = stub::ExecutePlanRequest::decode(body).unwrap();
    assert!(decoded.operation_id.is_some());
    assert!(matches!(
        decoded
            .request_options
            .last()
            .and_then(|o| o.request_option.clone()),
        Some(
            stub::execute_plan_request::request_option::RequestOption::ReattachOptions(
                stub::ReattachOptions { reattachable: true }
            )
        )
    ));
    let mut rest = &body[sent.len()..];
    while !rest.is_empty() {
        let (tag, _) = prost::encoding::decode_key(&mut rest).unwrap();
        assert!(
            tag == 5 || tag == 6,
            "only the id and the option are appended, got {tag}"
        );
        let len = prost::encoding::decode_varint(&mut rest).unwrap() as usize;
        rest = &rest[len..];
    }
}

/// Answers a hostile server may send to ExecutePlan (and to every
/// ReattachExecute after it).
fn hostile_replies() -> Vec<(&'static str, Reply)> {
    let mut short = BytesMut::new();
    short.put_u8(0);
    short.put_u32(100);
    short.put_slice(b"abc");
    let mut huge = BytesMut::new();
    huge.put_u8(0);
    huge.put_u32(u32::MAX);
    let mut compressed = BytesMut::new();
    compressed.put_u8(1);
    compressed.put_u32(1);
    compressed.put_u8(7);
    let other_session = stub::ExecutePlanResponse {
        session_id: "another".into(),
        response_id: "r1".into(),
        ..Default::default()
    }
    .encode_to_vec();
    let not_complete = stub::ExecutePlanResponse {
        session_id: SESSION.into(),
        response_id: "r1".into(),
        ..Default::default()
    }
    .encode_to_vec();
    vec![
        (
            "a message cut short",
            Reply {
                chunks: vec![short.freeze()],
                trailers: Some(status_trailers(0)),
            },
        ),
        (
            "a 4 GiB message announced",
            Reply {
                chunks: vec![huge.freeze()],
                trailers: None,
            },
        ),
        (
            "compressed without an encoding",
            Reply {
                chunks: vec![compressed.freeze()],
                trailers: Some(status_trailers(0)),
            },
        ),
        (
            "not protobuf",
            Reply::ok(&[Bytes::from_static(&[0xff, 0xff, 0xff])]),
        ),
        (
            "a string that is not UTF-8",
            Reply::ok(&[Bytes::from_static(&[0x0a, 0x01, 0xff])]),
        ),
        (
            "another session's response",
            Reply::ok(&[other_session.into()]),
        ),
        (
            "no status at all",
            Reply {
                chunks: vec![frame(&not_complete)],
                trailers: None,
            },
        ),
        (
            "a status that is not a number",
            Reply {
                chunks: vec![],
                trailers: Some({
                    let mut t = http::HeaderMap::new();
                    t.insert("grpc-status", http::HeaderValue::from_static("banana"));
                    t
                }),
            },
        ),
    ]
}

#[tokio::test]
async fn a_hostile_servers_malformed_answers_end_in_a_status_never_a_panic() {
    for (what, reply) in hostile_replies() {
        let server = RawServer::start(reply).await;
        let channel = tonic::transport::Endpoint::from_shared(server.endpoint())
            .unwrap()
            .connect_lazy();
        let sleeper = RecordingSleeper::new();
        let service = ReattachLayer::new()
            .retrying(retrying(&sleeper))
            .layer(channel);
        let mut client = SparkConnectServiceClient::new(service);
        let out = drain(&mut client, sql_request("SELECT 1")).await;
        assert!(!out.complete, "{what}: no ResultComplete from garbage");
        let err = out
            .error
            .unwrap_or_else(|| panic!("{what}: ended without an error"));
        assert_ne!(err.code(), tonic::Code::Ok, "{what}");
        // tonic reads an unparsable grpc-status as UNKNOWN with no message.
        if what != "a status that is not a number" {
            assert!(
                !err.message().is_empty(),
                "{what}: a message naming the problem"
            );
        }
    }
}
