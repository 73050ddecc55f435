//! Command-line options of `sugarshack tide`, and durations written the way people write them.

use std::fmt;
use std::path::PathBuf;

use chrono::{NaiveDate, NaiveDateTime};
use clap::{Args, ValueEnum};

use crate::TideError;

/// The seed of the default run (any value gives a different, equally deterministic shop).
pub const DEFAULT_SEED: u64 = 20_260_827;

/// The cadences every run includes (the story's five), besides any given with `--cadence`.
pub const STORY_CADENCES_MIN: [i64; 5] = [5, 10, 15, 30, 60];

/// A duration in milliseconds, parsed from `90s`, `5m`, `1h30m`, `2h`, `1d`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Span(pub i64);

impl Span {
    /// Minutes.
    pub const fn minutes(m: i64) -> Span {
        Span(m * 60_000)
    }

    /// Milliseconds.
    pub fn ms(self) -> i64 {
        self.0
    }
}

impl fmt::Display for Span {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&format_duration_ms(self.0))
    }
}

impl std::str::FromStr for Span {
    type Err = String;

    fn from_str(s: &str) -> Result<Span, String> {
        parse_duration(s)
    }
}

/// Parse `90s`, `5m`, `1h30m`, `2h`, `1d`, `500ms` (a bare number is minutes).
pub fn parse_duration(s: &str) -> Result<Span, String> {
    let t = s.trim();
    if t.is_empty() {
        return Err("empty duration".into());
    }
    if t.chars().all(|c| c.is_ascii_digit()) {
        return t
            .parse::<i64>()
            .ok()
            .and_then(|m| m.checked_mul(60_000))
            .map(Span)
            .ok_or_else(|| format!("duration {t:?} is too large"));
    }
    let mut total: i64 = 0;
    let mut rest = t;
    while !rest.is_empty() {
        let digits = rest.chars().take_while(|c| c.is_ascii_digit()).count();
        if digits == 0 {
            return Err(format!(
                "duration {s:?}: expected a number at {rest:?} (try 5m, 90s, 1h30m)"
            ));
        }
        let n: i64 = rest[..digits]
            .parse()
            .map_err(|_| format!("duration {s:?} is too large"))?;
        rest = &rest[digits..];
        let unit_len = rest.chars().take_while(|c| c.is_ascii_alphabetic()).count();
        let unit = &rest[..unit_len];
        rest = &rest[unit_len..];
        let scale = match unit {
            "ms" => 1,
            "s" => 1_000,
            "m" | "min" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            other => {
                return Err(format!(
                    "duration {s:?}: unknown unit {other:?} (use ms, s, m, h or d)"
                ));
            }
        };
        total = n
            .checked_mul(scale)
            .and_then(|v| total.checked_add(v))
            .ok_or_else(|| format!("duration {s:?} is too large"))?;
    }
    Ok(Span(total))
}

/// `300000` → `5m`, `5400000` → `1h30m`, `90000` → `1m30s`, `0` → `0s`.
pub fn format_duration_ms(ms: i64) -> String {
    if ms == 0 {
        return "0s".into();
    }
    let mut out = String::new();
    let mut rest = ms;
    if rest < 0 {
        out.push('-');
        rest = -rest;
    }
    for (unit, size) in [
        ("d", 86_400_000),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1_000),
        ("ms", 1),
    ] {
        if rest >= size {
            out.push_str(&format!("{}{unit}", rest / size));
            rest %= size;
        }
    }
    out
}

/// How the report is printed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Default)]
pub enum TideFormat {
    /// Aligned tables for people.
    #[default]
    Table,
    /// Every figure as JSON, for machines.
    Json,
}

/// `sugarshack tide`: reproduce "The Mark the Tide Left" on the lake's own snapshots.
#[derive(Args, Debug, Clone, PartialEq, Eq)]
pub struct TideArgs {
    /// Days of source events (transactions start in this window; the loader drains the rest).
    #[arg(long, default_value_t = 90, value_parser = clap::value_parser!(u32).range(1..=3_650))]
    pub days: u32,

