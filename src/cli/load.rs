//! `delayq schedule QUEUE --from FILE|-`: bulk loading from JSON lines.

use std::fs::File;
use std::io::{BufRead, IsTerminal, Read};
use std::path::Path;

use bytes::Bytes;
use delayq_engine::config::Config;
use delayq_engine::{ScheduleMode, ScheduleRequest, Scheduler, TraceParent, When};
use indicatif::{ProgressBar, ProgressStyle};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

use super::error::{CliError, CliResult};
use super::output::print_json;
use super::{close, producer};

/// Tasks per `schedule_many` call (the store pipelines each batch).
const BATCH: usize = 1000;

/// One line of the input.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Line {
    id: LineId,
    #[serde(default)]
    delay_ms: Option<u64>,
    #[serde(default)]
    due_ms: Option<u64>,
    #[serde(default)]
    payload: Option<String>,
    /// `replace`, `if_absent`, `earlier` or `later`; the command's `--mode` when absent.
    #[serde(default)]
    mode: Option<String>,
    /// A W3C trace context; the command's `--traceparent` when absent (or null). Read as
    /// any JSON value so that a wrong one is refused naming the field and the value.
    #[serde(default)]
    traceparent: Option<serde_json::Value>,
}

/// What applies to the lines that do not say: the command's `--mode` and `--traceparent`.
#[derive(Debug, Clone, Default)]
pub struct LineDefaults {
    /// The mode of lines without `"mode"`.
    pub mode: ScheduleMode,
    /// The trace context of lines without `"traceparent"`.
    pub traceparent: Option<TraceParent>,
}

/// An id may be written as a string or as a whole number.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum LineId {
    Text(String),
    Number(u64),
}

/// The summary printed at the end.
#[derive(Debug, Default, Serialize, PartialEq, Eq)]
struct Summary {
    scheduled: u64,
    replaced: u64,
    duplicates: u64,
    kept: u64,
    failed: u64,
}

/// Loads the tasks of `source` (a file, or `-` for stdin) into `queue`.
/// `defaults` apply to the lines that give no mode or trace context.
pub async fn run(
    queue: &str,
    source: &Path,
    defaults: LineDefaults,
    config: Config,
) -> CliResult<()> {
    let (reader, size): (Box<dyn Read + Send>, Option<u64>) = if source == Path::new("-") {
        (Box::new(std::io::stdin()), None)
    } else {
        let file = File::open(source).map_err(|error| {
            CliError::Usage(format!("cannot read {}: {error}", source.display()))
        })?;
        let size = file.metadata().ok().map(|metadata| metadata.len());
        (Box::new(file), size)
    };
    let bound = line_bound(&config);
    let scheduler = producer(config).await?;
    let lines = read_lines(reader, bound);
    let mut loader = Loader {
        scheduler: &scheduler,
        queue,
        defaults,
        bar: progress_bar(size),
        bound,
        batch: Vec::with_capacity(BATCH),
        summary: Summary::default(),
    };
    let outcome = loader.load(lines).await;
    if let Some(bar) = &loader.bar {
        bar.finish_and_clear();
    }
    let summary = loader.summary;
    close(scheduler).await;
    print_json(&summary)?;
    outcome?;
    if summary.failed > 0 {
        return Err(CliError::Runtime(format!(
            "{} line(s) failed (reported above); the other {} were scheduled",
            summary.failed,
            summary.scheduled + summary.duplicates + summary.kept
        )));
    }
    Ok(())
}

/// What the reader thread sends: a line (with its newline), a line that was too long (its
/// length, never held in memory), or the read error that ended the input.
#[derive(Debug)]
enum RawLine {
    /// A whole line, at most the bound long.
    Line(Vec<u8>),
    /// A line longer than the bound: skipped up to its newline without being kept.
    TooLong {
        /// The bytes read of it (all of it, or up to [`SKIP_LIMIT`]).
        bytes: u64,
        /// The line did not end within [`SKIP_LIMIT`]: the input stops here.
        endless: bool,
    },
}

