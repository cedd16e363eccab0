//! The HTTP/2 flow-control setting reaches the wire: a loopback listener reads the client's
//! connection preface and frames, and records the `SETTINGS_INITIAL_WINDOW_SIZE` it advertises
//! (the stream window) and the connection-level `WINDOW_UPDATE` (the connection window is
//! 65,535 plus its increment), up to the first request's `HEADERS`. Nothing is timed.

use spark_connect_retry::proto::ConfigRequest;
use spark_connect_retry::session::channel::ChannelBuilder;
use spark_connect_retry::session::conn_string::ConnectionString;
use spark_connect_retry::session::{Http2FlowControl, SparkSession};
use spark_connect_retry::transport::spark_client;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const DATA: u8 = 0x0;
const HEADERS: u8 = 0x1;
const SETTINGS: u8 = 0x4;
const WINDOW_UPDATE: u8 = 0x8;
const SETTINGS_INITIAL_WINDOW_SIZE: u16 = 0x4;
const MIB: u32 = 1024 * 1024;

/// What the client advertised before its first request.
#[derive(Debug, Default, PartialEq, Eq)]
struct Advertised {
    /// `SETTINGS_INITIAL_WINDOW_SIZE` (HTTP/2's default when absent: 65,535).
    stream_window: u32,
    /// 65,535 plus the connection-level `WINDOW_UPDATE` increments.
    connection_window: u32,
}

/// Reads one frame: (type, flags, stream id, payload).
async fn read_frame(sock: &mut TcpStream) -> (u8, u8, u32, Vec<u8>) {
    let mut head = [0u8; 9];
    sock.read_exact(&mut head).await.expect("frame header");
    let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
    assert!(len <= 1 << 20, "frame of {len} bytes");
    let stream = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
    let mut payload = vec![0u8; len];
    sock.read_exact(&mut payload).await.expect("frame payload");
    (head[3], head[4], stream, payload)
}

/// Accepts one connection, sends an empty SETTINGS, and records the client's windows until
/// its first `HEADERS` (at most 64 frames).
async fn record(listener: TcpListener) -> Advertised {
    let (mut sock, _) = listener.accept().await.expect("accept");
    sock.write_all(&[0, 0, 0, SETTINGS, 0, 0, 0, 0, 0])
        .await
        .expect("server settings");
    let mut preface = [0u8; 24];
    sock.read_exact(&mut preface).await.expect("preface");
    assert_eq!(&preface[..], PREFACE);
    let mut seen = Advertised {
        stream_window: 65_535,
        connection_window: 65_535,
    };
    for _ in 0..64 {
        let (kind, flags, stream, payload) = read_frame(&mut sock).await;
        match kind {
            SETTINGS if flags & 0x1 == 0 => {
                assert_eq!(payload.len() % 6, 0, "SETTINGS payload");
                for entry in payload.chunks_exact(6) {
                    let id = u16::from_be_bytes([entry[0], entry[1]]);
                    if id == SETTINGS_INITIAL_WINDOW_SIZE {
                        seen.stream_window =
                            u32::from_be_bytes([entry[2], entry[3], entry[4], entry[5]]);
                    }
                }
            }
            WINDOW_UPDATE if stream == 0 => {
                let inc = u32::from_be_bytes([payload[0], payload[1], payload[2], payload[3]])
                    & 0x7fff_ffff;
                seen.connection_window += inc;
            }
            HEADERS => return seen,
            DATA => panic!("DATA before HEADERS"),
            _ => {}
        }
    }
    panic!("no HEADERS in the client's first 64 frames: {seen:?}");
}

async fn listener() -> (TcpListener, String) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    (listener, format!("sc://127.0.0.1:{port}"))
}

/// Runs a session's first call against the recorder; the call never gets an answer and is
/// dropped once the frames are recorded.
async fn via_session(params: &str, flow: Option<Http2FlowControl>) -> Advertised {
    let (listener, url) = listener().await;
    let mut builder = SparkSession::builder().remote(format!("{url}/{params}"));
    if let Some(flow) = flow {
        builder = builder.http2_flow_control(flow);
    }
    let spark = builder.build().expect("session");
    let call = tokio::spawn(async move { spark.spark_version().await });
    let seen = record(listener).await;
    call.abort();
    seen
}

/// Same through [`ChannelBuilder`] and the generated client.
async fn via_channel(params: &str, flow: Option<Http2FlowControl>) -> Advertised {
    let (listener, url) = listener().await;
    let cs = ConnectionString::parse_with_env(&format!("{url}/{params}"), |_| None).unwrap();
    let mut builder = ChannelBuilder::new(&cs);
    if let Some(flow) = flow {
        builder = builder.http2_flow_control(flow);
    }
    let mut client = spark_client(builder.connect_lazy().expect("channel"));
    let call = tokio::spawn(async move { client.config(ConfigRequest::default()).await });
    let seen = record(listener).await;
    call.abort();
    seen
}

fn advertised(stream_window: u32, connection_window: u32) -> Advertised {
    Advertised {
        stream_window,
        connection_window,
    }
}

#[tokio::test]
async fn session_defaults_to_16_mib_streams_and_a_32_mib_connection() {
    assert_eq!(via_session("", None).await, advertised(16 * MIB, 32 * MIB));
    assert_eq!(via_channel("", None).await, advertised(16 * MIB, 32 * MIB));
}

#[tokio::test]
async fn builder_setting_reaches_the_connection() {
    let old = Http2FlowControl::Fixed {
        stream_window: 2 * MIB,
        connection_window: 5 * MIB,
    };
    assert_eq!(
        via_session("", Some(old)).await,
        advertised(2 * MIB, 5 * MIB)
    );
    // The builder's setting wins over the connection string's.
    let params = ";grpc_initial_stream_window_size=1048576";
    assert_eq!(
        via_channel(params, Some(old)).await,
        advertised(2 * MIB, 5 * MIB)
    );
}

#[tokio::test]
async fn connection_string_windows_reach_the_connection() {
    let params =
        ";grpc_initial_stream_window_size=4194304;grpc_initial_connection_window_size=100000000";
    assert_eq!(
        via_session(params, None).await,
        advertised(4 * MIB, 100_000_000)
    );
    assert_eq!(
        via_channel(params, None).await,
        advertised(4 * MIB, 100_000_000)
    );
}

#[tokio::test]
async fn adaptive_starts_from_http2_defaults() {
    // hyper's adaptive window starts at 65,535 both ways and grows by itself later.
    let default = advertised(65_535, 65_535);
    assert_eq!(
        via_session(";grpc_http2_bdp_probe=true", None).await,
        default
    );
    assert_eq!(
        via_channel("", Some(Http2FlowControl::Adaptive)).await,
        default
    );
}
