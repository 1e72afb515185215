//! A container's log, as the container runtime writes it and the kubelet reads it back for
//! `pods/log`.
//!
//! The runtime (containerd's CRI plugin, CRI-O) reads the container's stdout and stderr pipes
//! and writes each line with the time it read it and its stream: `<RFC 3339 nano> <stream> <F|P>
//! <content>` (the CRI log format, parsed by `parseCRILog` in
//! `staging/src/k8s.io/cri-client/pkg/logs/logs.go`). The sim keeps the attempt's log as the
//! plain output it always was (`attempt-<n>.log`: tests and benches read it as is) and puts what
//! the CRI line prefix would hold into an index beside it, `attempt-<n>.log.index`: one record
//! `<RFC 3339 nano> <stdout|stderr> <bytes>` per message, in the order of the messages. A
//! record is written before its bytes, so a reader that reads the log first and the index second
//! never meets bytes without a record.
//!
//! Reading follows `ReadLogs` in the same file: `tailLines` counts messages from the end,
//! `sinceSeconds`/`sinceTime` skip older messages, `timestamps` prefixes a line's first message
//! with its time in `RFC3339NanoFixed`, `limitBytes` cuts the output (prefixes included) at that
//! many bytes, mid-line if need be.

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use k8s_openapi::jiff::Timestamp;
use tokio::io::{AsyncRead, AsyncReadExt};

/// The longest message the runtime writes as one: a longer line is cut into pieces of this size
/// (containerd's `max_container_log_line_size` default, 16 KiB; the kubelet joins them again).
pub const MAX_MESSAGE: usize = 16 * 1024;

/// A container's output stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

impl Stream {
    pub fn as_str(self) -> &'static str {
        match self {
            Stream::Stdout => "stdout",
            Stream::Stderr => "stderr",
        }
    }

    fn parse(s: &str) -> Option<Stream> {
        match s {
            "stdout" => Some(Stream::Stdout),
            "stderr" => Some(Stream::Stderr),
            _ => None,
        }
    }
}

/// One message of the log: what one record of the index covers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message {
    pub time: Timestamp,
    pub stream: Stream,
    pub bytes: Vec<u8>,
}

/// The index beside a log: `attempt-1.log` → `attempt-1.log.index`.
pub fn index_path(log: &Path) -> PathBuf {
    let mut s = log.as_os_str().to_owned();
    s.push(".index");
    PathBuf::from(s)
}

/// A time as the kubelet prints it with `timestamps=true`: RFC 3339 in UTC with exactly nine
/// fractional digits (`RFC3339NanoFixed`, cri-client's `timeFormatOut`).
pub fn fixed(t: Timestamp) -> String {
    format!("{t:.9}")
}

/// One index record. Pure.
pub fn record(time: Timestamp, stream: Stream, len: usize) -> String {
    format!("{} {} {len}\n", fixed(time), stream.as_str())
}

/// Appends messages to a log and its index.
#[derive(Debug)]
pub struct Writer {
    raw: std::fs::File,
    index: std::fs::File,
}

impl Writer {
    /// Opens (creates) the log and its index for appending.
    ///
    /// Errors: the filesystem's.
    pub fn open(log: &Path) -> std::io::Result<Writer> {
        if let Some(dir) = log.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let open = |p: &Path| {
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(p)
        };
        Ok(Writer {
            raw: open(log)?,
            index: open(&index_path(log))?,
        })
    }

    /// One message: its record first, then its bytes (see the module's comment).
    ///
    /// Errors: the filesystem's.
    pub fn write(&mut self, time: Timestamp, stream: Stream, bytes: &[u8]) -> std::io::Result<()> {
        if bytes.is_empty() {
            return Ok(());
        }
        self.index
            .write_all(record(time, stream, bytes.len()).as_bytes())?;
        self.raw.write_all(bytes)
    }
}

/// Appends a line the sim writes itself (an injected fault, a command it cannot run), as
/// `stderr`; failures are ignored, as a message about a message would be.
pub fn append_line(log: &Path, line: &str) {
    if let Ok(mut w) = Writer::open(log) {
        let _ = w.write(
            Timestamp::now(),
            Stream::Stderr,
            format!("{line}\n").as_bytes(),
        );
    }
}

