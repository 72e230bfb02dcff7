//! Reaching a rank's files with the rank's own rights. A rank names files
//! that gpucheck then reads or opens: the source files of its stack frames,
//! the Flight Recorder dumps it writes (`TORCH_FR_DUMP_TEMP_FILE`), its dump
//! pipe (`TORCH_NCCL_DEBUG_INFO_PIPE_FILE`), its worker server's socket
//! (`TORCH_WORKER_SERVER_SOCKET`). gpucheck often runs as root and the rank
//! as a user: opened with root's rights, a frame "in" `/etc/shadow` would put
//! that file's lines into root's report.
//!
//! So every such open happens here. Where gpucheck runs as root and the rank
//! as another user, the open happens on a short-lived thread of its own whose
//! file-system identity is the rank's: its fsuid, fsgid and supplementary
//! groups from `/proc/PID/status`, set with the raw `setfsuid`, `setfsgid`
//! and `setgroups` system calls, which change only the calling thread (libc's
//! `setgroups` changes every thread of the process). The kernel then grants
//! that thread what it grants the rank's user, no more (a changed fsuid also
//! drops root's file capabilities from the thread). Every path is resolved
//! inside the rank's own root (`/proc/PID/root`, with openat2's
//! `RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS`): an absolute symbolic link
//! stays in the rank's container and no `/proc` link leads out of it. On a
//! kernel without openat2 (before Linux 5.6) no symbolic link is followed
//! at all. A file is opened as a bare path first and checked for its kind
//! (a regular file, a FIFO, a socket) before it is opened for reading or
//! writing, so that no device is ever opened on a rank's word.
//!
//! Where gpucheck runs as the rank's user, or as a user that can read no
//! more than its own, it opens with its own rights, as that user could
//! anyway. A gpucheck that is not root but holds a capability that reads
//! past file modes acts as the rank's user too, or, unable to, reads none of
//! the rank's files.

use std::ffi::CString;
use std::fs::File;
use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// A rank's file-system identity: what the kernel checks its opens against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RankUser {
    pub uid: u32,
    pub gid: u32,
    pub groups: Vec<u32>,
}

/// Why a rank's file was not read or opened. `refused` when the rank's own
/// user may not (or gpucheck could not act as that user): the reason a
/// report names; otherwise an ordinary failure (no such file, not a regular
/// file).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotRead {
    pub refused: bool,
    pub why: String,
    /// The system's error number, where one was the cause.
    pub errno: Option<i32>,
}

impl NotRead {
    fn failed(why: impl Into<String>) -> NotRead {
        NotRead {
            refused: false,
            why: why.into(),
            errno: None,
        }
    }

    fn refused(why: impl Into<String>) -> NotRead {
        NotRead {
            refused: true,
            why: why.into(),
            errno: None,
        }
    }
}

impl std::fmt::Display for NotRead {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.why)
    }
}

impl From<NotRead> for String {
    fn from(n: NotRead) -> String {
        n.why
    }
}

/// The rank's fsuid, fsgid and groups, from `/proc/PID/status`.
pub fn user_of(pid: i32) -> Result<RankUser, String> {
    let status = procfs::process::Process::new(pid)
        .and_then(|p| p.status())
        .map_err(|e| format!("cannot read the rank's user from /proc/{pid}/status: {e}"))?;
    Ok(RankUser {
        uid: status.fuid,
        gid: status.fgid,
        groups: status.groups,
    })
}

/// The rank's user, when gpucheck must act as it: gpucheck runs as root and
/// the rank does not, or gpucheck holds a capability that overrides file
/// permissions (a binary given `cap_dac_read_search`). None when gpucheck's
/// own rights are the ones to use (it is the rank's user, or a user that
/// cannot read more than its own).
pub fn acting_for(user: &RankUser) -> Option<&RankUser> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    let privileged = if me == 0 {
        user.uid != 0
    } else {
        overrides_permissions()
    };
    privileged.then_some(user)
}

