//! The `tracing` layer: turns each event into a `Record` on the emitting
//! thread, writes it to the console at once and offers it to the file queue
//! without waiting. Span fields (shard, pu, stream, topic, partition, …) are
//! rendered once when the span is created and appended to every event
//! inside it. This layer never touches a file and never blocks on the queue:
//! when the queue is full the line is counted as dropped (the writer reports
//! the count in the file).

use super::format::{FieldWriter, Record};
use super::writer::{Console, Message};
use crate::limits::{RECENT_EVENT_TEXT_MAX, RECENT_EVENTS_MAX};
use std::cell::RefCell;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{SyncSender, TrySendError};
use std::time::SystemTime;
use tracing::span::{Attributes, Id, Record as SpanValues};
use tracing::{Event, Subscriber};
use tracing_subscriber::layer::{Context, Layer};
use tracing_subscriber::registry::LookupSpan;

/// A span's fields as ` key=value` text, stored in the span's extensions.
struct SpanFields(String);

/// The queue into `log-writer` and the drop counter it reports.
pub struct FileQueue {
    pub sender: SyncSender<Message>,
    pub dropped: Arc<AtomicU64>,
}

pub struct LogLayer {
    pub console: Arc<Console>,
    /// `None` for the stderr-only subscriber of the short subcommands.
    pub files: Option<FileQueue>,
}

thread_local! {
    /// The thread's name, read once per thread rather than per event.
    static THREAD_NAME: RefCell<Option<Option<String>>> = const { RefCell::new(None) };
    /// The library lines this thread let through lately (`throttle`).
    static THROTTLE: RefCell<super::throttle::Throttle> = RefCell::new(Default::default());
}

/// Whether a library line passes this thread's throttle, with the count of
/// lines like it held back since the last; always `Some(0)` for the
/// daemon's own lines.
fn admitted(metadata: &tracing::Metadata<'_>) -> Option<u64> {
    if !super::throttle::throttled(metadata.target()) {
        return Some(0);
    }
    // The call site's static metadata: one per place that logs.
    let site = std::ptr::from_ref(metadata) as usize;
    THROTTLE
        .try_with(|throttle| {
            throttle.borrow_mut().admit(
                site,
                std::time::Instant::now(),
                crate::limits::LIBRARY_LOG_INTERVAL,
            )
        })
        .unwrap_or(Some(0))
}

fn thread_name() -> Option<String> {
    THREAD_NAME.with(|cached| {
        cached
            .borrow_mut()
            .get_or_insert_with(|| std::thread::current().name().map(str::to_string))
            .clone()
    })
}

impl<S> Layer<S> for LogLayer
where
    S: Subscriber + for<'lookup> LookupSpan<'lookup>,
{
    fn on_new_span(&self, attributes: &Attributes<'_>, id: &Id, context: Context<'_, S>) {
        let Some(span) = context.span(id) else {
            return;
        };
        let mut message = String::new();
        let mut fields = String::new();
        attributes.record(&mut FieldWriter {
            message: &mut message,
            fields: &mut fields,
        });
        span.extensions_mut().insert(SpanFields(fields));
    }

    fn on_record(&self, id: &Id, values: &SpanValues<'_>, context: Context<'_, S>) {
        let Some(span) = context.span(id) else {
            return;
        };
        let mut message = String::new();
        let mut fields = String::new();
        values.record(&mut FieldWriter {
            message: &mut message,
            fields: &mut fields,
        });
        let mut extensions = span.extensions_mut();
        match extensions.get_mut::<SpanFields>() {
            Some(existing) => existing.0.push_str(&fields),
            None => extensions.insert(SpanFields(fields)),
        }
    }

    fn on_event(&self, event: &Event<'_>, context: Context<'_, S>) {
        let Some(held_back) = admitted(event.metadata()) else {
            return;
        };
        let mut text = String::with_capacity(128);
        let mut fields = String::new();
        event.record(&mut FieldWriter {
            message: &mut text,
            fields: &mut fields,
        });
        text.push_str(&fields);
        if held_back > 0 {
            text.push_str(&format!(" held_back={held_back}"));
        }
        if let Some(scope) = context.event_scope(event) {
            for span in scope.from_root() {
                if let Some(span_fields) = span.extensions().get::<SpanFields>() {
                    text.push_str(&span_fields.0);
                }
            }
        }
        let metadata = event.metadata();
        if *metadata.level() <= tracing::Level::WARN {
            remember(*metadata.level(), &text);
        }
        let record = Record {
            time: SystemTime::now(),
            level: *metadata.level(),
            target: metadata.target(),
            thread: thread_name(),
            text,
        };
        self.console.write(&record);
        if let Some(files) = &self.files {
            match files.sender.try_send(Message::Line(record)) {
                Ok(()) => {}
                Err(TrySendError::Full(_)) => {
                    files.dropped.fetch_add(1, Ordering::Relaxed);
                }
                // The writer has stopped (shutdown): the console has the line.
                Err(TrySendError::Disconnected(_)) => {}
            }
        }
    }
}

/// A recent warning or error, for the console's events pane.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecentEvent {
    /// Unix time in milliseconds.
    pub at_ms: u64,
    pub level: tracing::Level,
    pub text: String,
}

static RECENT: std::sync::Mutex<std::collections::VecDeque<RecentEvent>> =
    std::sync::Mutex::new(std::collections::VecDeque::new());

fn remember(level: tracing::Level, text: &str) {
    let mut cut = text.len().min(RECENT_EVENT_TEXT_MAX);
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    let at_ms = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_millis() as u64);
    let event = RecentEvent {
        at_ms,
        level,
        text: text[..cut].to_string(),
    };
    let mut recent = RECENT
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if recent.len() == RECENT_EVENTS_MAX {
        recent.pop_front();
    }
    recent.push_back(event);
}

/// The last warnings and errors, oldest first.
pub fn recent_events() -> Vec<RecentEvent> {
    RECENT
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .iter()
        .cloned()
        .collect()
}
