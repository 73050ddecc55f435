//! Bronze, the sap tank: what its tables are called and what their rows hold.
//!
//! One table per source, `bronze.orders`, `bronze.payments`, `bronze.fx_rates` and
//! `bronze.settlements`, partitioned by the day the line arrived. One row is one landing line,
//! never parsed:
//!
//! | column          | type                  | what it holds                                                    |
//! |-----------------|-----------------------|------------------------------------------------------------------|
//! | `_raw`          | string, required      | the line as text, without its `\n` (a `\r` before it is kept)     |
//! | `_raw_bytes`    | binary, optional      | the line's exact bytes, only when they are not valid UTF-8       |
//! | `_landing_file` | string, required      | the landing file, relative to `landing/` (`payments/2026-08-17/…`) |
//! | `_line`         | long, required        | the line number in that file, from 1                             |
//! | `_file_sha256`  | string, required      | the hex sha256 of the whole landing file                         |
//! | `_arrived_at`   | timestamptz, required | when the landing file arrived (from its name)                    |
//!
//! A line is the bytes between two `\n`; the last line of a file that does not end in `\n` (a
//! crashed receiver's truncated line) is a line too, and so is an empty line between two `\n`.
//! Non-UTF-8 bytes: `_raw` holds the lossy decoding (each invalid sequence becomes U+FFFD) so that
//! every parser and SQL query sees a string, and `_raw_bytes` holds the bytes exactly, so that
//! nothing is lost. `_raw_bytes is not null` is the flag that a line was not UTF-8.
//!
//! Which snapshot made a row visible (the batch) is not a column: it is the Iceberg snapshot that
//! added the row's data file, known only at commit. Incremental reads return it with the rows
//! (`lake::Table::read_incremental`), and `bronze.landing_files` records it per file.
//!
//! `bronze.landing_files` is the record of every landing file the tap has looked at, committed in
//! the same catalog commit as the lines, so it can never disagree with them:
//!
//! | column            | type                  | what it holds                                                  |
//! |-------------------|-----------------------|----------------------------------------------------------------|
//! | `file`            | string, required      | the landing file, relative to `landing/`                         |
//! | `source`          | string, required      | `orders`, `payments`, `fx_rates` or `settlements`                |
//! | `status`          | string, required      | `tapped` (its lines are in bronze), `duplicate` (a re-send), `changed` (rewritten in place) or `verified` (hashed again, unchanged) |
//! | `sha256`          | string, required      | the hex sha256 of its bytes: the file's identity                 |
//! | `bytes`           | long, required        | its size                                                         |
//! | `lines`           | long, required        | how many lines it holds (for a duplicate: lines not taken again) |
//! | `arrived_at`      | timestamptz, required | when it arrived (from its name)                                  |
//! | `original_file`   | string, optional      | for a duplicate (or a changed file), the tapped file with the same bytes |
//! | `snapshot_id`     | long, optional        | for a file whose lines this row took, the `bronze.<source>` snapshot that holds them |
//! | `sequence_number` | long, optional        | that snapshot's sequence number: the batch                      |
//! | `tap_id`          | string, required      | the tap run that recorded it                                     |
//! | `tapped_at`       | timestamptz, required | when that run started                                            |
//! | `through`         | timestamptz, required | that run's `--through`                                           |
//!
//! A file name has more than one row when the file was rewritten in place after it was
//! recorded: each later version is a `changed` row with its own `sha256`. A `verified` row (the
//! same `sha256`, no lines taken) says a tap hashed a file again and found its recorded bytes: a
//! file recorded within a minute of its last write is hashed again until a tap records it so. Its new lines are in
//! `bronze.<source>` next to the old ones (the same `_landing_file`, another `_file_sha256`), in
//! the snapshot the row names; when the new bytes are those of a file already tapped, the row
//! names that file in `original_file` instead and no lines are taken again. The row with the
//! latest `tapped_at` says what the file held when the tap last looked.

use std::sync::Arc;

use arrow_schema::{DataType, Field, Schema, SchemaRef, TimeUnit};
use lake::PartitionField;
use sugarbush::Source;

/// The namespace of the bronze tables.
pub const NAMESPACE: &str = "bronze";

/// The table that records every landing file the tap has looked at.
pub const LANDING_FILES: &str = "bronze.landing_files";

/// The branch every run writes; `main` moves only by publish.
pub const AUDIT_BRANCH: &str = "audit";

/// `status` of a landing file whose lines are in bronze.
pub const STATUS_TAPPED: &str = "tapped";

/// `status` of a landing file with the same bytes as one already tapped.
pub const STATUS_DUPLICATE: &str = "duplicate";

/// `status` of a new version of a recorded landing file: the same name, rewritten in place with
/// other bytes after the tap recorded it.
pub const STATUS_CHANGED: &str = "changed";

/// `status` of a recorded landing file hashed again and found unchanged: it had been recorded
/// within [`crate::tap::MTIME_SLACK`] of its last write, so every tap would hash it again; this
/// row, taken when its write is safely older than the run, settles it (see `crate::tap`).
pub const STATUS_VERIFIED: &str = "verified";

/// Snapshot summary and catalog properties a tap writes.
pub mod props {
    /// The tap run's id (a UUID v7).
    pub const TAP_ID: &str = "sugarshack.tap.id";
    /// The run's `--through`, RFC 3339.
    pub const THROUGH: &str = "sugarshack.tap.through";
    /// Landing files whose lines this snapshot added.
    pub const FILES: &str = "sugarshack.tap.files";
    /// Lines this snapshot added.
    pub const ROWS: &str = "sugarshack.tap.rows";
}

/// The bronze table of a source: `bronze.<source>`.
pub fn table_name(source: Source) -> String {
    format!("{NAMESPACE}.{}", source.as_str())
}

/// Every bronze table a tap writes: the four sources, then `bronze.landing_files`.
pub fn table_names() -> Vec<String> {
    let mut v: Vec<String> = Source::ALL.into_iter().map(table_name).collect();
    v.push(LANDING_FILES.to_string());
    v
}

pub(crate) fn timestamp_type() -> DataType {
    DataType::Timestamp(TimeUnit::Microsecond, Some("+00:00".into()))
}

/// The schema of `bronze.<source>` (the same for every source).
pub fn source_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("_raw", DataType::Utf8, false),
        Field::new("_raw_bytes", DataType::LargeBinary, true),
        Field::new("_landing_file", DataType::Utf8, false),
        Field::new("_line", DataType::Int64, false),
        Field::new("_file_sha256", DataType::Utf8, false),
        Field::new("_arrived_at", timestamp_type(), false),
    ]))
}

/// How `bronze.<source>` is partitioned: by the day its lines arrived.
pub fn source_partitioning() -> Vec<PartitionField> {
    vec![PartitionField::day("_arrived_at")]
}

/// The schema of `bronze.landing_files`.
pub fn landing_files_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("file", DataType::Utf8, false),
        Field::new("source", DataType::Utf8, false),
        Field::new("status", DataType::Utf8, false),
        Field::new("sha256", DataType::Utf8, false),
        Field::new("bytes", DataType::Int64, false),
        Field::new("lines", DataType::Int64, false),
        Field::new("arrived_at", timestamp_type(), false),
        Field::new("original_file", DataType::Utf8, true),
        Field::new("snapshot_id", DataType::Int64, true),
        Field::new("sequence_number", DataType::Int64, true),
        Field::new("tap_id", DataType::Utf8, false),
        Field::new("tapped_at", timestamp_type(), false),
        Field::new("through", timestamp_type(), false),
    ]))
}
