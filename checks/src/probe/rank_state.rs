//! Asking a running rank where it is, without stopping it: its worker
//! server (torch's `_WorkerServer`, HTTP over the Unix socket named by
//! `TORCH_WORKER_SERVER_SOCKET`: handlers `fr_trace_json` and
//! `dump_traceback`), else py-spy's `dump --nonblocking`, which reads the
//! process's memory and never pauses it. Every ask is bounded in time and
//! size, and goes through the capture seam (with the sample's number, so a
//! replay sees each moment as it was).

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::domain::flight::RankTrace;
use crate::probe::process;

/// The most read from one worker server's answer: a Flight Recorder of
/// 20,000 entries in JSON.
const MAX_REPLY: usize = 64 * 1024 * 1024;
/// How long one worker server may take to answer.
pub const ASK_TIMEOUT: Duration = Duration::from_secs(5);
/// How long py-spy may take to read one process.
const PYSPY_TIMEOUT: Duration = Duration::from_secs(10);

/// A handler's reply from a rank's worker server (`sample` numbers the
/// moment, for the capture).
pub fn ask_worker(pid: i32, socket: &str, handler: &str, sample: u32) -> Result<String, String> {
    let key = format!("{socket} {handler} #{sample}");
    crate::seam::answer("rank_state::ask_worker", &key, || {
        ask_live(&socket_path(pid, socket), handler)
    })
}

/// The socket as this process can reach it: through the rank's own root
/// when it runs in another mount namespace (a container).
fn socket_path(pid: i32, socket: &str) -> PathBuf {
    let via_root = Path::new("/proc")
        .join(pid.to_string())
        .join("root")
        .join(socket.trim_start_matches('/'));
    if Path::new(socket).exists() || !via_root.exists() {
        PathBuf::from(socket)
    } else {
        via_root
    }
}

fn ask_live(socket: &Path, handler: &str) -> Result<String, String> {
    let deadline = Instant::now() + ASK_TIMEOUT;
    let mut stream = UnixStream::connect(socket).map_err(|e| {
        format!(
            "cannot reach its worker server at {}: {e}",
            socket.display()
        )
    })?;
    stream
        .set_read_timeout(Some(ASK_TIMEOUT))
        .map_err(|e| e.to_string())?;
    stream
        .set_write_timeout(Some(ASK_TIMEOUT))
        .map_err(|e| e.to_string())?;
    let request = format!(
        "POST /handler/{handler} HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\n\
         Connection: close\r\n\r\n"
    );
    stream
        .write_all(request.as_bytes())
        .map_err(|e| format!("its worker server did not take the request: {e}"))?;
    let mut reply = Vec::new();
    let mut chunk = [0u8; 64 * 1024];
    loop {
        if Instant::now() > deadline {
            return Err(format!(
                "its worker server did not answer within {ASK_TIMEOUT:?}"
            ));
        }
        match stream.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => reply.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(format!("its worker server's answer broke off: {e}")),
        }
        if reply.len() > MAX_REPLY {
            return Err(format!(
                "its worker server's answer is over {MAX_REPLY} bytes"
            ));
        }
        if complete(&reply) {
            break;
        }
    }
    body(&reply)
}

/// Whether a reply holds its whole body (by Content-Length).
fn complete(reply: &[u8]) -> bool {
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut res = httparse::Response::new(&mut headers);
    match res.parse(reply) {
        Ok(httparse::Status::Complete(head)) => {
            content_length(res.headers).is_some_and(|len| reply.len() >= head + len)
        }
        _ => false,
    }
}

fn content_length(headers: &[httparse::Header]) -> Option<usize> {
    headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case("content-length"))
        .and_then(|h| std::str::from_utf8(h.value).ok()?.trim().parse().ok())
}

/// The body of a complete HTTP reply, when its status is 200.
fn body(reply: &[u8]) -> Result<String, String> {
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut res = httparse::Response::new(&mut headers);
    let head = match res.parse(reply) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Err("its worker server's answer broke off".into()),
        Err(e) => return Err(format!("its worker server's answer is not HTTP: {e}")),
    };
    let code = res.code.unwrap_or(0);
    let chunked = res.headers.iter().any(|h| {
        h.name.eq_ignore_ascii_case("transfer-encoding")
            && String::from_utf8_lossy(h.value).contains("chunked")
    });
    let end = content_length(res.headers).map_or(reply.len(), |l| (head + l).min(reply.len()));
    let text = String::from_utf8_lossy(&reply[head..end]).into_owned();
    if code != 200 {
        let why = crate::domain::text::cut(text.trim(), 200);
        return Err(format!("its worker server answered {code}: {why}"));
    }
    if chunked {
        return Err("its worker server answered in chunks, which gpucheck does not read".into());
    }
    Ok(text)
}

