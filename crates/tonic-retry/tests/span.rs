//! The retry layer's span carries OpenTelemetry's RPC fields: set when the
//! call starts, and the final status code recorded when it ends. Its own
//! test binary, so its subscriber is the only one.

mod support;

use std::sync::{Arc, Mutex};

use tonic_retry::layer::{MethodConfig, RetryLayer};
use tonic_retry::retrying::RecordingSleeper;
use tonic_retry_echo::EchoClient;
use tower::ServiceBuilder;

use support::recorded::{Recorded, unavailable_n};
use support::{exact, say};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing_subscriber::layer::{Context, SubscriberExt};

/// Every field of every `grpc_retry` span, in the order set or recorded.
#[derive(Clone, Default)]
struct Spans(Arc<Mutex<Vec<String>>>);

struct Collect<'a>(&'a mut Vec<String>);

impl Visit for Collect<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.push(format!("{}={value:?}", field.name()));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.push(format!("{}={value}", field.name()));
    }
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Spans {
    fn on_new_span(&self, attrs: &Attributes<'_>, _: &Id, _: Context<'_, S>) {
        if attrs.metadata().name() == "grpc_retry" {
            attrs.record(&mut Collect(&mut self.0.lock().unwrap()));
        }
    }
    fn on_record(&self, _: &Id, values: &Record<'_>, _: Context<'_, S>) {
        values.record(&mut Collect(&mut self.0.lock().unwrap()));
    }
}

#[tokio::test(flavor = "current_thread")]
async fn span_has_the_rpc_fields_and_the_final_code() {
    let spans = Spans::default();
    let subscriber = tracing_subscriber::registry()
        .with(spans.clone())
        .with(tracing_subscriber::filter::LevelFilter::DEBUG);
    let _guard = tracing::subscriber::set_default(subscriber);

    let server = Recorded::new(unavailable_n(1));
    let addr = server.spawn().await;
    let sleeper = RecordingSleeper::new();
    let layer =
        RetryLayer::new(exact(&sleeper)).method("/echo.Echo/Say", MethodConfig::idempotent());
    // Not `support::client`, which installs the global capture this test
    // does without.
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect_lazy();
    let mut client = EchoClient::new(ServiceBuilder::new().layer(layer).service(channel));
    client.say(say("s")).await.unwrap();
    assert_eq!(sleeper.sleeps_ms(), vec![100], "one retry");
    assert_eq!(
        *spans.0.lock().unwrap(),
        [
            "rpc.system=grpc",
            "rpc.service=echo.Echo",
            "rpc.method=Say",
            "rpc.grpc.status_code=0",
        ]
    );
}