/// The most bytes of one over-long line that are skipped looking for its end; beyond them
/// the input is not JSON lines (`--from /dev/zero`) and the load stops with an error.
const SKIP_LIMIT: u64 = 64 * 1024 * 1024;

/// The longest line read: the largest payload plus room for the id, the due and the JSON
/// escapes of a line.
fn line_bound(config: &Config) -> usize {
    config.engine.max_payload.saturating_add(64 * 1024)
}

/// Reads `reader` line by line on a thread of its own (stdin and files block), a few
/// batches ahead of the writer. No line longer than `bound` is ever held in memory.
fn read_lines(
    reader: Box<dyn Read + Send>,
    bound: usize,
) -> mpsc::Receiver<std::io::Result<RawLine>> {
    let (sender, receiver) = mpsc::channel(4 * BATCH);
    std::thread::spawn(move || {
        let mut reader = std::io::BufReader::with_capacity(64 * 1024, reader);
        loop {
            let (message, last) = match read_bounded_line(&mut reader, bound) {
                Ok(None) => return,
                Ok(Some(line)) => {
                    let last = matches!(line, RawLine::TooLong { endless: true, .. });
                    (Ok(line), last)
                }
                Err(error) => (Err(error), true),
            };
            // The loader stopped (an error): nothing more to read for.
            if sender.blocking_send(message).is_err() || last {
                return;
            }
        }
    });
    receiver
}

/// The next line of `reader` (`None` at the end of the input), read at most `bound` bytes
/// at a time: a longer line is skipped to its newline (or [`SKIP_LIMIT`]) and reported by
/// its length.
fn read_bounded_line(reader: &mut impl BufRead, bound: usize) -> std::io::Result<Option<RawLine>> {
    let mut line = Vec::new();
    let mut skipped: Option<u64> = None;
    loop {
        let available = match reader.fill_buf() {
            Ok(available) => available,
            Err(error) if error.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(error) => return Err(error),
        };
        if available.is_empty() {
            return Ok(match skipped {
                Some(bytes) => Some(RawLine::TooLong {
                    bytes,
                    endless: false,
                }),
                None if line.is_empty() => None,
                None => Some(RawLine::Line(line)),
            });
        }
        let (taken, ended) = match available.iter().position(|&byte| byte == b'\n') {
            Some(at) => (at + 1, true),
            None => (available.len(), false),
        };
        match skipped.as_mut() {
            Some(bytes) => *bytes += taken as u64,
            None if line.len() + taken > bound => {
                skipped = Some((line.len() + taken) as u64);
                line = Vec::new();
            }
            None => line.extend_from_slice(&available[..taken]),
        }
        reader.consume(taken);
        if ended {
            return Ok(Some(match skipped {
                Some(bytes) => RawLine::TooLong {
                    bytes,
                    endless: false,
                },
                None => RawLine::Line(line),
            }));
        }
        if let Some(bytes) = skipped.filter(|&bytes| bytes >= SKIP_LIMIT) {
            return Ok(Some(RawLine::TooLong {
                bytes,
                endless: true,
            }));
        }
    }
}

/// A progress bar on stderr when it is a terminal: by bytes for a file, a counter for stdin.
fn progress_bar(size: Option<u64>) -> Option<ProgressBar> {
    if !std::io::stderr().is_terminal() {
        return None;
    }
    let bar = match size {
        Some(size) => ProgressBar::new(size).with_style(
            ProgressStyle::with_template("{bar:40} {bytes}/{total_bytes} {msg} ({eta})")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        ),
        None => ProgressBar::new_spinner().with_style(
            ProgressStyle::with_template("{spinner} {msg} {elapsed}")
                .unwrap_or_else(|_| ProgressStyle::default_spinner()),
        ),
    };
    Some(bar)
}

