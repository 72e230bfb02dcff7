//! Where the reports go. The one place that turns `--format`, `--json` and
//! `--junit` into outputs, before any check runs: at most one report on the
//! main stream (stdout, or stderr under `exec`), never two reports on one
//! file, and every file checked before any check runs. Writing them is the
//! last step of a run, and each report file appears whole or not at all.

use std::fs::{File, Permissions};
use std::io::Write;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tempfile::NamedTempFile;

use crate::interrupt;
use crate::report::{Format, Run, Style};

/// A report file, made ready before the checks run, so that a path that
/// cannot be written refuses the command before anything is touched.
pub struct ReportFile {
    path: PathBuf,
    target: Target,
}

enum Target {
    /// A regular file (or nothing yet, or a symlink): the report is written
    /// to a temporary file beside it and renamed into place, so a reader
    /// sees the old file or the whole report, never half of one, and a
    /// symlink named as the target is replaced, not written through.
    Replace {
        temp: NamedTempFile,
        /// The old file's permissions, kept by the new one.
        keep: Option<Permissions>,
    },
    /// A device or pipe (`/dev/stdout`, `/dev/null`, a FIFO): written in
    /// place, as any number of writers may. `None`: a FIFO that no reader
    /// opened before a stop signal ended the wait for one.
    Stream(Option<File>),
}

/// Every report of a run: exactly one on the main stream, the rest in files.
pub struct Outputs {
    stream: Format,
    files: Vec<(Format, ReportFile)>,
}

/// The flag that asks for `format` in a file (`--json`).
fn flag(format: Format) -> String {
    format!("--{}", format.name())
}

/// Plan the outputs: `stream` is `--format`, `files` the formats asked for by
/// flag with their paths (`-` for the main stream). The error is the one-line
/// usage error to show.
pub fn plan(stream: Format, files: &[(Format, Option<&Path>)]) -> Result<Outputs, String> {
    let asked: Vec<(Format, &Path)> = files
        .iter()
        .filter_map(|(f, p)| p.map(|p| (*f, p)))
        .collect();
    let on_stream: Vec<Format> = asked
        .iter()
        .filter(|(_, p)| *p == Path::new("-"))
        .map(|(f, _)| *f)
        .collect();
    let stream = match on_stream.as_slice() {
        [] => stream,
        [one] if stream == Format::Table || stream == *one => *one,
        [one] => {
            return Err(format!(
                "--format {} and {} - both ask for stdout; write one of them to a file",
                stream.name(),
                flag(*one)
            ))
        }
        [a, b, ..] => {
            return Err(format!(
                "{} - and {} - both ask for stdout; write one of them to a file",
                flag(*a),
                flag(*b)
            ))
        }
    };
    let mut opened: Vec<(Format, ReportFile)> = Vec::new();
    for (format, path) in asked.into_iter().filter(|(_, p)| *p != Path::new("-")) {
        let file = open(format, path)?;
        if let Some((other, o)) = opened.iter().find(|(_, o)| same_file(o, &file)) {
            return Err(format!(
                "{} and {} both name {}; give each report its own file",
                flag(*other),
                flag(format),
                o.path.display()
            ));
        }
        opened.push((format, file));
    }
    Ok(Outputs {
        stream,
        files: opened,
    })
}

/// What the JSON report is called in errors ("JSON").
fn title(format: Format) -> &'static str {
    match format {
        Format::Table => "table",
        Format::Json => "JSON",
        Format::Junit => "JUnit",
        Format::Prom => "Prometheus",
        Format::Markdown => "Markdown",
        Format::Html => "HTML",
    }
}