/// How long a rank may take to write the dump its pipe asked for: its
/// watchdog reads the pipe about once a second, then writes the dump.
const PIPE_DUMP_TIMEOUT: Duration = Duration::from_secs(8);

/// Ask a rank for a Flight Recorder dump through its dump pipe
/// (`TORCH_NCCL_DEBUG_INFO_PIPE_FILE`: torch makes the FIFO
/// `<stem><rank>.pipe` and its watchdog dumps to `<prefix><rank>` when a
/// byte arrives), and read the dump written after the ask.
pub fn dump_via_pipe(
    pid: i32,
    rank: u32,
    stem: &str,
    prefix: &str,
    sample: u32,
) -> Result<RankTrace, String> {
    let key = format!("{stem}{rank}.pipe #{sample}");
    crate::seam::answer("rank_state::dump_via_pipe", &key, || {
        let pipe = in_root(pid, &format!("{stem}{rank}.pipe"));
        let dump = in_root(pid, &format!("{prefix}{rank}"));
        pipe_live(rank, &pipe, &dump)
    })
}

/// A path of the rank's, as this process reaches it (through the rank's
/// root when that differs).
fn in_root(pid: i32, path: &str) -> PathBuf {
    socket_path(pid, path)
}

fn pipe_live(rank: u32, pipe: &Path, dump: &Path) -> Result<RankTrace, String> {
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
    let meta = std::fs::symlink_metadata(pipe)
        .map_err(|e| format!("no dump pipe at {}: {e}", pipe.display()))?;
    if !meta.file_type().is_fifo() {
        return Err(format!("{} is not a FIFO", pipe.display()));
    }
    let before = modified(dump);
    let mut fifo = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(pipe)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ENXIO) => format!(
                "nothing reads its dump pipe {} (the rank's recorder is off, or its \
                 process group is not NCCL's)",
                pipe.display()
            ),
            _ => format!("cannot open its dump pipe {}: {e}", pipe.display()),
        })?;
    fifo.write_all(b"1")
        .map_err(|e| format!("cannot write to its dump pipe: {e}"))?;
    drop(fifo);
    let deadline = Instant::now() + PIPE_DUMP_TIMEOUT;
    let mut last_error = String::new();
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
        if modified(dump) == before {
            continue;
        }
        // Written in place: read until it parses whole.
        match crate::probe::fr_dump::read_dump(rank, dump) {
            Ok(t) => return Ok(t),
            Err(e) => last_error = e,
        }
    }
    Err(format!(
        "asked for a dump through its pipe; none was written to {} within {PIPE_DUMP_TIMEOUT:?}{}",
        dump.display(),
        if last_error.is_empty() {
            String::new()
        } else {
            format!(" ({last_error})")
        }
    ))
}

fn modified(path: &Path) -> Option<std::time::SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

/// A dump the rank's recorder wrote by itself (after a timeout) since the
/// rank started: `<prefix><rank>`, when it is newer than `started_s`.
pub fn dump_written(
    pid: i32,
    rank: u32,
    prefix: &str,
    started_s: u64,
) -> Option<Result<RankTrace, String>> {
    let path = in_root(pid, &format!("{prefix}{rank}"));
    let key = path.display().to_string();
    crate::seam::answer("rank_state::dump_written", &key, || {
        let written = modified(&path)?
            .duration_since(std::time::UNIX_EPOCH)
            .ok()?
            .as_secs();
        (written >= started_s).then(|| crate::probe::fr_dump::read_dump(rank, &path))
    })
}

/// The libnccl the rank has loaded (from its memory map), as the rank
/// names it.
pub fn nccl_loaded(pid: i32) -> Option<String> {
    crate::seam::answer("rank_state::nccl_loaded", &pid.to_string(), || {
        let maps = procfs::process::Process::new(pid).ok()?.maps().ok()?;
        maps.into_iter().find_map(|m| match m.pathname {
            procfs::process::MMapPath::Path(p)
                if p.file_name()?
                    .to_str()?
                    .starts_with(crate::probe::nccl::NCCL_STEM) =>
            {
                Some(p.display().to_string())
            }
            _ => None,
        })
    })
}

