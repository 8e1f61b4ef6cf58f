//! `bench ws`'s load generator: WebSocket echo round trips, and idle connections held open.
//!
//! Two modes, each printing JSON on stdout (one object a line) and nothing else there:
//!
//! `ws-load echo --url ws://127.0.0.1:8000/ --connections 10 --duration 5 --size 1024
//! --timeout 2` opens every connection first (at most 64 handshakes at a time); then the clock
//! starts, and each connection sends one text message of `--size` bytes, waits for the echo,
//! checks it is the same text, and repeats until `--duration` seconds have passed (a message
//! sent before the end is still awaited and counted). It prints one line:
//!
//! ```text
//! {"mode": "echo", "connections": 10, "opened": 10, "messages": 81234,
//!  "duration_us": 5000312, "bytes": 83183616,
//!  "errors": {"connect": 0, "read": 0, "write": 0, "status": 0, "timeout": 0},
//!  "latency_us": {"min": 52, "mean": 61.2, "p50": 60, "p90": 66, "p99": 90,
//!                 "p99.9": 210, "max": 1503},
//!  "cpu_seconds": 0.81}
//! ```
//!
//! `messages` are the round trips completed, `bytes` the echoed payload bytes, `duration_us`
//! the time from the start to the last connection's end; the latencies are round trips
//! (send to echo), microseconds, from an HDR histogram (3 significant digits), null when no
//! message came back. Errors, by the kinds `bench` uses for every tool: `connect` (TCP or the
//! handshake failed), `read` (the connection failed or closed while waiting), `write`,
//! `status` (a handshake answered with another status than 101, or an echo that is not the
//! message sent), `timeout` (no echo within `--timeout` seconds). A connection that errs stops.
//!
//! `ws-load idle --url ... --connections 1000 --timeout 10` opens the connections (64
//! handshakes at a time) and prints `{"mode": "idle", "connections": 1000, "opened": 1000,
//! "errors": {...}, "open_us": 812345}`; it then holds them, sending and reading nothing, until
//! a line or the end of input arrives on stdin, closes every one with a close frame (waiting
//! at most `--timeout` seconds for the server's), and prints `{"closed": 1000,
//! "cpu_seconds": 0.35}`.
//!
//! `cpu_seconds` is this process's user + system CPU time over its whole life (getrusage),
//! so a reader can see the generator was not the limit. The runtime is tokio's
//! `current_thread` flavour: one thread, for the one CPU `bench` pins it to.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use futures_util::{stream, SinkExt, StreamExt};
use hdrhistogram::Histogram;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::net::TcpStream;
use tokio::time::timeout;
use tokio_tungstenite::tungstenite::{self, Message};
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

type Socket = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// Handshakes in flight at once: a burst of 1,000 SYNs would overflow a small listen backlog.
const HANDSHAKES_AT_ONCE: usize = 64;
/// The error kinds, in the order `bench` reports them.
const ERROR_KINDS: [&str; 5] = ["connect", "read", "write", "status", "timeout"];

struct Args {
    mode: String,
    url: String,
    connections: usize,
    duration: f64,
    size: usize,
    timeout: f64,
}

fn usage(problem: &str) -> ! {
    eprintln!("error: {problem}");
    eprintln!("usage: ws-load echo|idle --url ws://HOST:PORT/PATH [--connections N] \
               [--duration SECONDS] [--size BYTES] [--timeout SECONDS]");
    std::process::exit(2);
}

