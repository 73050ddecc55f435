/// How a long generation reports itself. The CLI implements it with a progress bar; the
/// generator calls `set_total` once (in simulated hours), `inc` once per hour, and `message`
/// about once per simulated day with the date, the lines written and the rows per second.
pub trait Progress {
    fn set_total(&self, n: u64);
    fn inc(&self, n: u64);
    fn message(&self, m: &str);
}

/// A `Progress` that shows nothing.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoProgress;

impl Progress for NoProgress {
    fn set_total(&self, _n: u64) {}
    fn inc(&self, _n: u64) {}
    fn message(&self, _m: &str) {}
}
