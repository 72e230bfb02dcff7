//! Asking NCCL's RAS for the job's status, once. Every NCCL process of
//! 2.24 or later runs a RAS thread that listens on `NCCL_RAS_ADDR`
//! (default `localhost:28028`) and speaks a plain-text protocol (NCCL user
//! guide, "Troubleshooting > RAS"; NCCL's `src/ras/client.cc`): the client
//! sends `CLIENT PROTOCOL 2` and gets `SERVER PROTOCOL <n>`, may send
//! `TIMEOUT <secs>` (answered `OK`), then `STATUS` or `VERBOSE STATUS`; RAS
//! gathers the status from every process of the job, writes it, and closes
//! the connection.
//!
//! One connection, one request, no retry: polling RAS has crashed jobs on
//! NCCL 2.26 and 2.27 (NVIDIA/nccl#1718, #1762), so a gpucheck run asks at
//! most once. The connection is bounded in time (2 s to connect, 5 s in
//! all) and the answer in size (4 MiB); the caller gates on the job's NCCL
//! version (`domain::ras::ras_supported`). `domain::ras` reads the text.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How long connecting may take, all addresses together: RAS listens on
/// the node itself, so a connection that is not made at once is not made.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// How long the whole ask may take, from resolving the address to the
/// last byte.
pub const ASK_TIMEOUT: Duration = Duration::from_secs(5);
/// The most read of an answer: the verbose status of a job of thousands of
/// GPUs, every rank listed, is well under this.
pub const MAX_ANSWER_BYTES: usize = 4 * 1024 * 1024;
/// The client protocol gpucheck speaks (NCCL 2.24 to 2.30 all speak 2:
/// `NCCL_RAS_CLIENT_PROTOCOL` in NCCL's `src/ras/ras_internal.h`).
const CLIENT_PROTOCOL: u32 = 2;
/// How long RAS itself may wait for the job's other processes before it
/// answers with what it has (its `TIMEOUT` command; NCCL's default is 5 s
/// per leg plus 5 s, longer than [`ASK_TIMEOUT`]). A process that does not
/// answer within this is reported by RAS as missing, which is the point.
const RAS_GATHER_SECS: u32 = 2;

/// NCCL's RAS status text from the RAS client socket at `addr`
/// (`host:port`, see `domain::ras::client_addr`), asking once:
/// `VERBOSE STATUS`, which names every rank of a lagging or missing group.
/// `Err` says, in a user's words, why there is no answer.
pub fn ask(addr: &str) -> Result<String, String> {
    crate::seam::answer("nccl_ras::ask", addr, || ask_live(addr))
}

fn ask_live(addr: &str) -> Result<String, String> {
    let started = Instant::now();
    let deadline = started + ASK_TIMEOUT;
    let addrs = resolve(addr, started + CONNECT_TIMEOUT)?;
    let mut stream = connect(addr, &addrs, started + CONNECT_TIMEOUT)?;
    let result = converse(&mut stream, addr, deadline);
    let _ = stream.shutdown(std::net::Shutdown::Both);
    result
}

/// The addresses of `addr`, resolved on a thread so that a slow resolver
/// cannot hold the ask past `by`.
fn resolve(addr: &str, by: Instant) -> Result<Vec<SocketAddr>, String> {
    if let Ok(direct) = addr.parse::<SocketAddr>() {
        return Ok(vec![direct]);
    }
    let (tx, rx) = mpsc::channel();
    let name = addr.to_string();
    std::thread::spawn(move || {
        let _ = tx.send(name.to_socket_addrs().map(Iterator::collect::<Vec<_>>));
    });
    match rx.recv_timeout(by.saturating_duration_since(Instant::now())) {
        Ok(Ok(addrs)) if !addrs.is_empty() => Ok(addrs),
        Ok(Ok(_)) => Err(format!("NCCL's RAS address {addr} resolves to nothing")),
        Ok(Err(e)) => Err(format!(
            "NCCL's RAS address {addr} is not a host:port this node resolves ({e})"
        )),
        Err(_) => Err(format!(
            "resolving NCCL's RAS address {addr} took over {} s",
            CONNECT_TIMEOUT.as_secs()
        )),
    }
}

/// The first address that takes the connection (`localhost` is `::1` and
/// `127.0.0.1`; NCCL listens on the first its resolver gives).
fn connect(addr: &str, addrs: &[SocketAddr], by: Instant) -> Result<TcpStream, String> {
    let mut why = Vec::new();
    for a in addrs {
        let left = by.saturating_duration_since(Instant::now());
        if left.is_zero() {
            why.push(format!("{a}: no time left"));
            break;
        }
        match TcpStream::connect_timeout(a, left) {
            Ok(stream) => return Ok(stream),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                why.push(format!("{a}: connection refused"))
            }
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => why.push(format!(
                "{a}: no answer within {} s",
                CONNECT_TIMEOUT.as_secs()
            )),
            Err(e) => why.push(format!("{a}: {e}")),
        }
    }
    Err(format!(
        "nothing answers at NCCL's RAS address {addr} ({}): the job runs no NCCL 2.24 or later \
         here, set NCCL_RAS_ENABLE=0, listens elsewhere (NCCL_RAS_ADDR), or has not \
         initialised NCCL yet",
        why.join("; ")
    ))
}