    /// Extra model cadences, run besides the story's 5m, 10m, 15m, 30m and 60m (any durations: 7m, 45m, 2h).
    #[arg(long, value_delimiter = ',', value_parser = parse_duration)]
    pub cadence: Vec<Span>,

    /// Look-backs for the variant `max(event_ts) - look-back` (none: `--lookback ''`).
    #[arg(long, value_delimiter = ',', default_value = "30m", value_parser = parse_lookback)]
    pub lookback: Vec<Option<Span>>,

    /// How often the loader commits to bronze. Default: the largest interval that divides every
    /// cadence (5m for the story's), so every model run lands on a loader commit; never below 1m.
    #[arg(long, value_parser = parse_duration)]
    pub loader_every: Option<Span>,

    /// Replication lag between a source commit and its rows becoming visible.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    pub lag: Span,

    /// Seed of the generated shop.
    #[arg(long, default_value_t = DEFAULT_SEED)]
    pub seed: u64,

    /// First day of the window (UTC). The default makes the story's ninety days: 2 June to
    /// 30 August, the schedule changing after sixty of them.
    #[arg(long, default_value = "2026-06-02")]
    pub start: NaiveDate,

    /// Where the runs sit in the hour: the loader and every model run at this offset from
    /// midnight plus a multiple of their interval (4m: runs at :04, :19, :34, :49, as in the
    /// story's Figure 1).
    #[arg(long, default_value = "4m", value_parser = parse_duration)]
    pub offset: Span,

    /// The day the story's model changed schedule (00:00 UTC): it runs every
    /// `--cadence-before` until then and every `--cadence-after` from then on.
    #[arg(long, default_value = "2026-08-01")]
    pub change_on: NaiveDate,

    /// The story model's interval before the schedule change.
    #[arg(long, default_value = "1h", value_parser = parse_duration)]
    pub cadence_before: Span,

    /// The story model's interval from the schedule change on.
    #[arg(long, default_value = "15m", value_parser = parse_duration)]
    pub cadence_after: Span,

    /// The commit instant (UTC) of the pallet placed by hand, the story's 27 August pallet
    /// (`''`: none). Its intake starts about `--big-pallet-items` × 1.05 s earlier, and it
    /// replaces the regular pallet of that day.
    #[arg(long, default_value = "2026-08-27T00:40:00", value_parser = parse_instant)]
    pub big_pallet: Instant,

    /// Items on the pallet placed by hand.
    #[arg(long, default_value_t = 12_000, value_parser = clap::value_parser!(i64).range(2..=100_000))]
    pub big_pallet_items: i64,

    /// Keep the experiment's lake (catalog/ and warehouse/) in this folder, which must hold no
    /// lake yet: a lake with other tables is refused, as the tidy would erase its history.
    /// Default: a temporary folder, removed at the end.
    #[arg(long, value_name = "DIR")]
    pub lake_dir: Option<PathBuf>,

    /// Keep the lake's whole history: every catalog version and every metadata file (to look
    /// back through it with `--lake-dir`). By default the lake is tidied once a simulated week
    /// and at the end — targets keep their newest snapshot, the catalog its newest version, and
    /// files nothing kept reaches are removed — so its disk holds the data, not the history.
    #[arg(long)]
    pub keep_history: bool,

    /// Output: a table for people or JSON for machines.
    #[arg(long, value_enum, default_value_t = TideFormat::Table)]
    pub format: TideFormat,
}

/// An instant (UTC) or none (written `''`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Instant(pub Option<NaiveDateTime>);

fn parse_instant(s: &str) -> Result<Instant, String> {
    let t = s.trim();
    if t.is_empty() {
        return Ok(Instant(None));
    }
    NaiveDateTime::parse_from_str(t, "%Y-%m-%dT%H:%M:%S")
        .or_else(|_| NaiveDateTime::parse_from_str(t, "%Y-%m-%dT%H:%M"))
        .map(|t| Instant(Some(t)))
        .map_err(|e| format!("{t:?}: {e} (write 2026-08-27T00:40:00)"))
}

fn parse_lookback(s: &str) -> Result<Option<Span>, String> {
    if s.trim().is_empty() {
        Ok(None)
    } else {
        parse_duration(s).map(Some)
    }
}

