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
use crate::probe::as_rank::{self, Reach};
use crate::probe::nccl::NcclVersion;
use crate::probe::{fr_dump, process};

/// The most read from one worker server's answer: a Flight Recorder of
/// 20,000 entries in JSON.
const MAX_REPLY: usize = 64 * 1024 * 1024;
/// How long one worker server may take to answer.
pub const ASK_TIMEOUT: Duration = Duration::from_secs(5);
/// How long py-spy may take to read one process.
const PYSPY_TIMEOUT: Duration = Duration::from_secs(10);

/// A handler's reply from a rank's worker server (`sample` numbers the
/// moment, for the capture). The socket is reached inside the rank's root
/// and with its user's rights (`probe::as_rank`).
pub fn ask_worker(pid: i32, socket: &str, handler: &str, sample: u32) -> Result<String, String> {
    let key = format!("{socket} {handler} #{sample}");
    crate::seam::answer("rank_state::ask_worker", &key, || {
        let stream = as_rank::run(pid, |reach| reach.connect(socket)).map_err(|e| {
            if e.refused {
                format!("its worker server is not asked: {e}")
            } else {
                format!("cannot reach its worker server at {socket}: {e}")
            }
        })?;
        ask_live(stream, handler)
    })
}

fn ask_live(mut stream: UnixStream, handler: &str) -> Result<String, String> {
    let deadline = Instant::now() + ASK_TIMEOUT;
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
/// byte arrives), and read the dump written after the ask. Both are reached
/// inside the rank's root and with its user's rights (`probe::as_rank`).
pub fn dump_via_pipe(
    pid: i32,
    rank: u32,
    stem: &str,
    prefix: &str,
    sample: u32,
) -> Result<RankTrace, String> {
    let key = format!("{stem}{rank}.pipe #{sample}");
    crate::seam::answer("rank_state::dump_via_pipe", &key, || {
        let pipe = format!("{stem}{rank}.pipe");
        let dump = format!("{prefix}{rank}");
        as_rank::run(pid, |reach| Ok(pipe_live(reach, rank, &pipe, &dump)))
            .map_err(|e| format!("its dump pipe is not used: {e}"))?
    })
}

fn pipe_live(reach: &Reach, rank: u32, pipe: &str, dump: &str) -> Result<RankTrace, String> {
    let before = reach
        .modified(dump)
        .map_err(|e| format!("its dump is not read: {e}"))?;
    let mut fifo = reach.open_fifo(pipe).map_err(|e| match e.errno {
        _ if e.refused => format!("its dump pipe is not used: {e}"),
        Some(libc::ENXIO) => format!(
            "nothing reads its dump pipe {pipe} (the rank's recorder is off, or its process \
             group is not NCCL's)"
        ),
        Some(libc::ENOENT) => format!("no dump pipe at {pipe}: {e}"),
        _ => format!("cannot open its dump pipe {pipe}: {e}"),
    })?;
    fifo.write_all(b"1")
        .map_err(|e| format!("cannot write to its dump pipe: {e}"))?;
    drop(fifo);
    let deadline = Instant::now() + PIPE_DUMP_TIMEOUT;
    let mut last_error = String::new();
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
        if reach.modified(dump).ok().flatten() == before {
            continue;
        }
        // Written in place: read until it parses whole.
        match reach.read(dump, fr_dump::MAX_FILE) {
            Ok(bytes) => match fr_dump::parse(rank, dump, bytes) {
                Ok(t) => return Ok(t),
                Err(e) => last_error = e,
            },
            Err(e) if e.refused => return Err(format!("its dump is not read: {e}")),
            Err(e) => last_error = e.why,
        }
    }
    Err(format!(
        "asked for a dump through its pipe; none was written to {dump} within {PIPE_DUMP_TIMEOUT:?}{}",
        if last_error.is_empty() {
            String::new()
        } else {
            format!(" ({last_error})")
        }
    ))
}

/// A dump the rank's recorder wrote by itself (after a timeout) since the
/// rank started: `<prefix><rank>`, when it is newer than `started_s`; read
/// inside the rank's root and with its user's rights (`probe::as_rank`).
pub fn dump_written(
    pid: i32,
    rank: u32,
    prefix: &str,
    started_s: u64,
) -> Option<Result<RankTrace, String>> {
    let path = format!("{prefix}{rank}");
    crate::seam::answer("rank_state::dump_written", &path, || {
        let read = as_rank::run(pid, |reach| {
            let Some(written) = reach.modified(&path)? else {
                return Ok(None);
            };
            let secs = written
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs());
            if secs < started_s {
                return Ok(None);
            }
            Ok(Some(reach.read(&path, fr_dump::MAX_FILE)))
        });
        match read {
            Ok(None) => None,
            Ok(Some(Ok(bytes))) => Some(fr_dump::parse(rank, &path, bytes)),
            Ok(Some(Err(e))) | Err(e) if e.refused => {
                Some(Err(format!("its dump is not read: {e}")))
            }
            Ok(Some(Err(e))) => Some(Err(e.why)),
            Err(_) => None,
        }
    })
}