/// The handshake, the request, and the answer up to the server's close.
fn converse(stream: &mut TcpStream, addr: &str, deadline: Instant) -> Result<String, String> {
    let _ = stream.set_nodelay(true);
    let mut reader = BufReader::new(stream.try_clone().map_err(|e| e.to_string())?);

    send(
        stream,
        &format!("CLIENT PROTOCOL {CLIENT_PROTOCOL}\n"),
        deadline,
    )?;
    let hello = read_line(&mut reader, deadline, addr)?;
    if !hello.to_ascii_uppercase().starts_with("SERVER PROTOCOL ") {
        return Err(format!(
            "what listens at {addr} is not NCCL's RAS: it answered the handshake with {:?}",
            crate::domain::text::cut(hello.trim(), 80)
        ));
    }
    send(stream, &format!("TIMEOUT {RAS_GATHER_SECS}\n"), deadline)?;
    // "OK", or "ERROR: ..." from a RAS that does not take it: either way
    // the status follows.
    read_line(&mut reader, deadline, addr)?;
    send(stream, "VERBOSE STATUS\n", deadline)?;

    let mut answer = Vec::new();
    let mut chunk = [0u8; 64 * 1024];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(unfinished(addr, answer.len()));
        }
        reader
            .get_ref()
            .set_read_timeout(Some(left))
            .map_err(|e| e.to_string())?;
        match reader.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => {
                answer.extend_from_slice(&chunk[..n]);
                if answer.len() > MAX_ANSWER_BYTES {
                    return Err(format!(
                        "NCCL's RAS at {addr} answered over {} MiB; not read",
                        MAX_ANSWER_BYTES / (1024 * 1024)
                    ));
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) if timed_out(&e) => return Err(unfinished(addr, answer.len())),
            Err(e) => return Err(format!("reading NCCL's RAS answer at {addr}: {e}")),
        }
    }
    Ok(String::from_utf8_lossy(&answer).into_owned())
}

fn send(stream: &mut TcpStream, line: &str, deadline: Instant) -> Result<(), String> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Err("no time left to ask NCCL's RAS".to_string());
    }
    stream
        .set_write_timeout(Some(left))
        .map_err(|e| e.to_string())?;
    stream
        .write_all(line.as_bytes())
        .map_err(|e| format!("NCCL's RAS did not take {:?}: {e}", line.trim()))
}

/// One line of the handshake, bounded like the rest (a line longer than
/// 4 KiB is not NCCL's).
fn read_line(
    reader: &mut BufReader<TcpStream>,
    deadline: Instant,
    addr: &str,
) -> Result<String, String> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Err(silent(addr));
    }
    reader
        .get_ref()
        .set_read_timeout(Some(left))
        .map_err(|e| e.to_string())?;
    let mut line = Vec::new();
    match reader.by_ref().take(4096).read_until(b'\n', &mut line) {
        Ok(0) => Err(format!(
            "what listens at {addr} closed the connection without answering NCCL's RAS handshake"
        )),
        Ok(_) => Ok(String::from_utf8_lossy(&line).into_owned()),
        Err(e) if timed_out(&e) => Err(silent(addr)),
        Err(e) => Err(format!("reading NCCL's RAS handshake at {addr}: {e}")),
    }
}

fn timed_out(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
    )
}

fn silent(addr: &str) -> String {
    format!(
        "what listens at {addr} took the connection but did not answer NCCL's RAS handshake \
         within {} s",
        ASK_TIMEOUT.as_secs()
    )
}

