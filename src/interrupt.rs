//! The stop signals: which ones end a run, the flag their handlers set,
//! and what a signal is called. The runner, the progress line, the
//! outputs and a watch all read the flag here, so none of them needs
//! another for it.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use nix::sys::signal::{SigHandler, Signal};

/// The signal that interrupted the run, 0 while none has.
static INTERRUPTED: OnceLock<Arc<AtomicUsize>> = OnceLock::new();

/// The signals that stop a run early: Ctrl-C, `kill`/`docker stop`, a closed
/// terminal, and every other signal whose default action ends the process
/// and that a program may catch (SIGQUIT, the user signals, timers, CPU and
/// file-size limits, power failure, I/O). Not SIGPIPE: gpucheck writes to
/// pipes and handles a closed one as an error; not the crash signals
/// (SIGSEGV, SIGBUS, SIGABRT...), which are bugs, not requests to stop.
const STOP_SIGNALS: [libc::c_int; 13] = [
    libc::SIGINT,
    libc::SIGTERM,
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGUSR1,
    libc::SIGUSR2,
    libc::SIGALRM,
    libc::SIGVTALRM,
    libc::SIGPROF,
    libc::SIGXCPU,
    libc::SIGXFSZ,
    libc::SIGPWR,
    libc::SIGIO,
];

/// The stop signals gpucheck installed a handler for (see
/// [`install_signal_handlers`]).
static HANDLED: OnceLock<Vec<libc::c_int>> = OnceLock::new();

/// True when `sig` is ignored in this process (inherited: `nohup` ignores
/// SIGHUP, a non-interactive shell's background job SIGINT).
fn is_ignored(sig: libc::c_int) -> bool {
    // nix has no way to read a disposition without setting one, so this
    // stays a raw sigaction.
    // SAFETY: a null new action only reads the current one.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        libc::sigaction(sig, std::ptr::null(), &mut old) == 0 && old.sa_sigaction == libc::SIG_IGN
    }
}

/// Route the stop signals to a flag the runner polls; the runner
/// then kills the running child's group and reports what finished. A signal
/// the caller chose to ignore stays ignored, as it would for any program.
pub fn install_signal_handlers() {
    let flag = INTERRUPTED.get_or_init(|| Arc::new(AtomicUsize::new(0)));
    HANDLED.get_or_init(|| {
        STOP_SIGNALS
            .into_iter()
            .filter(|&sig| !is_ignored(sig))
            .filter(|&sig| {
                // Registration fails only for forbidden signals, which these
                // are not; without it the signal acts the default way.
                signal_hook::flag::register_usize(sig, Arc::clone(flag), sig as usize).is_ok()
            })
            .collect()
    });
}

/// True when gpucheck handles `sig` (a stop signal it did not find ignored).
pub fn handles(sig: libc::c_int) -> bool {
    HANDLED.get().is_some_and(|h| h.contains(&sig))
}

/// Before execvp: give CMD the signal dispositions gpucheck was started
/// with. The handled stop signals were at their default (ignored ones were
/// left alone) and a handler would be reset by exec anyway; SIGPIPE is
/// ignored by Rust's runtime for itself, and an ignored disposition survives
/// exec, so without this CMD (and every shell pipeline it runs) would never
/// die of SIGPIPE.
pub fn restore_signals_for_exec() {
    let handled = HANDLED.get().map(Vec::as_slice).unwrap_or_default();
    for &sig in handled.iter().chain(&[libc::SIGPIPE]) {
        let Ok(sig) = Signal::try_from(sig) else {
            continue;
        };
        // SAFETY: setting a plain disposition; no handler code runs.
        unsafe {
            let _ = nix::sys::signal::signal(sig, SigHandler::SigDfl);
        }
    }
}

/// Ignore SIGPIPE again, as Rust's runtime does at start (after a failed
/// exec that [`restore_signals_for_exec`] prepared): a write to a closed
/// pipe is then an error to handle, not death by signal.
pub fn ignore_sigpipe() {
    // SAFETY: setting a plain disposition; no handler code runs.
    unsafe {
        let _ = nix::sys::signal::signal(Signal::SIGPIPE, SigHandler::SigIgn);
    }
}

/// The stop signal that arrived since the last call, if any, cleared (a
/// watch passes each on to its command and goes on).
pub fn take_interrupt() -> Option<i32> {
    let sig = INTERRUPTED.get()?.swap(0, Ordering::SeqCst);
    (sig != 0).then_some(sig as i32)
}

/// The signal that stopped the run, if any ("SIGINT").
pub fn interrupted() -> Option<String> {
    let sig = INTERRUPTED.get()?.load(Ordering::SeqCst);
    if sig == 0 {
        return None;
    }
    Some(signal_name(sig as i32))
}

pub fn signal_name(sig: i32) -> String {
    nix::sys::signal::Signal::try_from(sig)
        .map(|s| s.as_str().to_string())
        .unwrap_or_else(|_| format!("signal {sig}"))
}