/// CAP_DAC_OVERRIDE (bit 1) or CAP_DAC_READ_SEARCH (bit 2), from
/// capabilities(7): the capabilities that read past a file's mode.
const DAC_CAPABILITIES: u64 = 0b110;

/// Whether this process holds a capability that reads past file modes
/// (an unreadable status counts as holding one: nothing is read then).
fn overrides_permissions() -> bool {
    procfs::process::Process::myself()
        .and_then(|p| p.status())
        .map_or(true, |s| s.capeff & DAC_CAPABILITIES != 0)
}

/// Run `work` with the rank's rights over its files: on a thread of its own
/// that takes the rank's file-system identity (see the module's text), or
/// here when gpucheck's own rights are the ones to use. `work` must not
/// start processes: a child started on the short-lived thread would lose a
/// parent-death signal when the thread ends.
pub fn run<T: Send>(
    pid: i32,
    work: impl FnOnce(&Reach) -> Result<T, NotRead> + Send,
) -> Result<T, NotRead> {
    let user = user_of(pid).map_err(NotRead::failed)?;
    let Some(user) = acting_for(&user).cloned() else {
        return work(&Reach::new(pid, None)?);
    };
    std::thread::scope(|s| {
        s.spawn(move || {
            become_user(&user)?;
            work(&Reach::new(pid, Some(user))?)
        })
        .join()
        .unwrap_or_else(|_| Err(NotRead::failed("reading as the rank's user failed")))
    })
}

/// Take `user`'s file-system identity on this thread only.
fn become_user(user: &RankUser) -> Result<(), NotRead> {
    let cannot = |what: &str| {
        NotRead::refused(format!(
            "gpucheck cannot act as the rank's user (uid {}) here ({what}: {}), so it reads \
             none of the rank's files",
            user.uid,
            std::io::Error::last_os_error()
        ))
    };
    // SAFETY: raw system calls that change only the calling thread's
    // credentials; the groups pointer and length describe a live Vec.
    unsafe {
        if libc::syscall(libc::SYS_setgroups, user.groups.len(), user.groups.as_ptr()) != 0 {
            return Err(cannot("setgroups"));
        }
        libc::syscall(libc::SYS_setfsgid, user.gid);
        libc::syscall(libc::SYS_setfsuid, user.uid);
        // An invalid id changes nothing and returns the current one.
        if libc::syscall(libc::SYS_setfsgid, u32::MAX) != i64::from(user.gid) {
            return Err(cannot("setfsgid"));
        }
        if libc::syscall(libc::SYS_setfsuid, u32::MAX) != i64::from(user.uid) {
            return Err(cannot("setfsuid"));
        }
    }
    Ok(())
}

/// How much of a file [`Reach::find`] reads at a time.
const CHUNK: usize = 1024 * 1024;
/// The longest match [`Reach::find`] finds across two chunks.
pub const MAX_MATCH: usize = 256;

/// A rank's root, as the thread that reads for it reaches it.
pub struct Reach {
    root: OwnedFd,
    /// The rank's user, when the thread acts as it.
    user: Option<RankUser>,
}

/// What a rank's path must name.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Regular,
    Fifo,
    Socket,
}

impl Reach {
    /// The rank's root, `/proc/PID/root`; with gpucheck's own rights and no
    /// access to it (another user's process), gpucheck's own root, as the
    /// path would be read without this module.
    fn new(pid: i32, user: Option<RankUser>) -> Result<Reach, NotRead> {
        let open = |path: &str| open_path(path, libc::O_PATH | libc::O_DIRECTORY);
        let root = match open(&format!("/proc/{pid}/root")) {
            Ok(fd) => fd,
            Err(e) if user.is_none() && e.kind() == std::io::ErrorKind::PermissionDenied => {
                open("/").map_err(|e| NotRead::failed(format!("cannot open /: {e}")))?
            }
            Err(e) => {
                return Err(NotRead::failed(format!(
                    "cannot reach the rank's files (/proc/{pid}/root): {e}"
                )))
            }
        };
        Ok(Reach { root, user })
    }