/// One load in progress: the current batch and the counts so far.
struct Loader<'a> {
    scheduler: &'a Scheduler,
    queue: &'a str,
    /// The mode and trace context of lines that give none.
    defaults: LineDefaults,
    bar: Option<ProgressBar>,
    /// The longest line read.
    bound: usize,
    /// The pending requests with their line numbers.
    batch: Vec<(u64, ScheduleRequest)>,
    summary: Summary,
}

impl Loader<'_> {
    /// Reads every line, schedules in batches. An error here (stdin unreadable, Redis gone)
    /// stops the load; what was sent before stays scheduled.
    async fn load(&mut self, mut lines: mpsc::Receiver<std::io::Result<RawLine>>) -> CliResult<()> {
        let mut number = 0u64;
        while let Some(line) = lines.recv().await {
            let line = line.map_err(|error| {
                CliError::Runtime(format!("reading line {}: {error}", number + 1))
            })?;
            number += 1;
            let line = match line {
                RawLine::Line(line) => line,
                RawLine::TooLong { bytes, endless } => {
                    if let Some(bar) = &self.bar {
                        bar.inc(bytes);
                    }
                    if endless {
                        self.flush().await?;
                        return Err(CliError::Runtime(format!(
                            "line {number} has no end after {bytes} bytes: the input is not JSON lines; stopped (the lines before it were loaded)"
                        )));
                    }
                    self.reject(
                        number,
                        &format!(
                            "the line is {bytes} bytes long, more than {} (max_payload + 64 KiB); skipped",
                            self.bound
                        ),
                    );
                    continue;
                }
            };
            if let Some(bar) = &self.bar {
                bar.inc(line.len() as u64);
            }
            match parse_line(&line, &self.defaults) {
                Ok(Some(request)) => self.batch.push((number, request)),
                Ok(None) => {}
                Err(reason) => self.reject(number, &reason),
            }
            if self.batch.len() >= BATCH {
                self.flush().await?;
            }
        }
        self.flush().await
    }

    /// Schedules the current batch and counts the outcomes.
    async fn flush(&mut self) -> CliResult<()> {
        if self.batch.is_empty() {
            return Ok(());
        }
        let (numbers, requests): (Vec<u64>, Vec<ScheduleRequest>) = self.batch.drain(..).unzip();
        let results = self
            .scheduler
            .schedule_many(self.queue, requests)
            .await
            .map_err(|error| {
                CliError::from(error).with_context(&format!(
                    "stopped at line {}",
                    numbers.first().copied().unwrap_or_default()
                ))
            })?;
        for (number, result) in numbers.into_iter().zip(results) {
            match result {
                Ok(scheduled) if scheduled.duplicate => self.summary.duplicates += 1,
                Ok(scheduled) if scheduled.kept => self.summary.kept += 1,
                Ok(scheduled) => {
                    self.summary.scheduled += 1;
                    if scheduled.replaced {
                        self.summary.replaced += 1;
                    }
                }
                Err(error) => self.reject(number, &error.to_string()),
            }
        }
        if let Some(bar) = &self.bar {
            bar.set_message(format!("{} scheduled", self.summary.scheduled));
        }
        Ok(())
    }

    /// Reports a bad line on stderr and counts it.
    fn reject(&mut self, number: u64, reason: &str) {
        self.summary.failed += 1;
        let message = format!("error: line {number}: {reason}");
        match &self.bar {
            Some(bar) => bar.suspend(|| eprintln!("{message}")),
            None => eprintln!("{message}"),
        }
    }
}

