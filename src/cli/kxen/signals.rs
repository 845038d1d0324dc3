//! Cooperative cancellation (docs/spec.md §11): the first SIGINT or SIGTERM asks the running loop
//! to stop (a flag it polls: a model call in flight is abandoned, a tool in flight gets its
//! cleanup window); a second one exits at once with 130. Everything durable is already consistent
//! at any instant, so exiting mid-way only leaves what recovery handles.

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, OnceLock};

/// Installs the SIGINT/SIGTERM handlers (once) and returns the flag they set.
///
/// signal-hook runs registered actions in order: the conditional exit first (it fires only when
/// the flag is already set, i.e. on the second signal, via `_exit(130)`), then setting the flag.
pub fn cancel_flag() -> &'static AtomicBool {
    static CANCEL: OnceLock<Arc<AtomicBool>> = OnceLock::new();
    CANCEL.get_or_init(|| {
        let flag = Arc::new(AtomicBool::new(false));
        for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
            // Registering fails only for a forbidden signal (SIGKILL, SIGSTOP…), never these.
            let _ =
                signal_hook::flag::register_conditional_shutdown(signal, 130, Arc::clone(&flag));
            let _ = signal_hook::flag::register(signal, Arc::clone(&flag));
        }
        flag
    })
}