impl Default for TideArgs {
    fn default() -> Self {
        TideArgs {
            days: 90,
            cadence: Vec::new(),
            lookback: vec![Some(Span::minutes(30))],
            loader_every: None,
            lag: Span(60_000),
            seed: DEFAULT_SEED,
            start: NaiveDate::from_ymd_opt(2026, 6, 2).unwrap_or_default(),
            offset: Span::minutes(4),
            change_on: NaiveDate::from_ymd_opt(2026, 8, 1).unwrap_or_default(),
            cadence_before: Span::minutes(60),
            cadence_after: Span::minutes(15),
            big_pallet: Instant(
                NaiveDate::from_ymd_opt(2026, 8, 27).and_then(|d| d.and_hms_opt(0, 40, 0)),
            ),
            big_pallet_items: 12_000,
            lake_dir: None,
            keep_history: false,
            format: TideFormat::Table,
        }
    }
}

fn gcd(a: i64, b: i64) -> i64 {
    if b == 0 { a } else { gcd(b, a % b) }
}

/// The settled plan: every cadence sorted, the loader interval chosen.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Settled {
    pub cadences_ms: Vec<i64>,
    /// The story model's schedule: every `before_ms` until `switch_ms`, then every `after_ms`.
    pub switch_ms: i64,
    pub before_ms: i64,
    pub after_ms: i64,
    /// Runs and loader ticks sit at this offset from midnight.
    pub offset_ms: i64,
    pub big_pallet: Option<crate::generator::BigPallet>,
    pub lookbacks_ms: Vec<i64>,
    pub loader_every_ms: i64,
    pub lag_ms: i64,
    pub start_ms: i64,
    pub first_weekday: u32,
    pub notes: Vec<String>,
}

