//! Progress bars on stderr for long work (hidden when stderr is not a terminal).

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

pub struct Bar {
    bar: ProgressBar,
}

impl Bar {
    pub fn new(label: &str) -> Bar {
        let bar = ProgressBar::with_draw_target(Some(0), ProgressDrawTarget::stderr());
        let style = ProgressStyle::with_template("{prefix:>10} [{bar:30}] {pos}/{len} {wide_msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> ");
        bar.set_style(style);
        bar.set_prefix(label.to_string());
        Bar { bar }
    }

    /// Print a line above the bar (on stdout, the bar stays on stderr).
    pub fn println(&self, line: &str) {
        self.bar.suspend(|| {
            use std::io::Write as _;
            let _ = writeln!(std::io::stdout(), "{line}");
        });
    }

    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

impl sugarbush::Progress for Bar {
    fn set_total(&self, n: u64) {
        self.bar.set_length(n);
    }
    fn inc(&self, n: u64) {
        self.bar.inc(n);
    }
    fn message(&self, m: &str) {
        self.bar.set_message(m.to_string());
    }
}

/// The spinner of a command without a bar of its own: drawn only after a second of silence
/// (and only on a terminal), cleared by the first line the command prints.
static WORKING: std::sync::Mutex<Option<ProgressBar>> = std::sync::Mutex::new(None);

/// Start the spinner: it stays hidden for a second, so quick commands never show it.
pub fn working() {
    use std::io::IsTerminal as _;
    if !std::io::stderr().is_terminal() {
        return;
    }
    let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::hidden());
    let style = ProgressStyle::with_template("{spinner} working… {elapsed}")
        .unwrap_or_else(|_| ProgressStyle::default_spinner());
    bar.set_style(style);
    if let Ok(mut slot) = WORKING.lock() {
        *slot = Some(bar);
    }
    std::thread::spawn(|| {
        std::thread::sleep(std::time::Duration::from_secs(1));
        if let Ok(slot) = WORKING.lock()
            && let Some(bar) = slot.as_ref()
        {
            bar.set_draw_target(ProgressDrawTarget::stderr());
            bar.enable_steady_tick(std::time::Duration::from_millis(120));
        }
    });
}

/// Clear the spinner for good: the command has started printing.
pub fn quiet() {
    if let Ok(mut slot) = WORKING.lock()
        && let Some(bar) = slot.take()
    {
        bar.finish_and_clear();
    }
}

/// A line on stderr that leaves the spinner running below it.
pub fn note(line: &str) {
    match WORKING.lock().ok().as_ref().and_then(|s| s.as_ref()) {
        Some(bar) => bar.suspend(|| eprintln!("{line}")),
        None => eprintln!("{line}"),
    }
}