/// The libnccl the rank has loaded (from its memory map, as the rank
/// names it) and its version; None when it maps none. The version is read
/// by loading the library (`ncclGetVersion`), which runs its code: so where
/// gpucheck acts for a rank of another user and that user could have put or
/// changed the file (`as_rank::trusted`), it is not loaded, and the version
/// is read instead from the library's "NCCL version X.Y.Z" string, as the
/// rank's user.
pub fn nccl_version(pid: i32) -> Option<Result<(String, NcclVersion), String>> {
    crate::seam::answer("rank_state::nccl_version", &pid.to_string(), || {
        let lib = mapped_nccl(pid)?;
        let loadable = match other_user(pid) {
            None => Ok(lib.clone()),
            Some(uid) => as_rank::trusted(Path::new(&lib))
                .map(|real| real.display().to_string())
                .map_err(|why| (uid, why)),
        };
        let version = match loadable {
            Ok(path) => crate::probe::nccl::library_facts(Some(Path::new(&path)), None)
                .copies
                .first()
                .and_then(|c| c.version.clone().ok())
                .ok_or_else(|| format!("the version of the job's NCCL ({lib}) could not be read")),
            Err((uid, why)) => version_string(pid, &lib).map_err(|e| {
                format!(
                    "the job's NCCL ({lib}) is not loaded, as the rank's user (uid {uid}) could \
                     have changed it ({why}), and its version could not be read from it: {e}"
                )
            }),
        };
        Some(version.map(|v| (lib, v)))
    })
}

/// The most of a libnccl searched for its version string (the CUDA 13
/// wheel's libnccl.so.2 2.30.7 is 241 MiB).
const MAX_NCCL_LIB: u64 = 1024 * 1024 * 1024;

/// NCCL's version from the "NCCL version X.Y.Z" string it carries (its
/// `VERSION_STRING`, printed at init), read as the rank's user.
fn version_string(pid: i32, lib: &str) -> Result<NcclVersion, String> {
    let pattern = regex::bytes::Regex::new(r"NCCL version [0-9]+\.[0-9]+\.[0-9]+")
        .map_err(|e| e.to_string())?;
    let found = as_rank::run(pid, |reach| reach.find(lib, &pattern, MAX_NCCL_LIB))
        .map_err(String::from)?
        .ok_or("no \"NCCL version\" string in it")?;
    NcclVersion::parse(&found).ok_or_else(|| format!("{found:?} is not a version"))
}

/// The path of the libnccl in the rank's memory map.
fn mapped_nccl(pid: i32) -> Option<String> {
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
    let program = py_spy_program(pid, bin_dir)?;
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

/// py-spy on PATH, beside the rank's Python, or beside gpucheck. The one
/// beside the rank's Python is run for a rank of another user only where
/// that user cannot have put or changed it (`as_rank::trusted`): gpucheck
/// runs nothing as root on a rank's word.
fn py_spy_program(pid: i32, bin_dir: Option<&str>) -> Result<PathBuf, String> {
    let path = crate::seam::env("PATH").map(std::ffi::OsString::from);
    if let Some(p) = crate::probe::python::which("py-spy", path.as_ref()) {
        return Ok(p);
    }
    let mut refused = None;
    if let Some(p) = bin_dir
        .map(|d| Path::new(d).join("py-spy"))
        .filter(|p| p.is_file())
    {
        match other_user(pid) {
            None => return Ok(p),
            Some(uid) => match as_rank::trusted(&p) {
                Ok(real) => return Ok(real),
                Err(why) => {
                    refused = Some(format!(
                        "the py-spy beside the rank's Python ({}) is not run for a rank of \
                         uid {uid}, as the rank's user could have changed it ({why}): install \
                         py-spy on gpucheck's PATH or beside gpucheck",
                        p.display()
                    ))
                }
            },
        }
    }
    let beside_gpucheck = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(|d| d.join("py-spy")))
        .filter(|p| p.is_file());
    beside_gpucheck.ok_or_else(|| {
        refused.unwrap_or_else(|| {
            "py-spy is not installed (pip install py-spy, in the job's environment or beside \
             gpucheck), and the rank runs no worker server"
                .to_string()
        })
    })
}

/// The rank's uid, when gpucheck acts for a rank of another user (it runs
/// as root, the rank does not; "unknown" when the rank's user cannot be
/// read while gpucheck runs as root).
fn other_user(pid: i32) -> Option<String> {
    match as_rank::user_of(pid) {
        Ok(u) => as_rank::acting_for(&u).map(|u| u.uid.to_string()),
        // SAFETY: geteuid has no preconditions and cannot fail.
        Err(_) => (unsafe { libc::geteuid() } == 0).then(|| "unknown".to_string()),
    }
}

/// The source line `line` of `file` as the rank sees it (inside its own
/// root), for a stack frame of the user's code: read with the rank's user's
/// rights (`probe::as_rank`). None where there is no such line to read;
/// `Err` says why the file was not read when the rank's own user may not
/// read it, and nothing of the file is kept.
pub fn source_line(pid: i32, file: &str, line: u32) -> Result<Option<String>, String> {
    const MAX_SOURCE: u64 = 8 * 1024 * 1024;
    let key = format!("{pid} {file}:{line}");
    crate::seam::answer("rank_state::source_line", &key, || {
        if line == 0 {
            return Ok(None);
        }
        match as_rank::run(pid, |reach| reach.read(file, MAX_SOURCE)) {
            Ok(bytes) => Ok(String::from_utf8_lossy(&bytes)
                .lines()
                .nth(line as usize - 1)
                .map(|code| crate::domain::text::cut(code.trim(), 160))),
            Err(e) if e.refused => Err(e.why),
            Err(_) => Ok(None),
        }
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