fn unfinished(addr: &str, read: usize) -> String {
    format!(
        "NCCL's RAS at {addr} did not finish its status within {} s ({read} bytes read): it is \
         still waiting on the job's processes, so some do not answer",
        ASK_TIMEOUT.as_secs()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;
    use std::path::PathBuf;
    use std::process::{Child, Command, Stdio};

    fn fixtures() -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/nccl_ras")
    }

    /// The fake RAS server on a port of its choosing, with its log file;
    /// it exits by itself after 20 s, and is killed when the test ends.
    struct FakeRas {
        child: Child,
        port: u16,
        log: PathBuf,
        _dir: tempfile::TempDir,
    }

    impl FakeRas {
        fn start(sample: &str, nccl_version: Option<&str>) -> FakeRas {
            let dir = tempfile::tempdir().expect("a temporary folder");
            let log = dir.path().join("log.json");
            let python = ["../.venv/bin/python", "python3"]
                .iter()
                .map(|p| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(p))
                .find(|p| p.is_file())
                .unwrap_or_else(|| PathBuf::from("python3"));
            let mut command = Command::new(python);
            command
                .arg(fixtures().join("fake_ras.py"))
                .args(["--port", "0", "--lifetime", "20", "--sample", sample])
                .arg("--log")
                .arg(&log)
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit());
            if let Some(v) = nccl_version {
                command.args(["--nccl-version", v]);
            }
            let mut child = command.spawn().expect("python3 runs the fake RAS server");
            let mut first = String::new();
            let stdout = child.stdout.take().expect("its stdout");
            BufReader::new(stdout)
                .read_line(&mut first)
                .expect("the fake RAS server says where it listens");
            let port = first
                .trim()
                .rsplit(':')
                .next()
                .and_then(|p| p.parse().ok())
                .unwrap_or_else(|| panic!("no port in {first:?}"));
            FakeRas {
                child,
                port,
                log,
                _dir: dir,
            }
        }

        fn addr(&self) -> String {
            format!("127.0.0.1:{}", self.port)
        }

        /// The server's log: connections and the commands of each.
        fn log(&self) -> serde_json::Value {
            let text = std::fs::read_to_string(&self.log).unwrap_or_default();
            serde_json::from_str(&text).unwrap_or(serde_json::Value::Null)
        }
    }

    impl Drop for FakeRas {
        fn drop(&mut self) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }

    #[test]
    fn asks_once_with_the_documented_protocol_and_reads_the_whole_status() {
        let fake = FakeRas::start("incomplete", Some("2.26.2"));
        let text = ask(&fake.addr()).expect("the fake answers");
        let expected = std::fs::read_to_string(fixtures().join("incomplete.txt")).unwrap();
        assert!(text.starts_with("NCCL version 2.26.2 compiled with CUDA 12.4\n"));
        assert!(text.ends_with(&expected), "{text}");
        let log = fake.log();
        assert_eq!(log["connections"], 1, "{log}");
        assert_eq!(
            log["commands"][0],
            serde_json::json!(["CLIENT PROTOCOL 2", "TIMEOUT 2", "VERBOSE STATUS"])
        );
        // What was read is what the judgement reads.
        let status = crate::domain::ras::parse(&text).unwrap();
        assert_eq!(status.nccl_version, Some((2, 26, 2)));
        assert_eq!(
            crate::domain::ras::judge(&status).ranks_at_fault(),
            vec![21]
        );
    }

    #[test]
    fn a_server_that_takes_the_connection_and_stays_silent_ends_within_the_bound() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let holder = std::thread::spawn(move || {
            // Accept and hold the connection open, saying nothing, longer
            // than the ask may take.
            let held = listener.accept();
            std::thread::sleep(ASK_TIMEOUT + Duration::from_secs(2));
            drop(held);
        });
        let started = Instant::now();
        let err = ask(&addr).unwrap_err();
        let took = started.elapsed();
        assert!(
            took <= ASK_TIMEOUT + Duration::from_millis(500),
            "took {took:?}"
        );
        assert!(
            took >= ASK_TIMEOUT - Duration::from_millis(100),
            "took {took:?}"
        );
        assert!(
            err.contains("did not answer NCCL's RAS handshake within 5 s"),
            "{err}"
        );
        holder.join().unwrap();
    }

    #[test]
    fn a_server_that_answers_the_handshake_but_never_the_status_ends_within_the_bound() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let server = std::thread::spawn(move || {
            let (mut conn, _) = listener.accept().unwrap();
            let mut reader = BufReader::new(conn.try_clone().unwrap());
            let mut line = String::new();
            reader.read_line(&mut line).unwrap();
            conn.write_all(b"SERVER PROTOCOL 2\n").unwrap();
            line.clear();
            reader.read_line(&mut line).unwrap();
            conn.write_all(b"OK\nJob summary\n===========\n").unwrap();
            std::thread::sleep(ASK_TIMEOUT + Duration::from_secs(2));
        });
        let started = Instant::now();
        let err = ask(&addr).unwrap_err();
        assert!(started.elapsed() <= ASK_TIMEOUT + Duration::from_millis(500));
        assert!(
            err.contains("did not finish its status within 5 s (24 bytes read)"),
            "{err}"
        );
        server.join().unwrap();
    }

    #[test]
    fn a_refused_port_is_a_clear_error_at_once() {
        let port = {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let started = Instant::now();
        let err = ask(&format!("127.0.0.1:{port}")).unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(1));
        assert!(
            err.starts_with(&format!(
                "nothing answers at NCCL's RAS address 127.0.0.1:{port} (127.0.0.1:{port}: \
                 connection refused)"
            )),
            "{err}"
        );
    }

    #[test]
    fn something_else_on_the_port_is_not_taken_for_ras() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let server = std::thread::spawn(move || {
            let (mut conn, _) = listener.accept().unwrap();
            let mut line = String::new();
            BufReader::new(conn.try_clone().unwrap())
                .read_line(&mut line)
                .unwrap();
            conn.write_all(b"HTTP/1.1 400 Bad Request\r\n\r\n").unwrap();
        });
        let err = ask(&addr).unwrap_err();
        assert!(
            err.contains(
                "is not NCCL's RAS: it answered the handshake with \"HTTP/1.1 400 Bad Request\""
            ),
            "{err}"
        );
        server.join().unwrap();
    }

    #[test]
    fn an_unresolvable_address_is_a_clear_error() {
        let err = ask("no port here").unwrap_err();
        assert!(
            err.starts_with("NCCL's RAS address no port here is not a host:port"),
            "{err}"
        );
    }
}