/// Takes the messages `buf` holds: every complete line, pieces of [`MAX_MESSAGE`] of a longer
/// one, and at `eof` whatever is left. Pure (but for `buf`).
pub fn take_messages(buf: &mut Vec<u8>, eof: bool) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut start = 0;
    loop {
        let rest = &buf[start..];
        let cut = match rest.iter().position(|b| *b == b'\n') {
            Some(i) if i < MAX_MESSAGE => i + 1,
            _ if rest.len() >= MAX_MESSAGE => MAX_MESSAGE,
            _ => break,
        };
        out.push(rest[..cut].to_vec());
        start += cut;
    }
    if eof && start < buf.len() {
        out.push(buf[start..].to_vec());
        start = buf.len();
    }
    buf.drain(..start);
    out
}

async fn read_some<R: AsyncRead + Unpin>(
    r: &mut Option<R>,
    buf: &mut [u8],
) -> std::io::Result<usize> {
    match r {
        Some(r) => r.read(buf).await,
        None => std::future::pending().await,
    }
}

/// The runtime's side of a container's pipes: reads both until each ends and writes every
/// message with the time it was read. Write errors end the copy (the container then gets
/// `EPIPE`, as with a runtime that lost its log).
pub async fn pump<O, E>(stdout: Option<O>, stderr: Option<E>, mut w: Writer)
where
    O: AsyncRead + Unpin,
    E: AsyncRead + Unpin,
{
    let (mut out, mut err) = (stdout, stderr);
    let (mut out_buf, mut err_buf) = (Vec::new(), Vec::new());
    let (mut a, mut b) = (vec![0u8; 8192], vec![0u8; 8192]);
    loop {
        let (stream, read) = tokio::select! {
            r = read_some(&mut out, &mut a), if out.is_some() => (Stream::Stdout, r),
            r = read_some(&mut err, &mut b), if err.is_some() => (Stream::Stderr, r),
            else => break,
        };
        let (buf, chunk) = match stream {
            Stream::Stdout => (&mut out_buf, &a),
            Stream::Stderr => (&mut err_buf, &b),
        };
        let eof = match read {
            Ok(0) | Err(_) => true,
            Ok(n) => {
                buf.extend_from_slice(&chunk[..n]);
                false
            }
        };
        let now = Timestamp::now();
        for m in take_messages(buf, eof) {
            if w.write(now, stream, &m).is_err() {
                return;
            }
        }
        if eof {
            match stream {
                Stream::Stdout => out = None,
                Stream::Stderr => err = None,
            }
        }
    }
}

/// How far a reader got: byte offsets into the log and its index.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cursor {
    pub raw: u64,
    pub index: u64,
}

/// The messages of `raw` as `index` describes them, from the start of both; with the bytes of
/// each used. A record whose bytes are not all there yet waits, unless `ended` (the container
/// is gone and nothing more will come). Without an index (`None`: a log written before the sim
/// kept one) every line is a `stdout` message of time `fallback`; so are bytes past the last
/// record once `ended`. Pure.
pub fn parse(
    raw: &[u8],
    index: Option<&str>,
    ended: bool,
    fallback: Timestamp,
) -> (Vec<Message>, usize, usize) {
    let mut out = Vec::new();
    let (mut used_raw, mut used_index) = (0usize, 0usize);
    if let Some(index) = index {
        for line in index.split_inclusive('\n') {
            if !line.ends_with('\n') {
                break;
            }
            let mut parts = line.trim_end().splitn(3, ' ');
            let parsed = (|| {
                let time: Timestamp = parts.next()?.parse().ok()?;
                let stream = Stream::parse(parts.next()?)?;
                let len: usize = parts.next()?.parse().ok()?;
                Some((time, stream, len))
            })();
            let Some((time, stream, len)) = parsed else {
                // A record the sim did not write: skip it rather than misread the rest.
                used_index += line.len();
                continue;
            };
            let rest = &raw[used_raw..];
            if rest.len() < len && !ended {
                break;
            }
            let take = len.min(rest.len());
            out.push(Message {
                time,
                stream,
                bytes: rest[..take].to_vec(),
            });
            used_raw += take;
            used_index += line.len();
        }
    }
    if index.is_none() || ended {
        let rest = &raw[used_raw..];
        for line in rest.split_inclusive(|b| *b == b'\n') {
            if !line.ends_with(b"\n") && !ended {
                break;
            }
            out.push(Message {
                time: fallback,
                stream: Stream::Stdout,
                bytes: line.to_vec(),
            });
            used_raw += line.len();
        }
    }
    (out, used_raw, used_index)
}