/// One input line as a request (with the mode and trace context of `defaults` unless it gives
/// its own); `None` for a blank line.
fn parse_line(raw: &[u8], defaults: &LineDefaults) -> Result<Option<ScheduleRequest>, String> {
    let text = std::str::from_utf8(raw).map_err(|error| format!("not UTF-8: {error}"))?;
    let text = text.trim();
    if text.is_empty() {
        return Ok(None);
    }
    if text.starts_with('[') {
        return Err(
            "a JSON array: --from reads JSON lines, one object per line (convert with `jq -c '.[]'`)"
                .to_owned(),
        );
    }
    let line: Line =
        serde_json::from_str(text).map_err(|error| format!("invalid JSON line: {error}"))?;
    let id = match line.id {
        LineId::Text(id) => id,
        LineId::Number(id) => id.to_string(),
    };
    let when = match (line.delay_ms, line.due_ms) {
        (Some(delay_ms), None) => When::In(std::time::Duration::from_millis(delay_ms)),
        (None, Some(due_ms)) => {
            When::At(delayq_storage::validate_due(due_ms).map_err(|error| error.to_string())?)
        }
        (Some(_), Some(_)) => {
            return Err("give either \"delay_ms\" or \"due_ms\", not both".to_owned())
        }
        (None, None) => return Err("missing \"delay_ms\" or \"due_ms\"".to_owned()),
    };
    let mode = match line.mode.as_deref() {
        Some(text) => text
            .parse::<ScheduleMode>()
            .map_err(|error| format!("mode: {error}"))?,
        None => defaults.mode,
    };
    let traceparent = match line.traceparent {
        None | Some(serde_json::Value::Null) => defaults.traceparent.clone(),
        Some(serde_json::Value::String(text)) => {
            Some(TraceParent::parse(&text).map_err(|error| format!("\"traceparent\": {error}"))?)
        }
        Some(other) => {
            return Err(format!(
                "\"traceparent\": expected a string (00-<32 hex>-<16 hex>-<2 hex>), got {}",
                shorten_json(&other)
            ))
        }
    };
    Ok(Some(ScheduleRequest {
        id,
        when,
        payload: Bytes::from(line.payload.unwrap_or_default()),
        mode,
        traceparent,
    }))
}