impl TideArgs {
    /// Check the options and settle the plan.
    pub(crate) fn settle(&self) -> Result<Settled, TideError> {
        let bad = |m: String| Err(TideError::Args(m));
        let mut cadences: Vec<i64> = STORY_CADENCES_MIN.iter().map(|m| m * 60_000).collect();
        for (flag, c) in [
            ("--cadence-before", &self.cadence_before),
            ("--cadence-after", &self.cadence_after),
        ] {
            if c.ms() < 60_000 || c.ms() % 1_000 != 0 {
                return bad(format!(
                    "{flag} {c}: a model runs at most once a minute, on whole seconds"
                ));
            }
        }
        if !(0..crate::generator::DAY_MS).contains(&self.offset.ms()) {
            return bad(format!("--offset {}: between 0s and 1d", self.offset));
        }
        for c in &self.cadence {
            if c.ms() < 60_000 {
                return bad(format!("--cadence {c}: a model runs at most once a minute"));
            }
            if c.ms() % 1_000 != 0 {
                return bad(format!("--cadence {c}: use whole seconds"));
            }
            cadences.push(c.ms());
        }
        cadences.sort_unstable();
        cadences.dedup();
        let mut lookbacks: Vec<i64> = Vec::new();
        for l in self.lookback.iter().flatten() {
            if l.ms() <= 0 {
                return bad(format!("--lookback {l}: must be positive"));
            }
            lookbacks.push(l.ms());
        }
        lookbacks.sort_unstable();
        lookbacks.dedup();
        if self.lag.ms() < 0 {
            return bad("--lag must not be negative".into());
        }
        let mut notes = Vec::new();
        let divides_all = cadences
            .iter()
            .chain([&self.cadence_before.ms(), &self.cadence_after.ms()])
            .fold(0, |g, c| gcd(g, *c));
        let loader_every_ms = match self.loader_every {
            Some(l) if l.ms() < 10_000 => {
                return bad(format!(
                    "--loader-every {l}: at least 10s (each commit is a snapshot)"
                ));
            }
            Some(l) => l.ms(),
            None => divides_all.max(60_000),
        };
        let misaligned: Vec<String> = cadences
            .iter()
            .filter(|c| *c % loader_every_ms != 0)
            .map(|c| format_duration_ms(*c))
            .collect();
        if !misaligned.is_empty() {
            notes.push(format!(
                "the loader commits every {}: runs at {} see the last commit before them, so their effective interval varies and the closed form is only approximate",
                format_duration_ms(loader_every_ms),
                misaligned.join(", ")
            ));
        }
        let start = self.start.and_hms_opt(0, 0, 0).map(|d| d.and_utc());
        let Some(start) = start else {
            return bad(format!("--start {}: not a usable date", self.start));
        };
        use chrono::Datelike;
        let start_ms = start.timestamp_millis();
        let end_ms = start_ms + i64::from(self.days) * crate::generator::DAY_MS;
        let switch_ms = self
            .change_on
            .and_hms_opt(0, 0, 0)
            .map(|d| d.and_utc().timestamp_millis())
            .unwrap_or(i64::MAX);
        if switch_ms <= start_ms || switch_ms >= end_ms {
            notes.push(format!(
                "the schedule change ({}) is outside the window: the story's model runs every {} throughout",
                self.change_on,
                if switch_ms <= start_ms {
                    self.cadence_after
                } else {
                    self.cadence_before
                }
            ));
        }
        let big_pallet = self.big_pallet.0.map(|t| crate::generator::BigPallet {
            commit_ms: t.and_utc().timestamp_millis(),
            items: self.big_pallet_items,
        });
        Ok(Settled {
            switch_ms,
            before_ms: self.cadence_before.ms(),
            after_ms: self.cadence_after.ms(),
            offset_ms: self.offset.ms(),
            big_pallet,
            cadences_ms: cadences,
            lookbacks_ms: lookbacks,
            loader_every_ms,
            lag_ms: self.lag.ms(),
            start_ms,
            first_weekday: start.weekday().num_days_from_monday(),
            notes,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        tide: TideArgs,
    }

    #[test]
    fn durations_round_trip() {
        for (s, ms) in [
            ("5m", 300_000),
            ("90s", 90_000),
            ("1h30m", 5_400_000),
            ("2h", 7_200_000),
            ("15", 900_000),
        ] {
            assert_eq!(parse_duration(s), Ok(Span(ms)), "{s}");
        }
        assert_eq!(format_duration_ms(5_400_000), "1h30m");
        assert_eq!(format_duration_ms(90_000), "1m30s");
        assert!(parse_duration("5 parsecs").is_err());
        assert!(parse_duration("m5").is_err());
        assert!(parse_duration("").is_err());
        assert!(parse_duration("99999999999999999h").is_err());
    }

    #[test]
    fn defaults_are_the_story() {
        let cli = Cli::parse_from(["tide"]);
        assert_eq!(cli.tide, TideArgs::default());
        let s = cli.tide.settle().map_err(|e| e.to_string());
        let s = s
            .as_ref()
            .map(|s| (s.cadences_ms.clone(), s.loader_every_ms, s.first_weekday));
        assert_eq!(
            s,
            Ok((
                vec![300_000, 600_000, 900_000, 1_800_000, 3_600_000],
                300_000,
                1
            ))
        );
    }

    #[test]
    fn extra_cadences_join_the_story_and_move_the_loader() {
        let cli = Cli::parse_from([
            "tide",
            "--cadence",
            "7m,45m",
            "--lookback",
            "30m,2h",
            "--days",
            "3",
        ]);
        let s = cli.tide.settle().map_err(|e| e.to_string());
        let s = s.as_ref().map(|s| {
            (
                s.cadences_ms.len(),
                s.lookbacks_ms.clone(),
                s.loader_every_ms,
            )
        });
        assert_eq!(s, Ok((7, vec![1_800_000, 7_200_000], 60_000)));
        assert!(Cli::try_parse_from(["tide", "--cadence", "7 parsecs"]).is_err());
        assert!(Cli::try_parse_from(["tide", "--days", "0"]).is_err());
        let none = Cli::parse_from(["tide", "--lookback", ""]);
        assert!(
            none.tide
                .settle()
                .map(|s| s.lookbacks_ms.is_empty())
                .unwrap_or(false)
        );
        let fast = Cli::parse_from(["tide", "--cadence", "30s"]);
        assert!(matches!(fast.tide.settle(), Err(TideError::Args(_))));
    }
}
