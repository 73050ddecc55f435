//! Settings of the grade: the audits' thresholds and the business time zone.
//!
//! Every setting has a default (the story's), and a lake may override any of them in one
//! optional JSON file, by default `sugarshack.json` in the warehouse folder
//! ([`Settings::default_path`]). JSON, not TOML: `serde_json` is already a dependency, and the
//! file is four keys. A file that is absent means "all defaults"; a file that is present but
//! not a JSON object, names a key this version does not know (a typo would otherwise be silently
//! ignored), or gives a key a value of the wrong kind or range is a
//! [`ShackError::Settings`] naming the file and the key.
//!
//! ```json
//! {
//!   "quarantine_max_percent": 2.0,
//!   "quarantine_min_count": 5,
//!   "settling_hours": 48,
//!   "business_time_zone": "America/Halifax"
//! }
//! ```

use std::path::{Path, PathBuf};
use std::str::FromStr;

use arrow_array::timezone::Tz;
use serde::Serialize;
use serde_json::Value;

use crate::{Result, ShackError};

/// The settings file's name in the warehouse folder.
pub const SETTINGS_FILE: &str = "sugarshack.json";

/// Thresholds of the audits and the business time zone.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Settings {
    /// A source's share of rows that went to quarantine since the last publish, in percent,
    /// above which the quarantine-rate audit blocks (default 2).
    pub quarantine_max_percent: f64,
    /// The quarantine-rate audit blocks only when at least this many rows of a source went to
    /// quarantine (default 5): one truncated line in 39 on a quiet Saturday is 2.6% of almost
    /// nothing, and warns instead.
    pub quarantine_min_count: u64,
    /// A reconciliation gap on a day that closed less than this many hours before the as-of
    /// warns (still settling); older gaps block (default 48).
    pub settling_hours: u32,
    /// The IANA zone whose days are the business's order days (default `America/Halifax`).
    pub business_time_zone: String,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            quarantine_max_percent: 2.0,
            quarantine_min_count: 5,
            settling_hours: 48,
            business_time_zone: "America/Halifax".to_string(),
        }
    }
}

const KEYS: [&str; 4] = [
    "quarantine_max_percent",
    "quarantine_min_count",
    "settling_hours",
    "business_time_zone",
];

impl Settings {
    /// Where a lake's settings file is looked for: `<warehouse>/sugarshack.json`.
    pub fn default_path(warehouse: &Path) -> PathBuf {
        warehouse.join(SETTINGS_FILE)
    }

    /// The settings of `path`: the defaults when the file does not exist, overridden by each
    /// key the file sets.
    pub fn load(path: &Path) -> Result<Settings> {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Settings::default()),
            Err(e) => return Err(bad(path, None, format!("cannot be read: {e}"))),
        };
        Settings::parse(path, &text)
    }

    /// The settings `text` (the contents of `path`, named in errors) sets over the defaults.
    pub fn parse(path: &Path, text: &str) -> Result<Settings> {
        let value: Value = serde_json::from_str(text).map_err(|e| {
            bad(
                path,
                None,
                format!(
                    "is not JSON (line {}, column {}): {e}",
                    e.line(),
                    e.column()
                ),
            )
        })?;
        let Value::Object(map) = value else {
            return Err(bad(path, None, "must be a JSON object of settings".into()));
        };
        let mut s = Settings::default();
        for (key, v) in &map {
            let wrong = |what: &str| bad(path, Some(key), format!("must be {what}, not {v}"));
            match key.as_str() {
                "quarantine_max_percent" => {
                    s.quarantine_max_percent = v
                        .as_f64()
                        .filter(|p| (0.0..=100.0).contains(p))
                        .ok_or_else(|| wrong("a number of percent from 0 to 100"))?;
                }
                "quarantine_min_count" => {
                    s.quarantine_min_count =
                        v.as_u64().ok_or_else(|| wrong("a whole number of rows"))?;
                }
                "settling_hours" => {
                    s.settling_hours =
                        v.as_u64()
                            .and_then(|h| u32::try_from(h).ok())
                            .ok_or_else(|| {
                                wrong(&format!("a whole number of hours from 0 to {}", u32::MAX))
                            })?;
                }
                "business_time_zone" => {
                    let name = v.as_str().ok_or_else(|| wrong("an IANA time zone name"))?;
                    if Tz::from_str(name).is_err() {
                        return Err(wrong("an IANA time zone name such as \"America/Halifax\""));
                    }
                    s.business_time_zone = name.to_string();
                }
                _ => {
                    return Err(bad(
                        path,
                        Some(key),
                        format!("is not a setting (the settings are {})", KEYS.join(", ")),
                    ));
                }
            }
        }
        Ok(s)
    }

    /// The business time zone, parsed.
    pub fn business_tz(&self) -> Result<Tz> {
        Tz::from_str(&self.business_time_zone).map_err(|e| ShackError::Settings {
            file: PathBuf::new(),
            key: Some("business_time_zone".into()),
            detail: format!("{:?} is not a time zone: {e}", self.business_time_zone),
        })
    }
}