fn parse_args() -> Args {
    let mut raw = std::env::args().skip(1);
    let mode = raw.next().unwrap_or_default();
    if mode != "echo" && mode != "idle" {
        usage(&format!("the first argument is the mode, echo or idle, not {mode:?}"));
    }
    let mut args = Args { mode, url: String::new(), connections: 10, duration: 5.0,
                          size: 1024, timeout: 2.0 };
    while let Some(flag) = raw.next() {
        let value = raw.next().unwrap_or_else(|| usage(&format!("{flag} needs a value")));
        let number = |v: &str| -> f64 {
            v.parse::<f64>().ok().filter(|n| *n > 0.0)
                .unwrap_or_else(|| usage(&format!("{flag} takes a positive number, not {v}")))
        };
        match flag.as_str() {
            "--url" => args.url = value,
            "--connections" => args.connections = number(&value) as usize,
            "--duration" => args.duration = number(&value),
            "--size" => args.size = number(&value) as usize,
            "--timeout" => args.timeout = number(&value),
            _ => usage(&format!("unknown flag {flag}")),
        }
    }
    if !args.url.starts_with("ws://") {
        usage("--url must be a ws:// URL");
    }
    args
}

/// User + system CPU seconds this process has used so far.
fn cpu_seconds() -> f64 {
    // SAFETY: getrusage only writes the struct it is given.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    seconds(usage.ru_utime) + seconds(usage.ru_stime)
}

#[derive(Default)]
struct Errors(BTreeMap<&'static str, u64>);

impl Errors {
    fn add(&mut self, kind: &'static str) {
        *self.0.entry(kind).or_default() += 1;
    }
    fn merge(&mut self, other: &Errors) {
        for (kind, n) in &other.0 {
            *self.0.entry(kind).or_default() += n;
        }
    }
    fn json(&self) -> String {
        let parts: Vec<String> = ERROR_KINDS.iter()
            .map(|k| format!("\"{k}\": {}", self.0.get(k).copied().unwrap_or(0))).collect();
        format!("{{{}}}", parts.join(", "))
    }
}

/// One WebSocket handshake, with Nagle off (every message is one small write).
async fn connect(url: &str, limit: Duration) -> Result<Socket, &'static str> {
    match timeout(limit, tokio_tungstenite::connect_async_with_config(url, None, true)).await {
        Err(_) => Err("timeout"),
        Ok(Err(tungstenite::Error::Http(_))) => Err("status"),
        Ok(Err(_)) => Err("connect"),
        Ok(Ok((socket, _response))) => Ok(socket),
    }
}

/// Open `n` connections, at most [`HANDSHAKES_AT_ONCE`] at a time; the failures as errors.
async fn open_all(url: &str, n: usize, limit: Duration) -> (Vec<Socket>, Errors) {
    let results: Vec<_> = stream::iter(0..n).map(|_| connect(url, limit))
        .buffer_unordered(HANDSHAKES_AT_ONCE).collect().await;
    let mut errors = Errors::default();
    let mut sockets = Vec::with_capacity(n);
    for result in results {
        match result {
            Ok(socket) => sockets.push(socket),
            Err(kind) => errors.add(kind),
        }
    }
    (sockets, errors)
}

/// Close `socket` with a close frame and read until the server's close (or `limit`).
async fn close(mut socket: Socket, limit: Duration) -> bool {
    let done = async {
        socket.close(None).await.ok()?;
        while let Some(Ok(_)) = socket.next().await {}
        Some(())
    };
    timeout(limit, done).await.ok().flatten().is_some()
}

struct Tally {
    messages: u64,
    bytes: u64,
    errors: Errors,
    latency: Histogram<u64>,
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000, 3).expect("valid histogram bounds")
}

/// One connection's loop: send, await the same text back, record the round trip, repeat.
async fn echo_loop(mut socket: Socket, payload: String, end: Instant, limit: Duration)
                   -> (Tally, Socket) {
    let mut tally = Tally { messages: 0, bytes: 0, errors: Errors::default(),
                            latency: histogram() };
    let message = Message::text(payload.clone());
    'run: while Instant::now() < end {
        let sent = Instant::now();
        match timeout(limit, socket.send(message.clone())).await {
            Err(_) => { tally.errors.add("timeout"); break; }
            Ok(Err(_)) => { tally.errors.add("write"); break; }
            Ok(Ok(())) => {}
        }
        loop {
            match timeout(limit.saturating_sub(sent.elapsed()), socket.next()).await {
                Err(_) => { tally.errors.add("timeout"); break 'run; }
                Ok(None) | Ok(Some(Err(_))) | Ok(Some(Ok(Message::Close(_)))) => {
                    tally.errors.add("read");
                    break 'run;
                }
                Ok(Some(Ok(Message::Text(text)))) if text.as_str() == payload => break,
                Ok(Some(Ok(Message::Text(_) | Message::Binary(_)))) => {
                    tally.errors.add("status");
                    break 'run;
                }
                Ok(Some(Ok(_))) => continue, // a ping (answered by tungstenite) or a pong
            }
        }
        let micros = sent.elapsed().as_micros() as u64;
        tally.latency.saturating_record(micros.max(1));
        tally.messages += 1;
        tally.bytes += payload.len() as u64;
    }
    (tally, socket)
}