/// Make `path` ready for a report: a device or pipe is opened for writing
/// (never truncated); otherwise its folder must take a new file, which is
/// created now and becomes the report at the end.
fn open(format: Format, path: &Path) -> Result<ReportFile, String> {
    let refuse = |e: std::io::Error| {
        format!(
            "cannot write the {} report to {}: {}",
            title(format),
            path.display(),
            plain_io_error(e)
        )
    };
    let existing = std::fs::symlink_metadata(path).ok();
    // What a symbolic link leads to: a link to a device or a pipe
    // (`/dev/stdout`, `/dev/fd/63` of `--json >(jq .)`) is that stream,
    // written through; a link to a file is replaced, as a file is.
    let stream = std::fs::metadata(path)
        .ok()
        .filter(|m| (!m.is_file() && !m.is_dir()) || names_a_descriptor(path));
    let target = match (&existing, stream) {
        (Some(m), _) if m.is_dir() => {
            return Err(refuse(std::io::Error::from_raw_os_error(libc::EISDIR)))
        }
        (Some(_), Some(m)) => match own_descriptor(path) {
            // This process's own descriptor: shared, so the report and
            // what else goes there (the table on stdout) follow each other.
            Some(fd) => Target::Stream(Some(
                nix::unistd::dup(fd)
                    .map(|dup| {
                        // SAFETY: dup returned a new descriptor owned here.
                        unsafe { <File as std::os::fd::FromRawFd>::from_raw_fd(dup) }
                    })
                    .map_err(|e| refuse(e.into()))?,
            )),
            None => Target::Stream(open_stream(path, m.file_type().is_fifo()).map_err(refuse)?),
        },
        _ => {
            let folder = match path.parent() {
                Some(p) if !p.as_os_str().is_empty() => p,
                _ => Path::new("."),
            };
            let name = path.file_name().unwrap_or_default();
            let mut prefix = std::ffi::OsString::from(".");
            prefix.push(name);
            prefix.push(".");
            let temp = tempfile::Builder::new()
                .prefix(&prefix)
                .suffix(".tmp")
                // What File::create gives a new file: 0666 less the umask.
                .permissions(Permissions::from_mode(0o666))
                .tempfile_in(folder)
                .map_err(|e| refuse(folder_refusal(folder).unwrap_or(e)))?;
            let keep = existing.filter(|m| m.is_file()).map(|m| m.permissions());
            Target::Replace { temp, keep }
        }
    };
    Ok(ReportFile {
        path: path.to_path_buf(),
        target,
    })
}

/// How long gpucheck still waits for a reader (of a FIFO report, of a
/// pipe on stdout) once a stop signal has arrived: Ctrl-C and SIGTERM end
/// gpucheck within a second at every point, a report nobody reads
/// included.
const WAIT_AFTER_STOP: Duration = Duration::from_millis(500);

/// How often a wait for a reader looks for a stop signal.
const POLL_SLICE_MS: u16 = 20;

/// The most bytes one write to a pipe hands over after poll said it has
/// room: a write of at most PIPE_BUF bytes then never blocks (pipe(7)).
pub const PIPE_BUF: usize = libc::PIPE_BUF;

/// A terminal's: poll says it has room while fewer than 256 characters
/// wait to be shown (the kernel's WAKEUP_CHARS), so a write that fits
/// there never blocks, even on a terminal stopped with Ctrl-S.
pub const TTY_CHUNK: usize = 256;

/// How much one write to `stream` hands over: [`TTY_CHUNK`] on a
/// terminal, else [`PIPE_BUF`].
pub fn chunk_for(stream: &impl std::io::IsTerminal) -> usize {
    if stream.is_terminal() {
        TTY_CHUNK
    } else {
        PIPE_BUF
    }
}

/// The stop signal that ended a wait, once it has been waited on for
/// [`WAIT_AFTER_STOP`].
#[derive(Default)]
struct StopClock(Option<Instant>);

impl StopClock {
    fn expired(&mut self) -> Option<String> {
        let signal = interrupt::interrupted()?;
        let since = *self.0.get_or_insert_with(Instant::now);
        (since.elapsed() >= WAIT_AFTER_STOP).then_some(signal)
    }
}

/// Open a device or FIFO for writing without blocking: a FIFO waits for
/// its reader (`mkfifo r; gpucheck --json r & jq . r`), but a stop
/// signal ends the wait (`Ok(None)`), where a blocking open would not
/// notice it.
fn open_stream(path: &Path, fifo: bool) -> std::io::Result<Option<File>> {
    let mut clock = StopClock::default();
    loop {
        let opened = std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
            .open(path);
        match opened {
            Ok(file) => return Ok(Some(file)),
            // ENXIO: a FIFO with no reader yet.
            Err(e) if fifo && e.raw_os_error() == Some(libc::ENXIO) => {
                if clock.expired().is_some() {
                    return Ok(None);
                }
                std::thread::sleep(Duration::from_millis(POLL_SLICE_MS.into()));
            }
            Err(e) => return Err(e),
        }
    }
}

