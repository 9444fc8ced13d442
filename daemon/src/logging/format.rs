//! One log record and the three ways it is printed: a journal line
//! (`<N>` syslog prefix), a human line for a terminal (colour) or a plain
//! stream, and a file line. This file owns field rendering and escaping; it
//! does no I/O. Invariant: every rendered line is exactly one line and holds
//! no control byte except the final `\n` and, in the terminal form only, the
//! colour sequences this file adds itself — a message or a field carrying an
//! escape sequence or a newline is escaped, so it can neither forge a journal
//! entry nor colour a file.

use std::fmt::Write as _;
use std::time::{SystemTime, UNIX_EPOCH};
use tracing::Level;
use tracing::field::{Field, Visit};

/// One event, captured on the thread that emitted it and rendered later.
#[derive(Debug, Clone)]
pub struct Record {
    pub time: SystemTime,
    pub level: Level,
    pub target: &'static str,
    /// Name of the emitting thread (`shard-0`, `log-writer`), if it has one.
    pub thread: Option<String>,
    /// The message followed by ` key=value` for every event field, then the
    /// fields of the enclosing spans from the root down. Already escaped.
    pub text: String,
}

impl Record {
    /// A record made by the logging module itself (drops, low disk, errors).
    pub fn internal(level: Level, text: String) -> Record {
        Record {
            time: SystemTime::now(),
            level,
            target: "iggyd::logging",
            thread: std::thread::current().name().map(str::to_string),
            text: escape_message(&text),
        }
    }
}

/// How the console (stderr) renders records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConsoleStyle {
    /// stderr is the journal: `<N>` prefix, no timestamp (journald stamps),
    /// no colour.
    Journal,
    /// stderr is a terminal: human line with colour.
    Terminal,
    /// Anything else (a file, a pipe): the file line, no colour.
    Plain,
}

/// Collects an event's or a span's fields. The `message` field goes to
/// `message`; every other field is appended to `fields` as ` key=value`.
pub struct FieldWriter<'a> {
    pub message: &'a mut String,
    pub fields: &'a mut String,
}

impl Visit for FieldWriter<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message.push_str(&escape_message(value));
        } else {
            push_field(self.fields, field.name(), value);
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        let text = format!("{value:?}");
        self.record_str(field, &text);
    }
}

/// Appends ` key=value`: the value bare when it is a plain token, else
/// quoted with Rust string escapes, so `key=value` pairs split unambiguously
/// on spaces and no control byte passes.
pub fn push_field(out: &mut String, name: &str, value: &str) {
    // `log` crate bridge fields duplicate what the record already holds.
    if name.starts_with("log.") {
        return;
    }
    out.push(' ');
    out.push_str(name);
    out.push('=');
    let plain = !value.is_empty()
        && value
            .chars()
            .all(|c| !c.is_whitespace() && !c.is_control() && c != '"' && c != '=');
    if plain {
        out.push_str(value);
    } else {
        let _ = write!(out, "{value:?}");
    }
}