fn bad(path: &Path, key: Option<&str>, detail: String) -> ShackError {
    ShackError::Settings {
        file: path.to_path_buf(),
        key: key.map(str::to_string),
        detail,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file() -> &'static Path {
        Path::new("warehouse/sugarshack.json")
    }

    #[test]
    fn an_absent_file_is_the_defaults() {
        let dir = std::env::temp_dir().join(format!("no-such-dir-{}", uuid::Uuid::now_v7()));
        let s = Settings::load(&Settings::default_path(&dir)).expect("defaults");
        assert_eq!(s, Settings::default());
        assert_eq!(s.quarantine_max_percent, 2.0);
        assert_eq!(s.settling_hours, 48);
        assert_eq!(s.business_time_zone, "America/Halifax");
        assert!(s.business_tz().is_ok());
    }

    #[test]
    fn a_file_overrides_only_the_keys_it_sets() {
        let s = Settings::parse(
            file(),
            r#"{"settling_hours": 72, "business_time_zone": "America/Toronto"}"#,
        )
        .expect("parses");
        assert_eq!(s.settling_hours, 72);
        assert_eq!(s.business_time_zone, "America/Toronto");
        assert_eq!(s.quarantine_max_percent, 2.0);
        assert_eq!(
            s.quarantine_min_count,
            Settings::default().quarantine_min_count
        );
        let s = Settings::parse(
            file(),
            r#"{"quarantine_max_percent": 5, "quarantine_min_count": 0}"#,
        )
        .expect("parses");
        assert_eq!(s.quarantine_max_percent, 5.0);
        assert_eq!(s.quarantine_min_count, 0);
    }

    #[test]
    fn a_file_on_disk_is_read() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = Settings::default_path(dir.path());
        std::fs::write(&path, r#"{"quarantine_min_count": 12}"#).expect("write");
        assert_eq!(
            Settings::load(&path).expect("loads").quarantine_min_count,
            12
        );
    }

    fn key_of(r: Result<Settings>) -> (Option<String>, String) {
        match r {
            Err(e @ ShackError::Settings { .. }) => {
                let msg = e.to_string();
                let ShackError::Settings { key, file, .. } = e else {
                    unreachable!()
                };
                assert_eq!(file, file_path());
                (key, msg)
            }
            other => panic!("expected a settings error, got {other:?}"),
        }
    }

    fn file_path() -> PathBuf {
        file().to_path_buf()
    }

    #[test]
    fn a_bad_file_names_the_file_and_the_key() {
        let (key, msg) = key_of(Settings::parse(file(), r#"{"settling_hour": 48}"#));
        assert_eq!(key.as_deref(), Some("settling_hour"));
        assert!(msg.contains("warehouse/sugarshack.json"), "{msg}");
        assert!(msg.contains("settling_hour"), "{msg}");

        let (key, _) = key_of(Settings::parse(file(), r#"{"settling_hours": "two days"}"#));
        assert_eq!(key.as_deref(), Some("settling_hours"));
        // A whole number too large is refused as too large, not as not whole.
        let (key, msg) = key_of(Settings::parse(
            file(),
            r#"{"settling_hours": 99999999999999}"#,
        ));
        assert_eq!(key.as_deref(), Some("settling_hours"));
        assert!(msg.contains("from 0 to 4294967295"), "{msg}");
        let (key, _) = key_of(Settings::parse(
            file(),
            r#"{"quarantine_max_percent": 150}"#,
        ));
        assert_eq!(key.as_deref(), Some("quarantine_max_percent"));
        let (key, _) = key_of(Settings::parse(file(), r#"{"quarantine_min_count": -1}"#));
        assert_eq!(key.as_deref(), Some("quarantine_min_count"));
        let (key, msg) = key_of(Settings::parse(
            file(),
            r#"{"business_time_zone": "Atlantic/Sugarbush"}"#,
        ));
        assert_eq!(key.as_deref(), Some("business_time_zone"));
        assert!(msg.contains("Atlantic/Sugarbush"), "{msg}");

        let (key, msg) = key_of(Settings::parse(file(), "{\"settling_hours\": 48,"));
        assert_eq!(key, None);
        assert!(msg.contains("not JSON"), "{msg}");
        let (key, _) = key_of(Settings::parse(file(), "[48]"));
        assert_eq!(key, None);
    }
}