fn read_from(path: &Path, at: u64) -> std::io::Result<Option<Vec<u8>>> {
    let mut f = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    f.seek(SeekFrom::Start(at))?;
    let mut buf = Vec::new();
    f.read_to_end(&mut buf)?;
    Ok(Some(buf))
}

/// The messages of `log` past `cursor`, which moves past them (see [`parse`]).
///
/// Errors: the log cannot be read (missing, for one).
pub fn read_new(log: &Path, cursor: &mut Cursor, ended: bool) -> std::io::Result<Vec<Message>> {
    // The log before the index: every byte read then has its record (written first).
    let raw = read_from(log, cursor.raw)?.ok_or_else(|| {
        std::io::Error::new(std::io::ErrorKind::NotFound, "no such file or directory")
    })?;
    let index = read_from(&index_path(log), cursor.index)?;
    let index = index.map(|b| String::from_utf8_lossy(&b).into_owned());
    let fallback = std::fs::metadata(log)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| Timestamp::try_from(t).ok())
        .unwrap_or_else(Timestamp::now);
    let (messages, used_raw, used_index) = parse(&raw, index.as_deref(), ended, fallback);
    cursor.raw += used_raw as u64;
    cursor.index += used_index as u64;
    Ok(messages)
}

/// What a `pods/log` request asks of the log (`PodLogOptions`, as `NewLogOptions` reads it).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Options {
    pub tail: Option<usize>,
    pub limit_bytes: Option<u64>,
    pub since: Option<Timestamp>,
    pub timestamps: bool,
    pub follow: bool,
    /// `None`: both streams (`stream=All` or no `stream`).
    pub stream: Option<Stream>,
}

/// The last `n` messages (`tailLines` counts the log's lines, which are messages). Pure.
pub fn tail(mut messages: Vec<Message>, n: Option<usize>) -> Vec<Message> {
    if let Some(n) = n {
        let cut = messages.len().saturating_sub(n);
        messages.drain(..cut);
    }
    messages
}

/// The writer's state across a response: the bytes left of `limitBytes`, whether the next
/// message starts a line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Render {
    remain: Option<u64>,
    new_line: bool,
}

impl Render {
    pub fn new(opts: &Options) -> Render {
        Render {
            remain: opts.limit_bytes,
            new_line: true,
        }
    }

    /// Whether `limitBytes` is used up: the response ends.
    pub fn done(&self) -> bool {
        self.remain == Some(0)
    }