    /// The bytes of the regular file `path`, at most `max` of them (a
    /// larger file is an error).
    pub fn read(&self, path: &str, max: u64) -> Result<Vec<u8>, NotRead> {
        let (fd, meta) = self.checked(path, Kind::Regular, "readable")?;
        if meta.len() > max {
            return Err(NotRead::failed(format!(
                "{path} is {} MiB, over the {} MiB gpucheck reads",
                meta.len() / (1024 * 1024),
                max / (1024 * 1024)
            )));
        }
        let mut file = self.reopen(&fd, path, libc::O_RDONLY | libc::O_NONBLOCK, "readable")?;
        let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
        (&mut file)
            .take(max)
            .read_to_end(&mut bytes)
            .map_err(|e| NotRead::failed(format!("{path}: {e}")))?;
        Ok(bytes)
    }

    /// The first match of `pattern` in the regular file `path` (read in
    /// chunks, at most `max` bytes; a match is at most [`MAX_MATCH`] bytes).
    pub fn find(
        &self,
        path: &str,
        pattern: &regex::bytes::Regex,
        max: u64,
    ) -> Result<Option<String>, NotRead> {
        let (fd, _) = self.checked(path, Kind::Regular, "readable")?;
        let file = self.reopen(&fd, path, libc::O_RDONLY | libc::O_NONBLOCK, "readable")?;
        let mut file = file.take(max);
        let mut window: Vec<u8> = Vec::with_capacity(2 * CHUNK);
        let mut chunk = vec![0u8; CHUNK];
        loop {
            let n = file
                .read(&mut chunk)
                .map_err(|e| NotRead::failed(format!("{path}: {e}")))?;
            if n == 0 {
                return Ok(None);
            }
            window.extend_from_slice(&chunk[..n]);
            if let Some(m) = pattern.find(&window) {
                return Ok(Some(String::from_utf8_lossy(m.as_bytes()).into_owned()));
            }
            // Keep the tail a match may start in.
            let keep = window.len().saturating_sub(MAX_MATCH);
            window.drain(..keep);
        }
    }

    /// When the regular file `path` was last written; None where there is
    /// none.
    pub fn modified(&self, path: &str) -> Result<Option<SystemTime>, NotRead> {
        match self.checked(path, Kind::Regular, "readable") {
            Ok((_, meta)) => Ok(meta.modified().ok()),
            Err(e) if e.refused => Err(e),
            Err(_) => Ok(None),
        }
    }

    /// The FIFO `path`, opened for writing without blocking (ENXIO, in
    /// `errno`, when nothing reads it).
    pub fn open_fifo(&self, path: &str) -> Result<File, NotRead> {
        let (fd, _) = self.checked(path, Kind::Fifo, "writable")?;
        self.reopen(&fd, path, libc::O_WRONLY | libc::O_NONBLOCK, "writable")
    }

    /// A connection to the Unix socket `path`.
    pub fn connect(&self, path: &str) -> Result<UnixStream, NotRead> {
        let (fd, _) = self.checked(path, Kind::Socket, "writable")?;
        UnixStream::connect(fd_path(&fd)).map_err(|e| self.io_error(path, e, "writable"))
    }

    /// `path` opened as a bare path (nothing is read, no device is
    /// opened), and what it is, when it is of `kind`.
    fn checked(
        &self,
        path: &str,
        kind: Kind,
        what: &str,
    ) -> Result<(OwnedFd, std::fs::Metadata), NotRead> {
        let fd = self.open_in_root(path, what)?;
        let meta = File::from(fd.try_clone().map_err(|e| NotRead::failed(e.to_string()))?)
            .metadata()
            .map_err(|e| NotRead::failed(format!("{path}: {e}")))?;
        let ft = meta.file_type();
        if ft.is_symlink() {
            return Err(NotRead::refused(format!(
                "{path} is a symbolic link, which gpucheck does not follow for a rank on this \
                 kernel (no openat2 before Linux 5.6)"
            )));
        }
        let (ok, name) = match kind {
            Kind::Regular => (ft.is_file(), "a regular file"),
            Kind::Fifo => (ft.is_fifo(), "a FIFO"),
            Kind::Socket => (ft.is_socket(), "a socket"),
        };
        if !ok {
            return Err(NotRead::failed(format!("{path} is not {name}")));
        }
        Ok((fd, meta))
    }

