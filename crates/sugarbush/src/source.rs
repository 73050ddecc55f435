use serde::{Deserialize, Serialize};

/// The four sources of the landing zone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// CDC change events from the order database, hourly JSON-lines files.
    Orders,
    /// Processor webhooks (`charge.succeeded`, `charge.refunded`), hourly JSON-lines files.
    Payments,
    /// One CSV per business day with the USD→CAD rate.
    FxRates,
    /// The processor's daily totals per currency, one CSV per UTC day, arriving the next day.
    Settlements,
}

impl Source {
    /// Every source, in the order the landing zone and reports list them.
    pub const ALL: [Source; 4] = [
        Source::Orders,
        Source::Payments,
        Source::FxRates,
        Source::Settlements,
    ];

    /// The folder and file-name word: `orders`, `payments`, `fx_rates`, `settlements`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Source::Orders => "orders",
            Source::Payments => "payments",
            Source::FxRates => "fx_rates",
            Source::Settlements => "settlements",
        }
    }

    /// The extension of this source's files: `jsonl` or `csv`.
    pub const fn extension(self) -> &'static str {
        match self {
            Source::Orders | Source::Payments => "jsonl",
            Source::FxRates | Source::Settlements => "csv",
        }
    }

    pub(crate) const fn index(self) -> usize {
        match self {
            Source::Orders => 0,
            Source::Payments => 1,
            Source::FxRates => 2,
            Source::Settlements => 3,
        }
    }
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The error of parsing a source name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown source {0:?} (expected orders, payments, fx_rates or settlements)")]
pub struct UnknownSource(pub String);

impl std::str::FromStr for Source {
    type Err = UnknownSource;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Source::ALL
            .into_iter()
            .find(|src| src.as_str() == s)
            .ok_or_else(|| UnknownSource(s.to_string()))
    }
}