/// Whether something listens on TCP `port` in the rank's network
/// namespace (its own /proc/PID/net/tcp and tcp6).
pub fn listening(pid: i32, port: u16) -> bool {
    crate::seam::answer("rank_state::listening", &format!("{pid} {port}"), || {
        let Ok(p) = procfs::process::Process::new(pid) else {
            return false;
        };
        let listen = |e: &procfs::net::TcpNetEntry| {
            e.state == procfs::net::TcpState::Listen && e.local_address.port() == port
        };
        p.tcp().is_ok_and(|t| t.iter().any(listen)) || p.tcp6().is_ok_and(|t| t.iter().any(listen))
    })
}

/// py-spy's `dump --json --nonblocking` of a process: its threads' Python
/// stacks, read from its memory without stopping it.
pub fn py_spy(pid: i32, bin_dir: Option<&str>, sample: u32) -> Result<String, String> {
    let key = format!("{pid} #{sample}");
    crate::seam::answer("rank_state::py_spy", &key, || py_spy_live(pid, bin_dir))
}

fn py_spy_live(pid: i32, bin_dir: Option<&str>) -> Result<String, String> {
    let program = py_spy_program(bin_dir).ok_or_else(|| {
        "py-spy is not installed (pip install py-spy, in the job's environment or beside \
         gpucheck), and the rank runs no worker server"
            .to_string()
    })?;
    let mut cmd = Command::new(&program);
    cmd.args(["dump", "--json", "--nonblocking", "--pid", &pid.to_string()]);
    let out = process::run_bounded(cmd, PYSPY_TIMEOUT).map_err(|e| format!("py-spy: {e}"))?;
    if out.code == Some(0) {
        return Ok(out.stdout);
    }
    let err = out.stderr;
    let first = err
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim();
    if first.contains("ermission denied") || first.contains("not permitted") {
        return Err(format!(
            "py-spy may not read the rank's memory ({first}): gpucheck needs ptrace rights \
             over the job's processes: run it as the job's user or root, in a container \
             started with --cap-add SYS_PTRACE (Kubernetes: securityContext.capabilities.add \
             SYS_PTRACE, and shareProcessNamespace: true to see the other containers' ranks)"
        ));
    }
    Err(format!(
        "py-spy could not read the rank: {}",
        crate::domain::text::cut(first, 200)
    ))
}

/// py-spy on PATH, beside the rank's Python, or beside gpucheck.
fn py_spy_program(bin_dir: Option<&str>) -> Option<PathBuf> {
    let path = crate::seam::env("PATH").map(std::ffi::OsString::from);
    if let Some(p) = crate::probe::python::which("py-spy", path.as_ref()) {
        return Some(p);
    }
    let beside_gpucheck = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(Path::to_path_buf));
    bin_dir
        .map(PathBuf::from)
        .into_iter()
        .chain(beside_gpucheck)
        .map(|d| d.join("py-spy"))
        .find(|p| p.is_file())
}

/// The source line `line` of `file` as the rank sees it (through its own
/// root), for a stack frame of the user's code.
pub fn source_line(pid: i32, file: &str, line: u32) -> Option<String> {
    const MAX_SOURCE: u64 = 8 * 1024 * 1024;
    let key = format!("{pid} {file}:{line}");
    crate::seam::answer("rank_state::source_line", &key, || {
        let path = Path::new("/proc")
            .join(pid.to_string())
            .join("root")
            .join(file.trim_start_matches('/'));
        let meta = std::fs::metadata(&path).ok()?;
        if !meta.is_file() || meta.len() > MAX_SOURCE || line == 0 {
            return None;
        }
        let text = std::fs::read_to_string(&path).ok()?;
        let code = text.lines().nth(line as usize - 1)?;
        Some(crate::domain::text::cut(code.trim(), 160))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reply_is_read_by_its_length() {
        let reply = b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\npong";
        assert!(complete(reply));
        assert!(!complete(&reply[..reply.len() - 1]));
        assert_eq!(body(reply).unwrap(), "pong");
    }

    #[test]
    fn an_error_status_is_named() {
        let reply = b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 9\r\n\r\nno such h";
        let e = body(reply).unwrap_err();
        assert!(e.contains("500") && e.contains("no such h"), "{e}");
        assert!(body(b"garbage\r\n\r\n").is_err());
    }
}
