//! The one way this crate reads the lake: the publish log, and tables at a publish's tag.
//!
//! A [`Published`] can only be made from a publish-log record that is a publish (or a rollback,
//! which is a publish of earlier snapshots): there is no constructor from a branch name, a
//! snapshot id or a string. [`AtPublish::open`] is the only place a table is read, and it reads
//! every table at that publish's tag `publish-N` — the tag the publish itself wrote on exactly
//! the snapshots the audits graded. So no page can show a number from the `audit` branch, nor
//! from a `main` that moved between two reads of one page: a page reads one publish, whole.
//!
//! The SQL a page runs is the SQL it shows: [`AtPublish::query`] returns the rows together
//! with the `sugarshack query --publish N "…"` command that reads the same rows.

use arrow::compute::cast;
use arrow_array::{Array, Date32Array, Int64Array, RecordBatch, StringArray};
use arrow_schema::DataType;
use chrono::{DateTime, NaiveDate, Utc};
use lake::{At, Catalog, SqlContext};
use shack::PublishRecord;

use crate::html::query_command;
use crate::{DashboardError, Result};

/// A publish from the publish log (status `published` or `rolled back`).
#[derive(Clone, Debug, PartialEq)]
pub struct Published {
    record: PublishRecord,
    number: u64,
}

impl Published {
    /// `Some` only for a record that is a publish.
    fn from_record(record: &PublishRecord) -> Option<Published> {
        record.publish_number.map(|number| Published {
            record: record.clone(),
            number,
        })
    }

    /// `n` of tag `publish-n`.
    pub fn number(&self) -> u64 {
        self.number
    }

    /// The log record.
    pub fn record(&self) -> &PublishRecord {
        &self.record
    }

    /// What the build is as of.
    pub fn as_of(&self) -> DateTime<Utc> {
        self.record.as_of
    }

    /// The tag the publish left on every table.
    fn tag(&self) -> String {
        shack::publish::tag(self.number)
    }
}

/// The publish log, read once per page (oldest first).
#[derive(Clone, Debug, Default)]
pub struct Log {
    records: Vec<PublishRecord>,
}

impl Log {
    /// Read `ops.publish_log` (an empty log when nothing was ever graded).
    pub async fn read(lake: &Catalog) -> Result<Log> {
        Ok(Log {
            records: shack::publishes(lake).await?,
        })
    }

    /// A log of these records (tests).
    pub fn of(records: Vec<PublishRecord>) -> Log {
        let mut records = records;
        records.sort_by_key(|r| r.seq);
        Log { records }
    }

    /// Every record, oldest first.
    pub fn records(&self) -> &[PublishRecord] {
        &self.records
    }

    /// Every publish, oldest first.
    pub fn publishes(&self) -> Vec<Published> {
        self.records
            .iter()
            .filter_map(Published::from_record)
            .collect()
    }

    /// The newest publish: what `main` holds.
    pub fn latest(&self) -> Option<Published> {
        self.records.iter().rev().find_map(Published::from_record)
    }

    /// Publish `n`.
    pub fn number(&self, n: u64) -> Option<Published> {
        self.records
            .iter()
            .filter(|r| r.publish_number == Some(n))
            .find_map(Published::from_record)
    }

    /// What `sugarshack query --as-of T` reads: the publish with the latest as-of at or before
    /// `t` (of several with that as-of, the last recorded) — `shack::publish_at_or_before`'s rule.
    pub fn at_or_before(&self, t: DateTime<Utc>) -> Option<Published> {
        self.records
            .iter()
            .filter(|r| r.is_published() && r.as_of <= t)
            .max_by_key(|r| (r.as_of, r.seq))
            .and_then(Published::from_record)
    }

    /// The runs recorded after `p` and before the next publish (all blocked: a publish would
    /// have been the next one), at or before `until` when given.
    pub fn blocked_after(&self, p: &Published, until: Option<DateTime<Utc>>) -> Vec<PublishRecord> {
        self.records
            .iter()
            .filter(|r| r.seq > p.record.seq)
            .take_while(|r| !r.is_published())
            .filter(|r| until.is_none_or(|t| r.as_of <= t))
            .cloned()
            .collect()
    }

    /// The records up to and including `p`'s, plus the blocked runs after it.
    pub fn through(&self, p: &Published, until: Option<DateTime<Utc>>) -> Vec<PublishRecord> {
        let mut out: Vec<PublishRecord> = self
            .records
            .iter()
            .filter(|r| r.seq <= p.record.seq)
            .cloned()
            .collect();
        out.extend(self.blocked_after(p, until));
        out
    }

    /// `the publishes are 1 to 3` / `nothing has been published yet`.
    pub fn range(&self) -> String {
        let numbers: Vec<u64> = self.publishes().iter().map(Published::number).collect();
        match (numbers.first(), numbers.last()) {
            (Some(a), Some(b)) if a == b => format!("the only publish is {a}"),
            (Some(a), Some(b)) => format!("the publishes are {a} to {b}"),
            _ => "nothing has been published yet".to_string(),
        }
    }
}

/// Every table of the lake at one publish's tag: a page's only source of numbers.
pub struct AtPublish {
    sql: SqlContext,
    publish: Published,
}

/// Rows a query gave, with the command that gives them again.
pub struct Rows {
    pub batches: Vec<RecordBatch>,
    /// `sugarshack query --publish N "…"`.
    pub command: String,
}