    /// The file behind a bare-path descriptor, opened with `flags`: the
    /// kernel checks the thread's rights on it as on any open.
    fn reopen(&self, fd: &OwnedFd, path: &str, flags: i32, what: &str) -> Result<File, NotRead> {
        open_path(&fd_path(fd).display().to_string(), flags)
            .map(File::from)
            .map_err(|e| self.io_error(path, e, what))
    }

    /// `path` (the rank's) as a bare path, resolved inside the rank's root.
    fn open_in_root(&self, path: &str, what: &str) -> Result<OwnedFd, NotRead> {
        let rel = path.trim_start_matches('/');
        let name = CString::new(if rel.is_empty() { "." } else { rel })
            .map_err(|_| NotRead::failed(format!("{path:?} holds a NUL byte")))?;
        // SAFETY: open_how is plain data; zero is "no flags" in every field.
        let mut how: libc::open_how = unsafe { std::mem::zeroed() };
        how.flags = (libc::O_PATH | libc::O_CLOEXEC) as u64;
        how.resolve = libc::RESOLVE_IN_ROOT | libc::RESOLVE_NO_MAGICLINKS;
        // SAFETY: a valid directory descriptor, a NUL-terminated name and
        // an open_how of the size passed.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_openat2,
                self.root.as_raw_fd(),
                name.as_ptr(),
                &how as *const libc::open_how,
                std::mem::size_of::<libc::open_how>(),
            )
        };
        if fd >= 0 {
            // SAFETY: a descriptor the kernel just returned, owned here.
            return Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) });
        }
        let e = std::io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::ENOSYS) => self.walk(path, what),
            Some(libc::ELOOP | libc::EXDEV) => Err(NotRead::refused(format!(
                "{path} goes through a /proc link, which gpucheck does not follow for a rank"
            ))),
            _ => Err(self.io_error(path, e, what)),
        }
    }

    /// Without openat2: one component at a time, following no symbolic
    /// link and no `..`.
    fn walk(&self, path: &str, what: &str) -> Result<OwnedFd, NotRead> {
        let parts: Vec<&str> = path
            .split('/')
            .filter(|p| !p.is_empty() && *p != ".")
            .collect();
        if parts.contains(&"..") || parts.is_empty() {
            return Err(NotRead::refused(format!(
                "{path} climbs with '..' or names no file, which gpucheck does not follow on \
                 this kernel (no openat2 before Linux 5.6)"
            )));
        }
        let mut dir = self
            .root
            .try_clone()
            .map_err(|e| NotRead::failed(e.to_string()))?;
        for (i, part) in parts.iter().enumerate() {
            let last = i + 1 == parts.len();
            let flags = libc::O_PATH | libc::O_NOFOLLOW | if last { 0 } else { libc::O_DIRECTORY };
            let name = CString::new(*part).map_err(|_| NotRead::failed("a NUL byte"))?;
            // SAFETY: a valid directory descriptor and a NUL-terminated name.
            let fd =
                unsafe { libc::openat(dir.as_raw_fd(), name.as_ptr(), flags | libc::O_CLOEXEC) };
            if fd < 0 {
                let e = std::io::Error::last_os_error();
                if e.raw_os_error() == Some(libc::ENOTDIR) {
                    return Err(NotRead::refused(format!(
                        "{path} goes through a symbolic link, which gpucheck does not follow \
                         for a rank on this kernel (no openat2 before Linux 5.6)"
                    )));
                }
                return Err(self.io_error(path, e, what));
            }
            // SAFETY: a descriptor the kernel just returned, owned here.
            dir = unsafe { OwnedFd::from_raw_fd(fd) };
        }
        Ok(dir)
    }

    /// An error of the system's, in a user's words: a permission the rank's
    /// user lacks is a refusal, naming the user.
    fn io_error(&self, path: &str, e: std::io::Error, what: &str) -> NotRead {
        let errno = e.raw_os_error();
        let denied = matches!(errno, Some(libc::EACCES | libc::EPERM));
        let mut n = match &self.user {
            Some(u) if denied => NotRead::refused(format!(
                "{path} is not {what} by the rank's user (uid {})",
                u.uid
            )),
            _ => NotRead::failed(format!("{path}: {e}")),
        };
        n.errno = errno;
        n
    }
}

