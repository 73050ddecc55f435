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