impl AtPublish {
    /// Every table as publish `p` left it (its tag `publish-N`; tables created after it are
    /// not there).
    pub async fn open(lake: &Catalog, p: &Published) -> Result<AtPublish> {
        let sql = lake
            .sql(None, &At::reference(&p.tag()))
            .await
            .map_err(|e| DashboardError::Lake {
                what: format!("the tables at publish {}", p.number()),
                source: e,
            })?;
        Ok(AtPublish {
            sql,
            publish: p.clone(),
        })
    }

    /// The publish read.
    pub fn publish(&self) -> &Published {
        &self.publish
    }

    /// Run `sql` at the publish.
    pub async fn query(&self, sql: &str) -> Result<Rows> {
        let batches = self
            .sql
            .query(sql)
            .await
            .map_err(|e| DashboardError::Lake {
                what: format!("{sql:?} at publish {}", self.publish.number()),
                source: e,
            })?;
        Ok(Rows {
            batches,
            command: query_command(self.publish.number(), sql),
        })
    }

    /// Run `sql` that gives one integer (or none: an empty table's sum).
    pub async fn scalar(&self, sql: &str) -> Result<(Option<i64>, String)> {
        let rows = self.query(sql).await?;
        let v = ints(&rows.batches, 0)?.into_iter().next().flatten();
        Ok((v, rows.command))
    }
}

fn column(b: &RecordBatch, i: usize, ty: &DataType) -> Result<arrow_array::ArrayRef> {
    if i >= b.num_columns() {
        return Err(DashboardError::Data(format!(
            "a query gave {} column(s), not {}",
            b.num_columns(),
            i + 1
        )));
    }
    cast(b.column(i), ty).map_err(|e| DashboardError::Data(format!("column {i}: {e}")))
}

/// Column `i` of every batch as integers.
pub fn ints(batches: &[RecordBatch], i: usize) -> Result<Vec<Option<i64>>> {
    let mut out = Vec::new();
    for b in batches {
        let c = column(b, i, &DataType::Int64)?;
        let a = c
            .as_any()
            .downcast_ref::<Int64Array>()
            .ok_or_else(|| DashboardError::Data(format!("column {i} is not an integer")))?;
        out.extend((0..a.len()).map(|r| (!a.is_null(r)).then(|| a.value(r))));
    }
    Ok(out)
}

/// Column `i` of every batch as days.
pub fn dates(batches: &[RecordBatch], i: usize) -> Result<Vec<Option<NaiveDate>>> {
    let mut out = Vec::new();
    for b in batches {
        let c = column(b, i, &DataType::Date32)?;
        let a = c
            .as_any()
            .downcast_ref::<Date32Array>()
            .ok_or_else(|| DashboardError::Data(format!("column {i} is not a date")))?;
        out.extend((0..a.len()).map(|r| {
            if a.is_null(r) {
                None
            } else {
                a.value_as_date(r)
            }
        }));
    }
    Ok(out)
}

/// Column `i` of every batch as text.
pub fn strings(batches: &[RecordBatch], i: usize) -> Result<Vec<Option<String>>> {
    let mut out = Vec::new();
    for b in batches {
        let c = column(b, i, &DataType::Utf8)?;
        let a = c
            .as_any()
            .downcast_ref::<StringArray>()
            .ok_or_else(|| DashboardError::Data(format!("column {i} is not text")))?;
        out.extend((0..a.len()).map(|r| (!a.is_null(r)).then(|| a.value(r).to_string())));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;
    use std::collections::BTreeMap;

    fn rec(seq: u64, n: Option<u64>, day: u32, hour: u32) -> PublishRecord {
        PublishRecord {
            seq,
            publish_number: n,
            as_of: Utc
                .with_ymd_and_hms(2026, 8, day, hour, 0, 0)
                .single()
                .expect("t"),
            audits: Vec::new(),
            snapshots: BTreeMap::new(),
            graded_version: seq,
            base_version: seq,
            recorded_at_ms: 0,
        }
    }

    #[test]
    fn the_log_finds_publishes_and_the_blocked_runs_after_them() {
        let log = Log::of(vec![
            rec(1, Some(1), 16, 23),
            rec(2, None, 17, 12),
            rec(3, Some(2), 17, 12),
            rec(4, None, 18, 12),
            rec(5, None, 19, 12),
        ]);
        assert_eq!(log.latest().map(|p| p.number()), Some(2));
        assert_eq!(log.number(1).map(|p| p.record().seq), Some(1));
        assert!(log.number(3).is_none());
        let p1 = log.number(1).expect("1");
        assert_eq!(
            log.blocked_after(&p1, None)
                .iter()
                .map(|r| r.seq)
                .collect::<Vec<_>>(),
            vec![2]
        );
        let p2 = log.number(2).expect("2");
        assert_eq!(log.blocked_after(&p2, None).len(), 2);
        let t = Utc
            .with_ymd_and_hms(2026, 8, 18, 23, 0, 0)
            .single()
            .expect("t");
        assert_eq!(log.blocked_after(&p2, Some(t)).len(), 1);
        assert_eq!(log.through(&p1, None).len(), 2);
        assert_eq!(log.at_or_before(t).map(|p| p.number()), Some(2));
        let early = Utc
            .with_ymd_and_hms(2026, 8, 17, 11, 0, 0)
            .single()
            .expect("t");
        assert_eq!(log.at_or_before(early).map(|p| p.number()), Some(1));
        assert_eq!(log.range(), "the publishes are 1 to 2");
        assert_eq!(Log::default().range(), "nothing has been published yet");
        // A blocked record is never a publish.
        assert!(Published::from_record(&rec(9, None, 20, 12)).is_none());
    }
}
