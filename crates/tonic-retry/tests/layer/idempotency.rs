//! Connection resets and refusals, and when a non-idempotent call may be
//! replayed, against the recording echo server.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::future::BoxFuture;
use tokio::net::TcpListener;
use tonic::metadata::{MetadataMap, MetadataValue};
use tonic::{Code, Status};
use tonic_retry::layer::{MethodConfig, RetryLayer};
use tonic_retry::retrying::{RecordingSleeper, Retrying, Sleeper};
use tonic_types::{ErrorDetails, StatusExt};

use crate::support::proxy::proxy_after;
use crate::support::recorded::{Recorded, ready, unavailable_n};
use crate::support::{client, exact, say};

fn with_pushback(code: Code, value: &'static str) -> Status {
    let mut md = MetadataMap::new();
    md.insert("grpc-retry-pushback-ms", MetadataValue::from_static(value));
    Status::with_metadata(code, "pushback", md)
}

/// A TCP proxy that resets (SO_LINGER 0 + close) its first `resets`
/// connections after reading the client's first bytes, and forwards the rest.
async fn rst_proxy(upstream: SocketAddr, resets: u32) -> SocketAddr {
    proxy_after(upstream, resets, async |mut down| {
        use tokio::io::AsyncReadExt;
        let mut buf = [0u8; 1024];
        let _ = down.read(&mut buf).await;
        let _ = down.set_zero_linger();
    })
    .await
}

#[tokio::test]
async fn connection_reset_is_retried() {
    let server = Recorded::new(unavailable_n(0));
    let upstream = server.spawn().await;
    let proxy = rst_proxy(upstream, 1).await;
    let sleeper = RecordingSleeper::new();
    let layer =
        RetryLayer::new(exact(&sleeper)).method("/echo.Echo/Say", MethodConfig::idempotent());
    let stats = layer.stats_handle();
    let mut c = client(proxy, layer);
    let res = c.say(say("after-rst")).await.unwrap().into_inner();
    assert_eq!(res.message, "after-rst");
    assert_eq!(
        server.say_calls(),
        1,
        "the reset attempt never reached the server"
    );
    assert!(stats.snapshot().retries >= 1);
}

#[tokio::test]
async fn non_idempotent_not_replayed_after_server_saw_it() {
    let server = Recorded::new(unavailable_n(1));
    let addr = server.spawn().await;
    let sleeper = RecordingSleeper::new();
    // RetryLayer::new: every method non-idempotent.
    let mut c = client(addr, RetryLayer::new(exact(&sleeper)));
    let err = c.say(say("s")).await.unwrap_err();
    assert_eq!(err.code(), Code::Unavailable);
    assert_eq!(server.say_calls(), 1);
    assert!(sleeper.sleeps().is_empty());
}

#[tokio::test]
async fn non_idempotent_replayed_after_admission_rejection() {
    let server = Recorded::new(|i| {
        ready(match i {
            0 => Err(Status::with_error_details(
                Code::ResourceExhausted,
                "queue full",
                ErrorDetails::with_retry_info(Some(Duration::from_millis(300))),
            )),
            1 => Err(with_pushback(Code::Unavailable, "20")),
            _ => Ok(()),
        })
    });
    let addr = server.spawn().await;
    let sleeper = RecordingSleeper::new();
    let mut c = client(addr, RetryLayer::new(exact(&sleeper)));
    c.say(say("s")).await.unwrap();
    assert_eq!(server.say_calls(), 3);
    assert_eq!(sleeper.sleeps_ms(), vec![300, 20]);
}

/// A sleeper that runs a hook (once) before returning: here, it starts the
/// server, so the retry finds it.
#[derive(Clone)]
struct HookSleeper {
    rec: RecordingSleeper,
    #[allow(clippy::type_complexity)]
    hook: Arc<Mutex<Option<BoxFuture<'static, ()>>>>,
}

impl std::fmt::Debug for HookSleeper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HookSleeper")
    }
}

impl Sleeper for HookSleeper {
    fn sleep(&self, d: Duration) -> BoxFuture<'static, ()> {
        let rec = self.rec.sleep(d);
        let hook = self.hook.lock().unwrap().take();
        Box::pin(async move {
            rec.await;
            if let Some(h) = hook {
                h.await;
            }
        })
    }
}

#[tokio::test]
async fn non_idempotent_replayed_after_connection_refused() {
    // Reserve a port, close it: the first attempt is refused.
    let addr = {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        l.local_addr().unwrap()
    };
    let server = Recorded::new(unavailable_n(0));
    let s2 = server.clone();
    let rec = RecordingSleeper::new();
    let sleeper = HookSleeper {
        rec: rec.clone(),
        hook: Arc::new(Mutex::new(Some(Box::pin(async move {
            let l = TcpListener::bind(addr).await.unwrap();
            s2.serve_on(l);
        })))),
    };
    let policy = tonic_retry::policy::RetryPolicy::builder()
        .proportional_jitter(0.0)
        .build()
        .unwrap();
    let layer = RetryLayer::new(Retrying::new(vec![policy]).with_sleeper(sleeper));
    let mut c = client(addr, layer);
    let res = c.say(say("late")).await.unwrap().into_inner();
    assert_eq!(res.message, "late");
    assert_eq!(server.say_calls(), 1);
    assert_eq!(rec.sleeps_ms(), vec![100]);
}