    /// The output for `messages`, as `logWriter.write` makes it: older than `since` skipped,
    /// a timestamp before the first message of a line, the other stream left out, cut at
    /// `limitBytes`.
    pub fn render(&mut self, messages: &[Message], opts: &Options) -> Vec<u8> {
        let mut out = Vec::new();
        for m in messages {
            if self.done() {
                break;
            }
            let skip = opts.since.is_some_and(|s| m.time < s)
                || opts.stream.is_some_and(|s| s != m.stream);
            if !skip {
                let mut line = Vec::with_capacity(m.bytes.len() + 32);
                if opts.timestamps && self.new_line {
                    line.extend_from_slice(fixed(m.time).as_bytes());
                    line.push(b' ');
                }
                line.extend_from_slice(&m.bytes);
                if let Some(remain) = self.remain.as_mut() {
                    let n = line
                        .len()
                        .min(usize::try_from(*remain).unwrap_or(usize::MAX));
                    line.truncate(n);
                    *remain -= n as u64;
                }
                out.extend_from_slice(&line);
            }
            // As upstream: a skipped message still says whether the next one starts a line.
            self.new_line = m.bytes.last().is_none_or(|b| *b == b'\n');
        }
        out
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn t(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn msg(time: &str, stream: Stream, bytes: &str) -> Message {
        Message {
            time: t(time),
            stream,
            bytes: bytes.as_bytes().to_vec(),
        }
    }

    #[test]
    fn timestamps_have_nine_fractional_digits_in_utc() {
        assert_eq!(
            fixed(t("2026-01-02T03:04:05.5Z")),
            "2026-01-02T03:04:05.500000000Z"
        );
        assert_eq!(
            fixed(t("2026-01-02T03:04:05Z")),
            "2026-01-02T03:04:05.000000000Z"
        );
        assert_eq!(
            record(t("2026-01-02T03:04:05.123456789Z"), Stream::Stderr, 7),
            "2026-01-02T03:04:05.123456789Z stderr 7\n"
        );
    }

    #[test]
    fn messages_are_lines_and_pieces_of_long_ones() {
        let mut buf = b"one\ntwo\nthr".to_vec();
        assert_eq!(
            take_messages(&mut buf, false),
            vec![b"one\n".to_vec(), b"two\n".to_vec()]
        );
        assert_eq!(buf, b"thr");
        assert_eq!(take_messages(&mut buf, true), vec![b"thr".to_vec()]);
        assert!(buf.is_empty());
        let mut long = vec![b'x'; MAX_MESSAGE + 10];
        long.push(b'\n');
        let got = take_messages(&mut long, false);
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].len(), MAX_MESSAGE);
        assert_eq!(got[1].len(), 11);
    }

    #[test]
    fn the_index_cuts_the_log_into_its_messages() {
        let raw = b"out 1\nerr 1\npartial";
        let index = "2026-01-01T00:00:01.000000000Z stdout 6\n\
                     2026-01-01T00:00:02.000000000Z stderr 6\n\
                     2026-01-01T00:00:03.000000000Z stdout 9\n";
        let fallback = t("2026-01-01T00:00:09Z");
        let (m, raw_used, index_used) = parse(raw, Some(index), false, fallback);
        assert_eq!(
            m,
            vec![
                msg("2026-01-01T00:00:01Z", Stream::Stdout, "out 1\n"),
                msg("2026-01-01T00:00:02Z", Stream::Stderr, "err 1\n"),
            ],
            "the third record's bytes are not all written yet"
        );
        assert_eq!((raw_used, index_used), (12, 80));
        let (m, raw_used, _) = parse(raw, Some(index), true, fallback);
        assert_eq!(m.len(), 3);
        assert_eq!(m[2].bytes, b"partial");
        assert_eq!(raw_used, raw.len());
        // A record not yet complete in the index waits too.
        let (m, _, _) = parse(
            raw,
            Some("2026-01-01T00:00:01.000000000Z std"),
            false,
            fallback,
        );
        assert!(m.is_empty());
    }

    #[test]
    fn a_log_without_an_index_is_read_line_by_line() {
        let fallback = t("2026-01-01T00:00:09Z");
        let (m, used, _) = parse(b"a\nb\nc", None, false, fallback);
        assert_eq!(m.len(), 2);
        assert_eq!(used, 4);
        assert!(
            m.iter()
                .all(|m| m.time == fallback && m.stream == Stream::Stdout)
        );
        let (m, _, _) = parse(b"a\nb\nc", None, true, fallback);
        assert_eq!(m.last().unwrap().bytes, b"c");
    }

    fn log() -> Vec<Message> {
        vec![
            msg("2026-01-01T00:00:01Z", Stream::Stdout, "line 1\n"),
            msg("2026-01-01T00:00:02Z", Stream::Stderr, "line 2\n"),
            msg("2026-01-01T00:00:03Z", Stream::Stdout, "line "),
            msg("2026-01-01T00:00:04Z", Stream::Stdout, "3\n"),
        ]
    }

    fn render(messages: Vec<Message>, opts: &Options) -> String {
        String::from_utf8(Render::new(opts).render(&messages, opts)).unwrap()
    }

