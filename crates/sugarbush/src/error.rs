use std::path::PathBuf;

/// Everything that can go wrong generating, listing or reading a season. Every variant names
/// the path (or the value) it is about.
#[derive(Debug, thiserror::Error)]
pub enum SugarbushError {
    /// A file system operation failed.
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// The landing zone already holds files and `force` was not given.
    #[error(
        "landing zone {path} is not empty; refusing to overwrite it (pass --force to replace landing/ and truth/)"
    )]
    LandingNotEmpty { path: PathBuf },

    /// A file in the landing zone whose name does not carry an arrival stamp and a source.
    #[error(
        "{path}: not a landing file name (expected <yyyymmddThhmmssZ>-<source>-<name>.<ext> in a <yyyy-mm-dd> folder)"
    )]
    BadLandingName { path: PathBuf },

    /// The season's scale is outside 1..=MAX_SCALE.
    #[error("scale {scale} is out of range (1..={max})")]
    BadScale { scale: u32, max: u32 },

    /// A truth file that does not read as this crate wrote it.
    #[error("{path}:{line}: {message}")]
    BadTruth {
        path: PathBuf,
        line: u64,
        message: String,
    },

    /// A JSON truth file that does not parse.
    #[error("{path}: {source}")]
    Json {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },

    /// The simulation left work undone: a bug in this crate, never bad input.
    #[error("internal error: {0}")]
    Internal(String),
}

pub type Result<T, E = SugarbushError> = std::result::Result<T, E>;

pub(crate) trait IoContext<T> {
    fn at(self, path: &std::path::Path) -> Result<T>;
}

impl<T> IoContext<T> for std::io::Result<T> {
    fn at(self, path: &std::path::Path) -> Result<T> {
        self.map_err(|source| SugarbushError::Io {
            path: path.to_path_buf(),
            source,
        })
    }
}
