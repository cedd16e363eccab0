//! An echo server that records what each attempt carried: the scripted
//! outcome of each `Say` call by its index, the replies of each `Repeat`
//! call by its index, and a `Collect` whose first call fails UNAVAILABLE
//! after reading its whole request stream. Every `Say` and `Repeat` call
//! records its `grpc-previous-rpc-attempts` and `grpc-timeout` headers.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use futures_util::future::BoxFuture;
use tokio::net::TcpListener;
use tokio_stream::wrappers::TcpListenerStream;
use tonic::transport::Server;
use tonic::{Request, Response, Status};
use tonic_retry_echo::{Collector, CollectorServer, Echo, EchoReply, EchoRequest, EchoServer};

type SayFn = dyn Fn(u32) -> BoxFuture<'static, Result<(), Status>> + Send + Sync;
type RepeatFn = dyn Fn(u32) -> Vec<Result<EchoReply, Status>> + Send + Sync;

/// The server; clones share its counters and records.
#[derive(Clone)]
pub struct Recorded {
    say_calls: Arc<AtomicU32>,
    repeat_calls: Arc<AtomicU32>,
    /// `grpc-previous-rpc-attempts` of each `Say`/`Repeat` call, as sent.
    pub previous_attempts: Arc<Mutex<Vec<Option<String>>>>,
    /// `grpc-timeout` of each `Say`/`Repeat` call, as sent.
    pub timeouts: Arc<Mutex<Vec<Option<String>>>>,
    /// The messages of each `Collect` call's request stream.
    pub collected: Arc<Mutex<Vec<Vec<String>>>>,
    say: Arc<SayFn>,
    repeat: Arc<RepeatFn>,
}

impl Recorded {
    /// A server whose `Say` call `n` (from 0) ends as `say(n)` says, with
    /// an echo of the request if it is `Ok`; `Repeat` sends nothing.
    pub fn new(
        say: impl Fn(u32) -> BoxFuture<'static, Result<(), Status>> + Send + Sync + 'static,
    ) -> Self {
        Recorded {
            say_calls: Arc::default(),
            repeat_calls: Arc::default(),
            previous_attempts: Arc::default(),
            timeouts: Arc::default(),
            collected: Arc::default(),
            say: Arc::new(say),
            repeat: Arc::new(|_| vec![]),
        }
    }

    /// `Repeat` call `n` (from 0) sends the items of `repeat(n)`.
    pub fn with_repeat(
        mut self,
        repeat: impl Fn(u32) -> Vec<Result<EchoReply, Status>> + Send + Sync + 'static,
    ) -> Self {
        self.repeat = Arc::new(repeat);
        self
    }

    /// `Say` calls received so far.
    pub fn say_calls(&self) -> u32 {
        self.say_calls.load(Ordering::SeqCst)
    }

    /// `Repeat` calls received so far.
    pub fn repeat_calls(&self) -> u32 {
        self.repeat_calls.load(Ordering::SeqCst)
    }

    fn record<T>(&self, req: &Request<T>) {
        let get = |k: &str| {
            req.metadata()
                .get(k)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        self.previous_attempts
            .lock()
            .unwrap()
            .push(get("grpc-previous-rpc-attempts"));
        self.timeouts.lock().unwrap().push(get("grpc-timeout"));
    }

    /// Serve on `listener`, in the background.
    pub fn serve_on(&self, listener: TcpListener) {
        tokio::spawn(
            Server::builder()
                .add_service(EchoServer::new(self.clone()))
                .add_service(CollectorServer::new(self.clone()))
                .serve_with_incoming(TcpListenerStream::new(listener)),
        );
    }

    /// Serve on a fresh loopback port, in the background.
    pub async fn spawn(&self) -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        self.serve_on(listener);
        addr
    }
}

/// A `Say` script step that is ready at once.
pub fn ready(r: Result<(), Status>) -> BoxFuture<'static, Result<(), Status>> {
    Box::pin(std::future::ready(r))
}

/// A `Say` script whose first `n` calls fail UNAVAILABLE ("restarting").
pub fn unavailable_n(n: u32) -> impl Fn(u32) -> BoxFuture<'static, Result<(), Status>> {
    move |i| {
        ready(if i < n {
            Err(Status::unavailable("restarting"))
        } else {
            Ok(())
        })
    }
}

type Replies = tonic::codegen::BoxStream<EchoReply>;

#[tonic::async_trait]
impl Echo for Recorded {
    async fn say(&self, req: Request<EchoRequest>) -> Result<Response<EchoReply>, Status> {
        self.record(&req);
        let i = self.say_calls.fetch_add(1, Ordering::SeqCst);
        (self.say)(i).await?;
        // Echo the message, so that a large request proves byte-exact delivery.
        Ok(Response::new(EchoReply {
            message: req.into_inner().message,
        }))
    }

    type RepeatStream = Replies;

    async fn repeat(&self, req: Request<EchoRequest>) -> Result<Response<Replies>, Status> {
        self.record(&req);
        let i = self.repeat_calls.fetch_add(1, Ordering::SeqCst);
        Ok(Response::new(Box::pin(tokio_stream::iter((self.repeat)(
            i,
        )))))
    }
}

#[tonic::async_trait]
impl Collector for Recorded {
    async fn collect(
        &self,
        req: Request<tonic::Streaming<EchoRequest>>,
    ) -> Result<Response<EchoReply>, Status> {
        let mut stream = req.into_inner();
        let mut messages = vec![];
        while let Some(m) = stream.message().await? {
            messages.push(m.message);
        }
        let call = {
            let mut collected = self.collected.lock().unwrap();
            collected.push(messages.clone());
            collected.len()
        };
        if call == 1 {
            return Err(Status::unavailable("restarting"));
        }
        Ok(Response::new(EchoReply {
            message: messages.join(","),
        }))
    }
}
