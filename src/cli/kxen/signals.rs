//! Cooperative cancellation (kxen-agent.md §11): the first SIGINT or SIGTERM asks the running loop
//! to stop (a flag it polls: a model call in flight is abandoned, a tool in flight gets its
//! cleanup window); a second one exits at once with 130. Everything durable is already consistent
//! at any instant, so exiting mid-way only leaves what recovery handles.

use std::sync::atomic::{AtomicBool, Ordering};

static CANCEL: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_signal: libc::c_int) {
    // Only async-signal-safe work here: an atomic swap and _exit.
    if CANCEL.swap(true, Ordering::SeqCst) {
        // SAFETY: _exit is async-signal-safe and ends the process without running destructors.
        unsafe { libc::_exit(130) };
    }
}

/// Installs the SIGINT/SIGTERM handlers (once) and returns the flag they set.
pub fn cancel_flag() -> &'static AtomicBool {
    static INSTALL: std::sync::Once = std::sync::Once::new();
    INSTALL.call_once(|| {
        for signal in [libc::SIGINT, libc::SIGTERM] {
            // SAFETY: a zeroed sigaction with a plain handler and an empty mask is valid; the
            // handler only touches an atomic and calls _exit.
            unsafe {
                let mut action: libc::sigaction = std::mem::zeroed();
                action.sa_sigaction = on_signal as *const () as libc::sighandler_t;
                libc::sigemptyset(&mut action.sa_mask);
                action.sa_flags = libc::SA_RESTART;
                libc::sigaction(signal, &action, std::ptr::null_mut());
            }
        }
    });
    &CANCEL
}
