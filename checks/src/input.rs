//! Files someone else named: a capture (`--replay`), a token file
//! (`--token-file`), an NCCL configuration file (`$NCCL_CONF_FILE`), a
//! sysfs attribute. Each is expected to be a regular file, and reading one
//! must neither wait nor fill memory: a FIFO with no writer would block the
//! read forever (and a blocked read does not notice Ctrl-C), a character
//! device can stream without end, a folder is no file at all. So the path is
//! looked at before it is opened, opened without blocking, looked at again
//! on what was opened (the name may have changed in between), and read no
//! further than a bound the caller chooses. `probe::fr_dump` reads the
//! Flight Recorder dumps the same way.

use std::fs::{File, FileType, Metadata, OpenOptions};
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

use thiserror::Error;

/// Why a file someone named was not read; one line each, without the path
/// (the caller names the option and the path).
#[derive(Debug, Error)]
pub enum Refused {
    /// A FIFO, device, socket or folder where a regular file is expected.
    #[error("it is {0}, not a regular file")]
    NotAFile(&'static str),
    #[error("it is {}, more than the {} this gpucheck reads", size_text(*.bytes), size_text(*.max))]
    TooLarge { bytes: u64, max: u64 },
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// What kind of file `t` is, as an error names it ("a FIFO").
pub fn kind(t: &FileType) -> &'static str {
    if t.is_dir() {
        "a folder"
    } else if t.is_fifo() {
        "a FIFO (named pipe)"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_symlink() {
        "a symbolic link"
    } else {
        "a regular file"
    }
}

/// "512 bytes", "3.5 MiB".
fn size_text(bytes: u64) -> String {
    const MIB: u64 = 1024 * 1024;
    if bytes < 1024 * 1024 {
        format!("{bytes} bytes")
    } else {
        format!("{:.1} MiB", bytes as f64 / MIB as f64)
    }
}

fn regular_and_small(meta: &Metadata, max: u64) -> Result<(), Refused> {
    if !meta.is_file() {
        return Err(Refused::NotAFile(kind(&meta.file_type())));
    }
    if meta.len() > max {
        return Err(Refused::TooLarge {
            bytes: meta.len(),
            max,
        });
    }
    Ok(())
}

/// Open `path` for reading if it is a regular file (a symbolic link to one
/// is followed) of at most `max` bytes, without waiting: a FIFO, device,
/// socket or folder is refused before it is opened, and again after (in
/// case the name changed in between).
pub fn open_regular(path: &Path, max: u64) -> Result<File, Refused> {
    regular_and_small(&std::fs::metadata(path)?, max)?;
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)?;
    regular_and_small(&file.metadata()?, max)?;
    Ok(file)
}

/// The bytes of the regular file `path`, at most `max` of them (see
/// [`open_regular`]). A file that grows past `max` while it is read is
/// refused as too large rather than read on.
pub fn read_regular(path: &Path, max: u64) -> Result<Vec<u8>, Refused> {
    let file = open_regular(path, max)?;
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    let mut bytes = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
    file.take(max.saturating_add(1)).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max {
        return Err(Refused::TooLarge {
            bytes: bytes.len() as u64,
            max,
        });
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn a_fifo_a_device_and_a_folder_are_refused_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        let start = Instant::now();
        let err = read_regular(&fifo, 1024).unwrap_err();
        assert_eq!(
            err.to_string(),
            "it is a FIFO (named pipe), not a regular file"
        );
        assert!(start.elapsed() < Duration::from_secs(1));
        let err = read_regular(Path::new("/dev/zero"), 1024).unwrap_err();
        assert_eq!(
            err.to_string(),
            "it is a character device, not a regular file"
        );
        let err = read_regular(dir.path(), 1024).unwrap_err();
        assert_eq!(err.to_string(), "it is a folder, not a regular file");
    }

    #[test]
    fn a_regular_file_is_read_up_to_its_bound_and_a_link_to_one_followed() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("capture.json");
        std::fs::write(&file, b"{\"a\": 1}").unwrap();
        let link = dir.path().join("link.json");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        assert_eq!(read_regular(&link, 8).unwrap(), b"{\"a\": 1}");
        let err = read_regular(&file, 7).unwrap_err();
        assert_eq!(
            err.to_string(),
            "it is 8 bytes, more than the 7 bytes this gpucheck reads"
        );
        // /proc and sysfs files are regular, of size 0 or 4096 whatever
        // they hold: read to their end.
        let status = read_regular(Path::new("/proc/self/status"), 64 * 1024).unwrap();
        assert!(String::from_utf8_lossy(&status).contains("VmRSS"));
        std::fs::write(&file, vec![b' '; 3 << 20]).unwrap();
        let err = read_regular(&file, 1 << 20).unwrap_err();
        assert_eq!(
            err.to_string(),
            "it is 3.0 MiB, more than the 1.0 MiB this gpucheck reads"
        );
    }
}