    #[test]
    fn renders_as_the_kubelet_writes() {
        let all = Options::default();
        assert_eq!(render(log(), &all), "line 1\nline 2\nline 3\n");
        assert_eq!(render(tail(log(), Some(2)), &all), "line 3\n");
        assert_eq!(render(tail(log(), Some(0)), &all), "");
        assert_eq!(
            render(tail(log(), Some(9)), &all),
            "line 1\nline 2\nline 3\n"
        );
        let ts = Options {
            timestamps: true,
            ..Options::default()
        };
        assert_eq!(
            render(log(), &ts),
            "2026-01-01T00:00:01.000000000Z line 1\n\
             2026-01-01T00:00:02.000000000Z line 2\n\
             2026-01-01T00:00:03.000000000Z line 3\n",
            "one timestamp per line, the first piece's"
        );
        let since = Options {
            since: Some(t("2026-01-01T00:00:02Z")),
            ..Options::default()
        };
        assert_eq!(render(log(), &since), "line 2\nline 3\n");
        let stderr = Options {
            stream: Some(Stream::Stderr),
            ..Options::default()
        };
        assert_eq!(render(log(), &stderr), "line 2\n");
    }

    #[test]
    fn limit_bytes_cuts_mid_line_and_ends_the_response() {
        let opts = Options {
            limit_bytes: Some(10),
            ..Options::default()
        };
        let mut r = Render::new(&opts);
        assert_eq!(r.render(&log(), &opts), b"line 1\nlin");
        assert!(r.done());
        assert_eq!(r.render(&log(), &opts), b"");
        let opts = Options {
            limit_bytes: Some(35),
            timestamps: true,
            ..Options::default()
        };
        assert_eq!(
            render(log(), &opts),
            "2026-01-01T00:00:01.000000000Z line",
            "the prefix counts"
        );
    }

    #[test]
    fn written_messages_read_back_with_their_times_and_streams() {
        let dir = std::env::temp_dir().join(format!("ferry-sim-logs-{}", std::process::id()));
        let log = dir.join("_jobs/ns/j/attempt-1.log");
        let mut w = Writer::open(&log).unwrap();
        let t1 = t("2026-01-01T00:00:01.25Z");
        w.write(t1, Stream::Stdout, b"hello\n").unwrap();
        append_line(&log, "from the sim");
        let mut c = Cursor::default();
        let m = read_new(&log, &mut c, false).unwrap();
        assert_eq!(m.len(), 2);
        assert_eq!((m[0].time, m[0].stream), (t1, Stream::Stdout));
        assert_eq!(
            (m[1].stream, m[1].bytes.as_slice()),
            (Stream::Stderr, &b"from the sim\n"[..])
        );
        assert_eq!(
            std::fs::read_to_string(&log).unwrap(),
            "hello\nfrom the sim\n"
        );
        assert!(read_new(&log, &mut c, false).unwrap().is_empty());
        w.write(t1, Stream::Stdout, b"more\n").unwrap();
        assert_eq!(read_new(&log, &mut c, true).unwrap()[0].bytes, b"more\n");
        assert!(read_new(&dir.join("missing.log"), &mut Cursor::default(), true).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[tokio::test]
    async fn the_pump_keeps_each_streams_lines_whole() {
        let dir = std::env::temp_dir().join(format!("ferry-sim-pump-{}", std::process::id()));
        let log = dir.join("attempt-1.log");
        let mut child = tokio::process::Command::new("sh")
            .args(["-c", "printf 'a\\n'; printf 'b\\n' >&2; printf 'c'"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let (o, e) = (child.stdout.take(), child.stderr.take());
        pump(o, e, Writer::open(&log).unwrap()).await;
        child.wait().await.unwrap();
        let m = read_new(&log, &mut Cursor::default(), true).unwrap();
        let mut got: Vec<(Stream, String)> = m
            .iter()
            .map(|m| (m.stream, String::from_utf8(m.bytes.clone()).unwrap()))
            .collect();
        got.sort_by_key(|(s, b)| (s.as_str(), b.clone()));
        assert_eq!(
            got,
            vec![
                (Stream::Stderr, "b\n".to_string()),
                (Stream::Stdout, "a\n".to_string()),
                (Stream::Stdout, "c".to_string()),
            ]
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
