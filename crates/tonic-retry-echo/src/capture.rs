//! Capturing the workspace crates' `tracing` events in a test, without races
//! (`spark_connect_retry` and `tonic_retry`), for every test binary that
//! asserts on events.
//!
//! Why not a scoped subscriber (`tracing::subscriber::set_default`) per test:
//! tracing caches each callsite's interest globally, once, when the first
//! thread reaches it. While at most one dispatcher is registered, that interest
//! is asked of the *registering thread's* default only. So when another test's
//! thread (which has no subscriber) reaches a callsite first, the callsite is
//! cached as "never", and a scoped subscriber on the test's own thread misses
//! its events for the rest of the process. Whether that happens depends on
//! which test thread gets there first: a flaky test (docs/flaky-tests.md has
//! the reproducer).
//!
//! Instead, a test binary that captures events installs one global subscriber
//! with [`init`] before any of the crate's code runs (every test of such a
//! binary calls it first, directly or through a shared helper), and each test
//! collects the events of its own thread with [`capture`]. A `#[tokio::test]`
//! runs its futures on the test's thread, so the events are the test's own.

use std::cell::RefCell;
use std::sync::Once;

use tracing_subscriber::Layer as _;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// One event of a workspace crate, as a test sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// The event's target (its module path).
    pub target: String,
    /// Its level.
    pub level: tracing::Level,
    /// The `message` field, if any.
    pub message: String,
    /// The other fields, `name=value`, in the order they were recorded.
    pub fields: Vec<String>,
    /// The fields of the spans the event is in, innermost span first.
    pub span_fields: Vec<String>,
}

impl Event {
    /// Whether the event, or a span it is in, has the field `name=value`.
    pub fn has(&self, field: &str) -> bool {
        self.fields
            .iter()
            .chain(&self.span_fields)
            .any(|f| f == field)
    }
    /// The value of field `name` of the event or its spans, if recorded.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.fields
            .iter()
            .chain(&self.span_fields)
            .find_map(|f| f.strip_prefix(name)?.strip_prefix('='))
    }
}

/// The fields of one span, kept in its extensions.
struct SpanFields(Vec<String>);

/// Collects `name=value` fields.
struct Fields<'a>(&'a mut Vec<String>);

impl tracing::field::Visit for Fields<'_> {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.0.push(format!("{}={value:?}", field.name()));
    }
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        self.0.push(format!("{}={value}", field.name()));
    }
}

thread_local! {
    /// The crate's events on this thread, while a test captures them.
    static CAPTURED: RefCell<Option<Vec<Event>>> = const { RefCell::new(None) };
}

/// Installs the binary's global subscriber (once): the crate's debug output
/// for failing tests, and the capture. Call it before any of the crate's code
/// runs in the test binary.
pub fn init() {
    static INIT: Once = Once::new();
    INIT.call_once(|| {
        let fmt = tracing_subscriber::fmt::layer()
            .with_test_writer()
            .with_filter(tracing_subscriber::EnvFilter::new(
                "spark_connect_retry=debug,tonic_retry=debug",
            ));
        tracing_subscriber::registry()
            .with(fmt)
            .with(Capture)
            .init();
    });
}

/// The crate's events emitted on this thread while `fut` runs, with its output.
pub async fn capture<F: std::future::Future>(fut: F) -> (F::Output, Vec<Event>) {
    init();
    CAPTURED.with(|c| *c.borrow_mut() = Some(vec![]));
    let out = fut.await;
    let events = CAPTURED.with(|c| c.borrow_mut().take().unwrap_or_default());
    (out, events)
}

/// Records the crate's events into [`CAPTURED`].
struct Capture;

impl<S> tracing_subscriber::Layer<S> for Capture
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    fn on_new_span(
        &self,
        attrs: &tracing::span::Attributes<'_>,
        id: &tracing::span::Id,
        ctx: tracing_subscriber::layer::Context<'_, S>,
    ) {
        let mut fields = vec![];
        attrs.record(&mut Fields(&mut fields));
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(SpanFields(fields));
        }
    }
    fn on_record(
        &self,
        id: &tracing::span::Id,
        values: &tracing::span::Record<'_>,
        ctx: tracing_subscriber::layer::Context<'_, S>,
    ) {
        if let Some(span) = ctx.span(id)
            && let Some(fields) = span.extensions_mut().get_mut::<SpanFields>()
        {
            values.record(&mut Fields(&mut fields.0));
        }
    }
    fn on_event(&self, e: &tracing::Event<'_>, ctx: tracing_subscriber::layer::Context<'_, S>) {
        let meta = e.metadata();
        if !(meta.target().starts_with("spark_connect_retry")
            || meta.target().starts_with("tonic_retry"))
        {
            return;
        }
        CAPTURED.with(|c| {
            if let Some(events) = c.borrow_mut().as_mut() {
                let mut event = Event {
                    target: meta.target().to_owned(),
                    level: *meta.level(),
                    message: String::new(),
                    fields: vec![],
                    span_fields: vec![],
                };
                e.record(&mut event);
                for span in ctx.event_scope(e).into_iter().flatten() {
                    if let Some(fields) = span.extensions().get::<SpanFields>() {
                        event.span_fields.extend(fields.0.iter().cloned());
                    }
                }
                events.push(event);
            }
        });
    }
}

impl tracing::field::Visit for Event {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.message = format!("{value:?}");
        } else {
            self.fields.push(format!("{}={value:?}", field.name()));
        }
    }
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        if field.name() == "message" {
            self.message = value.to_owned();
        } else {
            self.fields.push(format!("{}={value}", field.name()));
        }
    }
}