/// A JSON value for an error message, at most about 80 characters of it.
fn shorten_json(value: &serde_json::Value) -> String {
    let text = value.to_string();
    match text.char_indices().nth(80) {
        Some((end, _)) => format!("{}...", &text[..end]),
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(text: &str) -> ScheduleRequest {
        parse_line(text.as_bytes(), &LineDefaults::default())
            .expect("a valid line")
            .expect("not blank")
    }

    fn rejected(text: &str) -> String {
        parse_line(text.as_bytes(), &LineDefaults::default()).expect_err("a bad line")
    }

    #[test]
    fn lines_with_delay_or_due_and_optional_payload_parse() {
        let request = parsed(r#"{"id":"a","delay_ms":500}"#);
        assert_eq!(request.id, "a");
        assert_eq!(
            request.when,
            When::In(std::time::Duration::from_millis(500))
        );
        assert!(request.payload.is_empty());
        let request = parsed(r#"{"id":7,"due_ms":1700000000000,"payload":"x"}"#);
        assert_eq!(request.id, "7");
        assert_eq!(request.when, When::At(1_700_000_000_000));
        assert_eq!(&request.payload[..], b"x");
        assert_eq!(
            parse_line(b"  \r\n", &LineDefaults::default()).expect("blank is fine"),
            None
        );
        assert_eq!(request.mode, ScheduleMode::Upsert);
    }

    #[test]
    fn a_line_may_give_its_mode_else_the_default_applies() {
        let line = r#"{"id":"a","delay_ms":5,"mode":"later"}"#;
        assert_eq!(parsed(line).mode, ScheduleMode::Later);
        let line = r#"{"id":"a","delay_ms":5}"#;
        let defaults = LineDefaults {
            mode: ScheduleMode::IfAbsent,
            traceparent: None,
        };
        let request = parse_line(line.as_bytes(), &defaults)
            .expect("valid")
            .expect("not blank");
        assert_eq!(request.mode, ScheduleMode::IfAbsent);
    }

    const TRACE: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    const OTHER_TRACE: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

    #[test]
    fn a_line_may_give_its_traceparent_else_the_default_applies() {
        let defaults = LineDefaults {
            mode: ScheduleMode::Upsert,
            traceparent: Some(TraceParent::parse(TRACE).expect("valid")),
        };
        let parse = |line: &str| {
            parse_line(line.as_bytes(), &defaults)
                .expect("valid")
                .expect("not blank")
                .traceparent
                .map(|trace| trace.to_string())
        };
        let own = format!(r#"{{"id":"a","delay_ms":5,"traceparent":"{OTHER_TRACE}"}}"#);
        assert_eq!(parse(&own).as_deref(), Some(OTHER_TRACE));
        assert_eq!(parse(r#"{"id":"a","delay_ms":5}"#).as_deref(), Some(TRACE));
        let null = r#"{"id":"a","delay_ms":5,"traceparent":null}"#;
        assert_eq!(parse(null).as_deref(), Some(TRACE));
        assert_eq!(parsed(r#"{"id":"a","delay_ms":5}"#).traceparent, None);
    }

    #[test]
    fn a_bad_traceparent_is_refused_naming_the_field_and_the_value() {
        let error = rejected(r#"{"id":"a","delay_ms":5,"traceparent":"00-zz-01"}"#);
        assert!(error.contains("\"traceparent\""), "{error}");
        assert!(error.contains("00-zz-01"), "{error}");
        let error = rejected(r#"{"id":"a","delay_ms":5,"traceparent":42}"#);
        assert!(error.contains("\"traceparent\""), "{error}");
        assert!(error.contains("got 42"), "{error}");
    }

    fn lines_of(input: &[u8], bound: usize) -> Vec<String> {
        let mut reader = std::io::BufReader::with_capacity(16, input);
        let mut seen = Vec::new();
        while let Some(line) = read_bounded_line(&mut reader, bound).expect("reads") {
            seen.push(match line {
                RawLine::Line(line) => String::from_utf8(line).expect("utf-8"),
                RawLine::TooLong { bytes, endless } => format!("too long: {bytes} {endless}"),
            });
        }
        seen
    }

    #[test]
    fn a_line_over_the_bound_is_skipped_and_reported_and_the_rest_is_read() {
        let long = "x".repeat(100);
        let input = format!("short\n{long}\nafter\nlast");
        assert_eq!(
            lines_of(input.as_bytes(), 50),
            ["short\n", "too long: 101 false", "after\n", "last"]
        );
        // Exactly the bound (newline included) is still a line.
        assert_eq!(lines_of(b"abcd\n", 5), ["abcd\n"]);
        assert_eq!(lines_of(b"abcde\n", 5), ["too long: 6 false"]);
    }

    #[test]
    fn an_endless_line_stops_after_the_skip_limit_in_bounded_memory() {
        // /dev/zero: no newline, ever.
        let zeros = std::io::repeat(0);
        let mut reader = std::io::BufReader::with_capacity(64 * 1024, zeros);
        let line = read_bounded_line(&mut reader, 1024).expect("reads");
        match line {
            Some(RawLine::TooLong { bytes, endless }) => {
                assert!(endless);
                assert!(bytes >= SKIP_LIMIT);
                assert!(bytes < SKIP_LIMIT + 64 * 1024);
            }
            other => panic!("expected an endless line, got {other:?}"),
        }
    }

    #[test]
    fn a_json_array_is_told_to_be_json_lines() {
        assert!(rejected(r#"[{"id":"a","delay_ms":1}]"#).contains("JSON lines"));
    }

    #[test]
    fn bad_lines_say_what_is_wrong() {
        assert!(rejected("{oops").contains("invalid JSON"));
        assert!(rejected(r#"{"id":"a"}"#).contains("missing"));
        assert!(rejected(r#"{"id":"a","delay_ms":1,"due_ms":2}"#).contains("not both"));
        assert!(rejected(r#"{"id":"a","delay":1}"#).contains("unknown field"));
        assert!(rejected(r#"{"id":"a","delay_ms":-1}"#).contains("invalid JSON"));
        assert!(rejected(r#"{"id":"a","delay_ms":1,"mode":"sooner"}"#)
            .contains("unknown schedule mode \"sooner\""));
        assert!(parse_line(&[0xff, b'\n'], &LineDefaults::default())
            .expect_err("not UTF-8")
            .contains("UTF-8"));
    }
}
