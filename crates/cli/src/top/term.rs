//! The full-screen terminal of the live views, restored however the view ends: on return, on
//! `?`, and on a panic anywhere in the process (a hook restores it before the panic message
//! prints, so the message is readable and the shell is usable).

use std::io::{self, Write};
use std::sync::Once;
use std::sync::atomic::{AtomicU8, Ordering};

use ratatui::Terminal;
use ratatui::backend::CrosstermBackend;
use ratatui::crossterm::{cursor, execute, terminal};

/// Which stream the view draws on: `top` uses stdout; the sweep stderr, so that its final table
/// on stdout stays a clean pipe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
}

// 0: no screen; bit 0: active; bit 1: stderr; bit 2: raw mode.
static ACTIVE: AtomicU8 = AtomicU8::new(0);
static HOOK: Once = Once::new();

fn writer(t: Target) -> Box<dyn Write + Send> {
    match t {
        Target::Stdout => Box::new(io::stdout()),
        Target::Stderr => Box::new(io::stderr()),
    }
}

/// Leaves the alternate screen, shows the cursor and ends raw mode, if a screen is active.
fn restore() {
    let s = ACTIVE.swap(0, Ordering::SeqCst);
    if s & 1 == 0 {
        return;
    }
    if s & 4 != 0 {
        let _ = terminal::disable_raw_mode();
    }
    let t = if s & 2 != 0 {
        Target::Stderr
    } else {
        Target::Stdout
    };
    let mut w = writer(t);
    let _ = execute!(w, cursor::Show, terminal::LeaveAlternateScreen);
    let _ = w.flush();
}

/// The live view's terminal; dropping it restores the terminal.
pub struct Screen {
    /// Draw through this.
    pub terminal: Terminal<CrosstermBackend<Box<dyn Write + Send>>>,
}

impl Screen {
    /// Enters the alternate screen on `target`, hides the cursor and, with `raw` (to read keys),
    /// enters raw mode.
    ///
    /// # Errors
    /// When the terminal refuses any of these (it is then restored).
    pub fn enter(target: Target, raw: bool) -> io::Result<Screen> {
        HOOK.call_once(|| {
            let prev = std::panic::take_hook();
            std::panic::set_hook(Box::new(move |info| {
                restore();
                prev(info);
            }));
        });
        let flags = 1 | if target == Target::Stderr { 2 } else { 0 } | if raw { 4 } else { 0 };
        ACTIVE.store(flags, Ordering::SeqCst);
        let setup = || -> io::Result<Screen> {
            if raw {
                terminal::enable_raw_mode()?;
            }
            let mut w = writer(target);
            // Cleared here, not with `Terminal::clear`, which asks the terminal for the cursor
            // position: crossterm asks on stdout and reads the answer in raw mode, neither of
            // which holds for the sweep's view on stderr with stdout redirected.
            execute!(
                w,
                terminal::EnterAlternateScreen,
                terminal::Clear(terminal::ClearType::All),
                cursor::Hide
            )?;
            Ok(Screen {
                terminal: Terminal::new(CrosstermBackend::new(w))?,
            })
        };
        setup().inspect_err(|_| restore())
    }
}

impl Drop for Screen {
    fn drop(&mut self) {
        restore();
    }
}