/// Write all of `bytes` to `fd` (a pipe, a terminal, a file), at most
/// `chunk` bytes at a time and each only once poll says there is room, so
/// no write blocks for long: a reader that stops reading (`gpucheck |
/// (sleep 1d)`, a terminal stopped with Ctrl-S) holds gpucheck only until
/// a stop signal arrives, and [`WAIT_AFTER_STOP`] after it the write gives
/// up with `ErrorKind::Interrupted`.
pub fn write_all_or_stop(fd: BorrowedFd<'_>, bytes: &[u8], chunk: usize) -> std::io::Result<()> {
    use nix::errno::Errno;
    use nix::poll::{PollFd, PollFlags, PollTimeout};
    let mut rest = bytes;
    let mut clock = StopClock::default();
    while !rest.is_empty() {
        if let Some(signal) = clock.expired() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::Interrupted,
                format!("its reader took nothing after {signal}"),
            ));
        }
        let mut fds = [PollFd::new(fd, PollFlags::POLLOUT)];
        match nix::poll::poll(&mut fds, PollTimeout::from(POLL_SLICE_MS)) {
            Ok(0) | Err(Errno::EINTR) => continue,
            Ok(_) => {}
            Err(e) => return Err(e.into()),
        }
        match nix::unistd::write(fd, &rest[..rest.len().min(chunk.max(1))]) {
            Ok(n) => rest = &rest[n..],
            Err(Errno::EAGAIN | Errno::EINTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// True when `path` names an open file descriptor through /proc:
/// `/dev/stdout` (a link to /proc/self/fd/1), `/dev/fd/3`, `/proc/self/fd/1`.
/// Whatever it leads to (a redirected stdout may be a regular file), it is
/// a stream to write to, never a link to replace: replacing one would put a
/// file in /dev's place.
pub fn names_a_descriptor(path: &Path) -> bool {
    let in_proc = |p: &Path| p.starts_with("/proc");
    let folder = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    folder.canonicalize().is_ok_and(|f| in_proc(&f))
        || std::fs::read_link(path).is_ok_and(|target| in_proc(&target))
}

/// The descriptor number `path` names in this process, if it names one
/// (`/dev/stdout`: 1, `/dev/fd/3`, `/proc/self/fd/2`).
fn own_descriptor(path: &Path) -> Option<std::os::fd::RawFd> {
    let link = std::fs::read_link(path)
        .ok()
        .filter(|t| t.starts_with("/proc"));
    let named = link.as_deref().unwrap_or(path);
    let fds = Path::new("/proc/self/fd").canonicalize().ok()?;
    let folder = named.parent()?.canonicalize().ok()?;
    if folder != fds {
        return None;
    }
    named.file_name()?.to_str()?.parse().ok()
}

/// Why a report cannot be made in `folder`, as the OS says it (tempfile's
/// own error names its random temporary file, which the user never
/// asked for): the folder missing, not a folder, or not writable.
fn folder_refusal(folder: &Path) -> Option<std::io::Error> {
    use nix::unistd::{access, AccessFlags};
    access(folder, AccessFlags::W_OK | AccessFlags::X_OK)
        .err()
        .map(std::io::Error::from)
}

/// The OS's words for an I/O error, without the path tempfile appends.
fn plain_io_error(e: std::io::Error) -> std::io::Error {
    match e.raw_os_error() {
        Some(code) => std::io::Error::from_raw_os_error(code),
        None => e,
    }
}

/// True when two report files would overwrite each other (`--json r
/// --junit ./r`): the same name in the same folder. Devices and pipes take
/// any number of writers.
fn same_file(a: &ReportFile, b: &ReportFile) -> bool {
    let key = |f: &ReportFile| match &f.target {
        Target::Replace { temp, .. } => {
            let folder = temp.path().parent()?.canonicalize().ok()?;
            Some((folder, f.path.file_name()?.to_os_string()))
        }
        Target::Stream(_) => None,
    };
    matches!((key(a), key(b)), (Some(x), Some(y)) if x == y)
}

impl ReportFile {
    /// Write `text` as the whole report.
    fn write(self, text: &str) -> std::io::Result<()> {
        match self.target {
            Target::Stream(Some(file)) => {
                write_all_or_stop(file.as_fd(), text.as_bytes(), chunk_for(&file))
            }
            Target::Stream(None) => Err(std::io::Error::new(
                std::io::ErrorKind::Interrupted,
                "no reader opened the FIFO before gpucheck was stopped",
            )),
            Target::Replace { mut temp, keep } => {
                temp.write_all(text.as_bytes())?;
                temp.flush()?;
                if let Some(p) = keep {
                    temp.as_file().set_permissions(p)?;
                }
                // On disk before it takes the name, so a crash right after
                // leaves the old file or the new one, not an empty one.
                temp.as_file().sync_all()?;
                temp.persist(&self.path).map_err(|e| e.error)?;
                Ok(())
            }
        }
    }
}

impl Outputs {
    /// The main stream's report.
    pub fn stream_text(&self, run: &Run, style: Style) -> String {
        self.stream.render(run, style)
    }

    /// The format on the main stream.
    pub fn stream_format(&self) -> Format {
        self.stream
    }

    /// Write the file reports; the error names the file that failed.
    pub fn write_files(self, run: &Run) -> Result<(), String> {
        self.write_files_with(run, |_, text| text)
    }

    /// [`Outputs::write_files`], each report's text passed through `more`
    /// (the watch adds its own series to the Prometheus report).
    pub fn write_files_with(
        self,
        run: &Run,
        more: impl Fn(Format, String) -> String,
    ) -> Result<(), String> {
        let mut first_error = Ok(());
        for (format, file) in self.files {
            let text = more(format, format.render(run, Style::default()));
            let path = file.path.clone();
            match file.write(&text) {
                // Stopped by a signal while no one read it: the run's exit
                // code (1, interrupted) says so, not a usage error.
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => say!(
                    "gpucheck: the {} report was not written to {}: {e}",
                    title(format),
                    path.display()
                ),
                Err(e) if first_error.is_ok() => {
                    first_error = Err(format!("cannot write {}: {e}", path.display()));
                }
                _ => {}
            }
        }
        first_error
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stream_of(
        format: Format,
        json: Option<&str>,
        junit: Option<&str>,
    ) -> Result<Format, String> {
        let files = [
            (Format::Json, json.map(Path::new)),
            (Format::Junit, junit.map(Path::new)),
        ];
        plan(format, &files).map(|o| o.stream)
    }

    #[test]
    fn one_report_on_the_main_stream_at_most() {
        assert_eq!(stream_of(Format::Table, None, None), Ok(Format::Table));
        assert_eq!(stream_of(Format::Table, Some("-"), None), Ok(Format::Json));
        assert_eq!(stream_of(Format::Junit, None, Some("-")), Ok(Format::Junit));
        assert_eq!(
            stream_of(Format::Table, Some("-"), Some("-")),
            Err("--json - and --junit - both ask for stdout; write one of them to a file".into())
        );
        assert_eq!(
            stream_of(Format::Json, None, Some("-")),
            Err(
                "--format json and --junit - both ask for stdout; write one of them to a file"
                    .into()
            )
        );
    }

    #[test]
    fn a_link_to_a_device_is_written_through_and_a_link_to_a_file_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let to_null = dir.path().join("null");
        std::os::unix::fs::symlink("/dev/null", &to_null).unwrap();
        let file = dir.path().join("old.json");
        std::fs::write(&file, "old").unwrap();
        let to_file = dir.path().join("link.json");
        std::os::unix::fs::symlink(&file, &to_file).unwrap();
        let outputs = plan(
            Format::Table,
            &[
                (Format::Json, Some(to_null.as_path())),
                (Format::Junit, Some(to_file.as_path())),
            ],
        )
        .unwrap();
        assert!(matches!(outputs.files[0].1.target, Target::Stream(Some(_))));
        assert!(matches!(outputs.files[1].1.target, Target::Replace { .. }));
        outputs
            .write_files(&crate::model::fixtures::every_status())
            .unwrap();
        assert!(std::fs::symlink_metadata(&to_null)
            .unwrap()
            .file_type()
            .is_symlink());
        assert!(
            std::fs::symlink_metadata(&to_file).unwrap().is_file(),
            "replaced"
        );
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "old");
    }

    #[test]
    fn a_folder_is_no_report_file_and_devices_take_every_writer() {
        let err = stream_of(Format::Table, Some("/"), None).unwrap_err();
        assert!(
            err.starts_with("cannot write the JSON report to /: "),
            "{err}"
        );
        assert!(stream_of(Format::Table, Some("/dev/null"), Some("/dev/null")).is_ok());
    }

    #[test]
    fn a_report_in_a_missing_folder_is_refused_without_naming_a_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nowhere/r.json");
        let err = stream_of(Format::Table, Some(path.to_str().unwrap()), None).unwrap_err();
        assert_eq!(
            err,
            format!(
                "cannot write the JSON report to {}: No such file or directory (os error 2)",
                path.display()
            )
        );
    }
}