/// The message with newlines and every other control character escaped
/// (`\n`, `\u{1b}`), tabs kept.
pub fn escape_message(text: &str) -> String {
    if !text.chars().any(|c| c.is_control() && c != '\t') {
        return text.to_string();
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\t' => out.push('\t'),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    out
}

/// `<6>message key=value thread=shard-0\n`: what journald reads from a
/// service's stderr with `SyslogLevelPrefix=yes` (the default). journald adds
/// the time, the unit, the PID and the priority as fields of its own.
pub fn journal_line(record: &Record) -> String {
    let mut line = String::with_capacity(record.text.len() + 24);
    let _ = write!(
        line,
        "<{}>{}",
        super::journal::priority(record.level),
        record.text
    );
    if let Some(thread) = &record.thread {
        push_field(&mut line, "thread", thread);
    }
    line.push('\n');
    line
}

/// `2026-11-29T17:08:43.123456Z  INFO shard-0 iggyd::boot: message k=v\n`:
/// the file form, also used on a stderr that is neither a terminal nor the
/// journal.
pub fn plain_line(record: &Record) -> String {
    human_line(record, &Paint::NONE)
}

/// The plain line with the level coloured and the time dimmed, for a
/// terminal.
pub fn terminal_line(record: &Record) -> String {
    let level = match record.level {
        Level::ERROR => "\x1b[31m",
        Level::WARN => "\x1b[33m",
        Level::INFO => "\x1b[32m",
        Level::DEBUG => "\x1b[34m",
        Level::TRACE => "\x1b[35m",
    };
    human_line(
        record,
        &Paint {
            dim: "\x1b[2m",
            level,
            reset: "\x1b[0m",
        },
    )
}

/// The escape sequences a human line is painted with; all empty for the
/// plain form, so the two forms cannot drift apart.
struct Paint {
    dim: &'static str,
    level: &'static str,
    reset: &'static str,
}

impl Paint {
    const NONE: Paint = Paint {
        dim: "",
        level: "",
        reset: "",
    };
}

fn human_line(record: &Record, paint: &Paint) -> String {
    let Paint { dim, level, reset } = paint;
    let mut line = String::with_capacity(record.text.len() + 80);
    line.push_str(dim);
    push_timestamp(&mut line, record.time);
    let _ = write!(
        line,
        "{reset} {level}{:>5}{reset} {dim}{} {}:{reset} {}",
        record.level.as_str(),
        record.thread.as_deref().unwrap_or("-"),
        record.target,
        record.text
    );
    line.push('\n');
    line
}

pub fn console_line(record: &Record, style: ConsoleStyle) -> String {
    match style {
        ConsoleStyle::Journal => journal_line(record),
        ConsoleStyle::Terminal => terminal_line(record),
        ConsoleStyle::Plain => plain_line(record),
    }
}

/// UTC calendar fields of a time: (year, month, day, hour, minute, second,
/// microsecond). Times before 1970 print as 1970-01-01: a log clock never
/// goes there, and a panic in the logger would be worse than a wrong stamp.
pub fn utc(time: SystemTime) -> (i64, u32, u32, u32, u32, u32, u32) {
    let since = time.duration_since(UNIX_EPOCH).unwrap_or_default();
    let seconds = since.as_secs();
    let days = i64::try_from(seconds / 86_400).unwrap_or(i64::MAX / 2);
    let rest = seconds % 86_400;
    let (year, month, day) = civil_from_days(days);
    (
        year,
        month,
        day,
        (rest / 3600) as u32,
        (rest % 3600 / 60) as u32,
        (rest % 60) as u32,
        since.subsec_micros(),
    )
}

/// `2026-11-29T17:08:43.123456Z`.
pub fn push_timestamp(out: &mut String, time: SystemTime) {
    let (year, month, day, hour, minute, second, micros) = utc(time);
    let _ = write!(
        out,
        "{year:04}-{month:02}-{day:02}T{hour:02}:{minute:02}:{second:02}.{micros:06}Z"
    );
}

/// `20261129T170843Z`, the stamp in rotated file names (sorts as text).
pub fn compact_timestamp(time: SystemTime) -> String {
    let (year, month, day, hour, minute, second, _) = utc(time);
    format!("{year:04}{month:02}{day:02}T{hour:02}{minute:02}{second:02}Z")
}

/// Days since 1970-01-01 → (year, month, day), proleptic Gregorian
/// (Howard Hinnant's `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = (day_of_year - (153 * month_index + 2) / 5 + 1) as u32;
    let month = if month_index < 10 {
        month_index + 3
    } else {
        month_index - 9
    } as u32;
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn record(level: Level, text: &str) -> Record {
        Record {
            time: UNIX_EPOCH + Duration::from_secs(1_700_000_000),
            level,
            target: "iggyd::shard",
            thread: Some("shard-3".to_string()),
            text: text.to_string(),
        }
    }

    /// Proves the calendar conversion on known instants, leap day included.
    #[test]
    fn timestamps_are_utc_calendar_times() {
        let at = |seconds: u64| {
            let mut out = String::new();
            push_timestamp(&mut out, UNIX_EPOCH + Duration::from_secs(seconds));
            out
        };
        assert_eq!(at(0), "1970-01-01T00:00:00.000000Z");
        assert_eq!(at(951_782_400), "2000-02-29T00:00:00.000000Z");
        assert_eq!(at(1_700_000_000), "2023-11-14T22:13:20.000000Z");
        assert_eq!(at(4_102_444_799), "2099-12-31T23:59:59.000000Z");
        assert_eq!(
            compact_timestamp(UNIX_EPOCH + Duration::from_secs(1_700_000_000)),
            "20231114T221320Z"
        );
    }

    /// Proves fields render as `key=value`, quoted only when they would
    /// not split cleanly, and that escapes and newlines cannot get through.
    #[test]
    fn fields_render_as_key_value() {
        let mut out = String::new();
        push_field(&mut out, "shard", "3");
        push_field(&mut out, "stream", "orders");
        push_field(&mut out, "allowed", "[0, 1]");
        push_field(&mut out, "empty", "");
        push_field(&mut out, "evil", "a\nb\x1b[31m");
        push_field(&mut out, "log.target", "ignored");
        assert_eq!(
            out,
            " shard=3 stream=orders allowed=\"[0, 1]\" empty=\"\" evil=\"a\\nb\\u{1b}[31m\""
        );
        assert_eq!(
            escape_message("one\ntwo\x1b[0m\tend"),
            "one\\ntwo\\u{1b}[0m\tend"
        );
    }

    /// Proves the journal form: priority prefix per level, one line, the
    /// thread as a field, no timestamp and no escape byte.
    #[test]
    fn journal_lines_carry_the_priority_prefix_and_no_ansi() {
        let line = journal_line(&record(Level::WARN, "slow fsync shard=3 partition=7"));
        assert_eq!(line, "<4>slow fsync shard=3 partition=7 thread=shard-3\n");
        for (level, prefix) in [
            (Level::ERROR, "<3>"),
            (Level::WARN, "<4>"),
            (Level::INFO, "<6>"),
            (Level::DEBUG, "<7>"),
            (Level::TRACE, "<7>"),
        ] {
            let line = journal_line(&record(level, "x"));
            assert!(line.starts_with(prefix), "{line:?}");
            assert!(!line.as_bytes().contains(&0x1b));
        }
    }

    /// Proves the file form is one plain line and only the terminal form
    /// colours: the same fields, the time and place dimmed, the level red.
    #[test]
    fn only_the_terminal_form_has_colour() {
        let record = record(Level::ERROR, "disk failed shard=3");
        let plain = plain_line(&record);
        assert_eq!(
            plain,
            "2023-11-14T22:13:20.000000Z ERROR shard-3 iggyd::shard: disk failed shard=3\n"
        );
        assert!(!plain.as_bytes().contains(&0x1b));
        assert!(!console_line(&record, ConsoleStyle::Journal).contains('\x1b'));
        assert!(!console_line(&record, ConsoleStyle::Plain).contains('\x1b'));
        assert_eq!(
            console_line(&record, ConsoleStyle::Terminal),
            "\x1b[2m2023-11-14T22:13:20.000000Z\x1b[0m \x1b[31mERROR\x1b[0m \
             \x1b[2mshard-3 iggyd::shard:\x1b[0m disk failed shard=3\n"
        );
    }
}