/// A descriptor's own path, through which it is reopened or connected to.
fn fd_path(fd: &OwnedFd) -> PathBuf {
    PathBuf::from(format!("/proc/thread-self/fd/{}", fd.as_raw_fd()))
}

/// `open(2)` of a path with `flags` (and close-on-exec, no controlling
/// terminal).
fn open_path(path: &str, flags: i32) -> std::io::Result<OwnedFd> {
    let name =
        CString::new(path).map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    // SAFETY: a NUL-terminated name; the descriptor returned is owned here.
    let fd = unsafe { libc::open(name.as_ptr(), flags | libc::O_CLOEXEC | libc::O_NOCTTY) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: as above.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Whether gpucheck, acting for a rank of another user, may run or load
/// `path`: the file and every folder above it (links resolved) belong to
/// root or to gpucheck's own user and are writable by no one else (a
/// sticky folder such as /tmp excepted), so that the rank's user cannot
/// have put or changed it. The resolved path, or why not.
pub fn trusted(path: &Path) -> Result<PathBuf, String> {
    use std::os::unix::fs::MetadataExt;
    let real = std::fs::canonicalize(path).map_err(|e| format!("{}: {e}", path.display()))?;
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    for p in real.ancestors() {
        let meta = std::fs::metadata(p).map_err(|e| format!("{}: {e}", p.display()))?;
        let sticky_dir = meta.is_dir() && meta.mode() & 0o1000 != 0;
        if meta.uid() != 0 && meta.uid() != me {
            return Err(format!("{} belongs to uid {}", p.display(), meta.uid()));
        }
        if meta.mode() & 0o022 != 0 && !sticky_dir {
            return Err(format!(
                "{} is writable by others than its owner (mode {:o})",
                p.display(),
                meta.mode() & 0o7777
            ));
        }
    }
    Ok(real)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rank_of_gpucheck_own_user_is_read_with_its_own_rights() {
        let me = user_of(std::process::id() as i32).unwrap();
        assert_eq!(acting_for(&me), None);
    }

    #[test]
    fn a_file_is_read_inside_the_rank_root_by_kind() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("train.py");
        std::fs::write(&file, "import time\ntime.sleep(600)\n").unwrap();
        let pid = std::process::id() as i32;
        let path = file.display().to_string();
        let bytes = run(pid, |r| r.read(&path, 1024)).unwrap();
        assert_eq!(bytes, b"import time\ntime.sleep(600)\n");
        let big = run(pid, |r| r.read(&path, 4)).unwrap_err();
        assert!(!big.refused && big.why.contains("over"), "{big:?}");
        let folder = dir.path().display().to_string();
        let e = run(pid, |r| r.read(&folder, 1024)).unwrap_err();
        assert!(e.why.contains("not a regular file"), "{e:?}");
        let e = run(pid, |r| r.connect(&path)).unwrap_err();
        assert!(e.why.contains("not a socket"), "{e:?}");
        assert!(run(pid, |r| r.modified(&path)).unwrap().is_some());
        let gone = format!("{path}.gone");
        assert_eq!(run(pid, |r| r.modified(&gone)).unwrap(), None);
    }

    #[test]
    fn a_pattern_is_found_across_chunks() {
        let dir = tempfile::tempdir().unwrap();
        let lib = dir.path().join("libnccl.so.2");
        let mut bytes = vec![0u8; CHUNK - 5];
        bytes.extend_from_slice(b"NCCL version 2.27.3+cuda12.9\0");
        bytes.extend(vec![7u8; 100]);
        std::fs::write(&lib, &bytes).unwrap();
        let re = regex::bytes::Regex::new(r"NCCL version [0-9]+\.[0-9]+\.[0-9]+").unwrap();
        let pid = std::process::id() as i32;
        let path = lib.display().to_string();
        let found = run(pid, |r| r.find(&path, &re, u64::MAX)).unwrap();
        assert_eq!(found.as_deref(), Some("NCCL version 2.27.3"));
        let short = run(pid, |r| r.find(&path, &re, (CHUNK - 10) as u64)).unwrap();
        assert_eq!(short, None);
    }

    #[test]
    fn a_proc_link_in_a_rank_path_is_not_followed() {
        let pid = std::process::id() as i32;
        let path = format!("/proc/{pid}/root/etc/hostname");
        let e = run(pid, |r| r.read(&path, 1024)).unwrap_err();
        assert!(e.refused, "{e:?}");
    }

    /// As root: a thread that took another user's identity reads only
    /// what that user may, and the rest of the process keeps root's rights
    /// and groups. As another user: taking an identity is refused, said.
    #[test]
    fn another_user_identity_is_taken_by_one_thread_only() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let secret = dir.path().join("secret");
        std::fs::write(&secret, "s").unwrap();
        std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
        let nobody = RankUser {
            uid: 65534,
            gid: 65534,
            groups: vec![65534],
        };
        let groups_before = procfs::process::Process::myself()
            .unwrap()
            .status()
            .unwrap()
            .groups;
        let on_thread = std::thread::spawn(move || {
            become_user(&nobody)?;
            Ok::<_, NotRead>(std::fs::read(&secret).map_err(|e| e.kind()))
        })
        .join()
        .unwrap();
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            assert_eq!(
                on_thread.unwrap(),
                Err(std::io::ErrorKind::PermissionDenied)
            );
            assert!(std::fs::read(dir.path().join("secret")).is_ok());
        } else {
            let e = on_thread.unwrap_err();
            assert!(e.refused && e.why.contains("cannot act as"), "{e:?}");
        }
        let me = procfs::process::Process::myself()
            .unwrap()
            .status()
            .unwrap();
        assert_eq!(me.groups, groups_before);
        assert_eq!(me.fuid, me.euid);
    }

    #[test]
    fn without_openat2_no_link_and_no_dot_dot_is_followed() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("train.py");
        std::fs::write(&file, "x = 1\n").unwrap();
        std::os::unix::fs::symlink(&file, dir.path().join("link.py")).unwrap();
        std::os::unix::fs::symlink(dir.path(), dir.path().join("folder")).unwrap();
        let reach = Reach::new(std::process::id() as i32, None).unwrap();
        let path = |name: &str| dir.path().join(name).display().to_string();
        assert!(reach.walk(&path("train.py"), "readable").is_ok());
        for name in ["link.py", "folder/train.py"] {
            let e = reach
                .walk(&path(name), "readable")
                .and_then(|fd| {
                    let meta = File::from(fd).metadata().unwrap();
                    // The last component's link itself, never its target.
                    assert!(meta.file_type().is_symlink(), "{name}");
                    Err::<(), _>(NotRead::refused("a link"))
                })
                .unwrap_err();
            assert!(e.refused, "{name}: {e:?}");
        }
        let up = format!("{}/../x", dir.path().display());
        assert!(reach.walk(&up, "readable").unwrap_err().refused);
    }

    #[test]
    fn a_folder_others_may_write_is_not_trusted() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("py-spy");
        std::fs::write(&bin, "").unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = trusted(&bin).unwrap_err();
        assert!(e.contains("writable by others"), "{e}");
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        assert!(trusted(&bin).is_ok());
    }
}