fn latency_json(h: &Histogram<u64>) -> String {
    if h.is_empty() {
        return "{\"min\": null, \"mean\": null, \"p50\": null, \"p90\": null, \"p99\": null, \
                \"p99.9\": null, \"max\": null}".into();
    }
    format!("{{\"min\": {}, \"mean\": {:.1}, \"p50\": {}, \"p90\": {}, \"p99\": {}, \
             \"p99.9\": {}, \"max\": {}}}", h.min(), h.mean(), h.value_at_quantile(0.5),
            h.value_at_quantile(0.9), h.value_at_quantile(0.99), h.value_at_quantile(0.999),
            h.max())
}

async fn echo(args: &Args) {
    let limit = Duration::from_secs_f64(args.timeout);
    let (sockets, mut errors) = open_all(&args.url, args.connections, limit).await;
    let opened = sockets.len();
    let payload = "x".repeat(args.size);
    let start = Instant::now();
    let end = start + Duration::from_secs_f64(args.duration);
    let tasks: Vec<_> = sockets.into_iter()
        .map(|s| tokio::spawn(echo_loop(s, payload.clone(), end, limit))).collect();
    let mut total = Tally { messages: 0, bytes: 0, errors: Errors::default(),
                            latency: histogram() };
    let mut finished = Vec::with_capacity(opened);
    for task in tasks {
        let (tally, socket) = task.await.expect("an echo task panicked");
        total.messages += tally.messages;
        total.bytes += tally.bytes;
        total.errors.merge(&tally.errors);
        total.latency.add(&tally.latency).expect("histograms of the same bounds");
        finished.push(socket);
    }
    let duration_us = start.elapsed().as_micros();
    errors.merge(&total.errors);
    stream::iter(finished).for_each_concurrent(None, |s| async move {
        close(s, limit).await;
    }).await;
    println!("{{\"mode\": \"echo\", \"connections\": {}, \"opened\": {opened}, \
              \"messages\": {}, \"duration_us\": {duration_us}, \"bytes\": {}, \
              \"errors\": {}, \"latency_us\": {}, \"cpu_seconds\": {:.6}}}",
             args.connections, total.messages, total.bytes, errors.json(),
             latency_json(&total.latency), cpu_seconds());
}

async fn idle(args: &Args) {
    let limit = Duration::from_secs_f64(args.timeout);
    let start = Instant::now();
    let (sockets, errors) = open_all(&args.url, args.connections, limit).await;
    println!("{{\"mode\": \"idle\", \"connections\": {}, \"opened\": {}, \"errors\": {}, \
              \"open_us\": {}}}", args.connections, sockets.len(), errors.json(),
             start.elapsed().as_micros());
    let mut line = String::new();
    // A line or the end of input: either way, time to close (an error reading means the same).
    let _ = BufReader::new(tokio::io::stdin()).read_line(&mut line).await;
    let closed: Vec<bool> = stream::iter(sockets).map(|s| close(s, limit))
        .buffer_unordered(HANDSHAKES_AT_ONCE).collect().await;
    println!("{{\"closed\": {}, \"cpu_seconds\": {:.6}}}",
             closed.iter().filter(|ok| **ok).count(), cpu_seconds());
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args = parse_args();
    if args.mode == "echo" {
        echo(&args).await;
    } else {
        idle(&args).await;
    }
}
