//! The live status line of the text view on a terminal: one line, redrawn in place, saying
//! where the run stands —
//!
//! ```text
//! turn 3/50 · in 12840 tok · out 410 tok · $0.0421 · 12.3s
//! ```
//!
//! It is written to **stderr**, like cargo's progress bar: stdout keeps the text view alone, so
//! `kxen-agent run --format text … > log` saves the normal view while the terminal still shows
//! progress. It is drawn only when stderr is a terminal and the terminal can take it (`TERM` is
//! not `dumb`, `NO_COLOR` is not set): never in CI, a pipe or a file, and never with
//! `--format jsonl`, whose bytes are the same as they were without it.
//!
//! A drawing is `\r` + the text + clear-to-end-of-line (`ESC [ K`), with no newline, so it
//! never reaches the scrollback: before any normal line is printed (on stdout or stderr) the
//! line is erased (`\r ESC [ K`) and drawn again after it, and at the end it is erased for
//! good. While streamed model text is on the screen and its line is not ended, the status
//! line stays away (a `\r` would overwrite that text); it comes back once the line ends. A
//! ticker thread redraws it a few times a second so the elapsed time moves during a long model
//! call or tool.

use std::io::{IsTerminal, Write};
use std::sync::mpsc::{RecvTimeoutError, Sender, channel};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::events::Progress;

/// How often the ticker redraws the elapsed time.
const TICK: Duration = Duration::from_millis(250);
/// Erases the line the cursor is on and goes to its start.
const CLEAR: &str = "\r\x1b[K";

/// What the line shows, and whether it is on the screen.
#[derive(Debug)]
struct State {
    started: Instant,
    progress: Option<Progress>,
    /// Drawn and not erased since.
    shown: bool,
    /// A streamed line of model text is open on the screen: no drawing until it ends.
    held: bool,
}

impl State {
    fn text(&self) -> Option<String> {
        let p = self.progress?;
        let cost = match p.cost_usd {
            Some(usd) => format!("${usd:.4}"),
            None => "cost unknown".to_string(),
        };
        Some(format!(
            "turn {}/{} · in {} tok · out {} tok · {cost} · {:.1}s",
            p.turn,
            p.max_turns,
            p.usage.input_tokens,
            p.usage.output_tokens,
            self.started.elapsed().as_secs_f64()
        ))
    }

    /// Draws the line (over the previous drawing) unless it is held or has nothing to say. It
    /// is cut to the terminal's width: a line that wrapped could not be erased by `\r`.
    fn draw(&mut self) {
        if self.held {
            return;
        }
        if let Some(mut text) = self.text() {
            if let Some(width) = stderr_width()
                && let Some((cut, _)) = text.char_indices().nth(width.saturating_sub(1))
            {
                text.truncate(cut);
            }
            write_stderr(&format!("\r{text}\x1b[K"));
            self.shown = true;
        }
    }

    fn clear(&mut self) {
        if std::mem::take(&mut self.shown) {
            write_stderr(CLEAR);
        }
    }
}

/// The width of the terminal on stderr, in columns, if it says.
fn stderr_width() -> Option<usize> {
    // SAFETY: TIOCGWINSZ writes one `winsize` into the struct it is given, which lives here.
    #[allow(unsafe_code)] // ioctl: std has no call for a terminal's size
    let size = unsafe {
        let mut size: libc::winsize = std::mem::zeroed();
        (libc::ioctl(libc::STDERR_FILENO, libc::TIOCGWINSZ, &mut size) == 0).then_some(size)
    };
    size.map(|s| usize::from(s.ws_col)).filter(|w| *w > 0)
}

fn write_stderr(text: &str) {
    let mut err = std::io::stderr().lock();
    let _ = err.write_all(text.as_bytes()).and_then(|_| err.flush());
}

/// The status line; erased and its ticker stopped when dropped.
pub struct StatusLine {
    state: Arc<Mutex<State>>,
    /// Dropped to stop the ticker.
    stop: Option<Sender<()>>,
    /// Started with the first progress: a command that reports none (`run resolve`) starts no
    /// thread.
    ticker: Option<JoinHandle<()>>,
}

impl StatusLine {
    /// A status line when stderr is a terminal that can show one (module docs), else `None`.
    pub fn for_terminal() -> Option<StatusLine> {
        let set = |name: &str| crate::own_env::var_os(name).filter(|v| !v.is_empty());
        if !std::io::stderr().is_terminal()
            || set("NO_COLOR").is_some()
            || set("TERM").is_none_or(|t| t == "dumb")
        {
            return None;
        }
        Some(StatusLine {
            state: Arc::new(Mutex::new(State {
                started: Instant::now(),
                progress: None,
                shown: false,
                held: false,
            })),
            stop: None,
            ticker: None,
        })
    }

    /// Starts the thread that redraws the line every [`TICK`] while it is shown.
    fn start_ticker(&mut self) {
        let (stop, stopped) = channel::<()>();
        let ticking = Arc::clone(&self.state);
        self.ticker = std::thread::Builder::new()
            .name("kxen-status".into())
            .spawn(move || {
                while let Err(RecvTimeoutError::Timeout) = stopped.recv_timeout(TICK) {
                    let mut state = ticking.lock().unwrap_or_else(PoisonError::into_inner);
                    if state.shown {
                        state.draw();
                    }
                }
            })
            .ok();
        self.stop = Some(stop);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes the run's new standing and redraws.
    pub fn update(&mut self, progress: &Progress) {
        if self.ticker.is_none() {
            self.start_ticker();
        }
        let mut state = self.lock();
        state.progress = Some(*progress);
        state.draw();
    }

    /// Runs `print` (which writes normal output) with the line erased, then draws it again.
    /// `open_line` says whether `print` leaves a streamed line unended on the screen: then the
    /// line stays away until a later call ends it.
    pub fn around<R>(&self, open_line: bool, print: impl FnOnce() -> R) -> R {
        let mut state = self.lock();
        state.clear();
        let out = print();
        state.held = open_line;
        state.draw();
        out
    }
}

impl Drop for StatusLine {
    fn drop(&mut self) {
        self.stop.take();
        if let Some(ticker) = self.ticker.take() {
            let _ = ticker.join();
        }
        self.lock().clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::usage::UsageRecord;

    #[test]
    fn the_line_says_turn_tokens_cost_and_time() {
        let mut state = State {
            started: Instant::now(),
            progress: None,
            shown: false,
            held: false,
        };
        assert_eq!(
            state.text(),
            None,
            "nothing to say before the first progress"
        );
        let mut p = Progress {
            turn: 3,
            max_turns: 50,
            usage: UsageRecord {
                input_tokens: 12840,
                output_tokens: 410,
                ..UsageRecord::default()
            },
            cost_usd: Some(0.04213),
        };
        state.progress = Some(p);
        let text = state.text().unwrap();
        assert!(
            text.starts_with("turn 3/50 · in 12840 tok · out 410 tok · $0.0421 · 0."),
            "{text}"
        );
        assert!(text.ends_with('s'), "{text}");
        p.cost_usd = None;
        state.progress = Some(p);
        assert!(state.text().unwrap().contains(" · cost unknown · "));
    }
}
