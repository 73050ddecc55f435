//! What a publish would change: `main..audit` (or any two refs) of every bronze, silver and gold
//! table — snapshots ahead, rows added and removed (from the snapshot summaries) — and, for the
//! gold marts, the values that changed, key by key (old → new). The question a reviewer asks
//! before a publish.

use std::collections::BTreeMap;

use arrow::util::display::array_value_to_string;
use arrow_array::RecordBatch;
use lake::{At, Catalog, Table};
use serde::Serialize;

use crate::grade::layer_tables;
use crate::{Result, ShackError, gold, thousands};

/// One table's difference between two refs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TableDiff {
    pub table: String,
    pub from: Option<i64>,
    pub to: Option<i64>,
    /// Snapshots `to` has after `from` (`None` when `from` is not an ancestor of `to`).
    pub ahead: Option<u64>,
    /// Snapshots `from` has after `to` when `to` is an ancestor of `from` or empty (`main`
    /// after a rollback, against the publish it abandoned): shown as a negative `ahead`.
    #[serde(default)]
    pub behind: Option<u64>,
    pub rows_added: u64,
    pub rows_removed: u64,
}

/// A gold mart's value that differs, by key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ValueChange {
    pub table: String,
    /// `2026-08-16 cad`.
    pub key: String,
    pub column: String,
    /// `None`: the key is not there.
    pub old: Option<String>,
    pub new: Option<String>,
}

/// The snapshots from `head` back to (not including) `stop`, or to the first: how many, and the
/// rows they added and deleted.
fn walk(table: &Table, name: &str, head: i64, stop: Option<i64>) -> Result<(u64, u64, u64)> {
    let (mut n, mut added, mut deleted) = (0, 0, 0);
    for s in table
        .ancestry(head)
        .map_err(|e| ShackError::lake(name, e))?
        .into_iter()
        .take_while(|s| Some(s.snapshot_id) != stop)
    {
        n += 1;
        added += summary_count(table, s.snapshot_id, "added-records")?;
        deleted += summary_count(table, s.snapshot_id, "deleted-records")?;
    }
    Ok((n, added, deleted))
}

/// `from..to` over the lake.
#[derive(Clone, Debug, Serialize)]
pub struct LakeDiff {
    pub from: String,
    pub to: String,
    pub tables: Vec<TableDiff>,
    pub changes: Vec<ValueChange>,
}

impl LakeDiff {
    /// Aligned lines: each table that differs, then the marts' changed values (at most `limit`).
    pub fn render(&self, limit: usize) -> String {
        let mut out = format!("{}..{}\n", self.from, self.to);
        let moved: Vec<&TableDiff> = self.tables.iter().filter(|t| t.from != t.to).collect();
        if moved.is_empty() {
            out.push_str("  no table differs\n");
            return out;
        }
        let w = moved.iter().map(|t| t.table.len()).max().unwrap_or(5);
        out.push_str(&format!(
            "  {:<w$}  {:>5}  {:>10}  {:>10}\n",
            "table", "ahead", "added", "removed"
        ));
        for t in moved {
            let ahead = match (t.ahead, t.behind) {
                (Some(n), _) => n.to_string(),
                (None, Some(n)) => format!("-{n}"),
                (None, None) => "forked".into(),
            };
            out.push_str(&format!(
                "  {:<w$}  {:>5}  {:>10}  {:>10}\n",
                t.table,
                ahead,
                thousands(t.rows_added),
                thousands(t.rows_removed)
            ));
        }
        if !self.changes.is_empty() {
            out.push_str(&format!("  {} changed values:\n", self.changes.len()));
            for c in self.changes.iter().take(limit) {
                out.push_str(&format!(
                    "    {}  {}  {}: {} -> {}\n",
                    c.table,
                    c.key,
                    c.column,
                    c.old.as_deref().unwrap_or("(none)"),
                    c.new.as_deref().unwrap_or("(none)")
                ));
            }
            if self.changes.len() > limit {
                out.push_str(&format!(
                    "    … and {} more (--format json lists them all)\n",
                    self.changes.len() - limit
                ));
            }
        }
        out
    }
}

/// The marts compared value by value: their key columns and value columns.
const MARTS: [(&str, &[&str], &[&str]); 2] = [
    (
        gold::MART_DAILY_CASH,
        &["processor_date", "currency"],
        &[
            "captured_minor",
            "refunded_minor",
            "net_minor",
            "net_cad_minor",
        ],
    ),
    (
        gold::MART_ORDER_REVENUE,
        &["order_date", "ship_region"],
        &[
            "paid_orders",
            "gross_cad_minor",
            "refunds_cad_minor",
            "net_cad_minor",
        ],
    ),
];

fn summary_count(table: &Table, id: i64, key: &str) -> Result<u64> {
    Ok(table
        .snapshot(id)
        .map_err(|e| ShackError::lake(table.name().to_string(), e))?
        .summary
        .get(key)
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(0))
}

/// key → column → value, of a mart at a snapshot.
async fn mart_values(
    table: &Table,
    at: Option<i64>,
    keys: &[&str],
    values: &[&str],
) -> Result<BTreeMap<String, BTreeMap<String, String>>> {
    let mut out = BTreeMap::new();
    let Some(id) = at else {
        return Ok(out);
    };
    let name = table.name().to_string();
    let batches: Vec<RecordBatch> = table
        .scan(&At::Snapshot(id))
        .await
        .map_err(|e| ShackError::lake(&name, e))?;
    let cell = |b: &RecordBatch, col: &str, i: usize| -> Result<String> {
        let c = b.column_by_name(col).ok_or_else(|| ShackError::BadTable {
            table: name.clone(),
            detail: format!("no column {col}"),
        })?;
        if c.is_null(i) {
            return Ok("null".into());
        }
        array_value_to_string(c, i).map_err(|e| ShackError::BadTable {
            table: name.clone(),
            detail: format!("column {col}: {e}"),
        })
    };
    for b in &batches {
        for i in 0..b.num_rows() {
            let key = keys
                .iter()
                .map(|k| cell(b, k, i))
                .collect::<Result<Vec<_>>>()?
                .join(" ");
            let mut row = BTreeMap::new();
            for v in values {
                row.insert(v.to_string(), cell(b, v, i)?);
            }
            out.insert(key, row);
        }
    }
    Ok(out)
}

/// The lake's own branches: a diff may name them before any table holds them.
const LAKE_BRANCHES: [&str; 2] = ["main", crate::bronze::AUDIT_BRANCH];

/// `from..to` of every bronze, silver and gold table in the newest catalog version. A ref
/// other than `main` and `audit` that no table holds is [`ShackError::NoSuchRef`]; a table
/// that lacks a ref others hold (made after that publish) counts as empty at it.
pub async fn diff(catalog: &Catalog, from: &str, to: &str) -> Result<LakeDiff> {
    let layers = layer_tables(catalog).await?;
    // `main` before the first publish and `audit` before the first tap are held by no table and
    // mean "nothing yet"; any other name no table holds is a typo, not an empty table (checked
    // before any mart is read).
    for name in [from, to] {
        if !layers.is_empty()
            && !LAKE_BRANCHES.contains(&name)
            && layers.iter().all(|(_, _, t)| t.head(name).is_none())
        {
            return Err(ShackError::NoSuchRef {
                name: name.to_string(),
            });
        }
    }
    let mut tables = Vec::new();
    let mut changes = Vec::new();
    for (name, _, table) in layers {
        let name = &name;
        let (a, b) = (table.head(from), table.head(to));
        let mut d = TableDiff {
            table: name.clone(),
            from: a,
            to: b,
            ahead: Some(0),
            behind: None,
            rows_added: 0,
            rows_removed: 0,
        };
        let behind = a.filter(|a| b.is_none_or(|b| table.is_ancestor(b, *a)));
        if a != b {
            match (
                b,
                a.is_none_or(|a| b.is_some_and(|b| table.is_ancestor(a, b))),
            ) {
                (Some(b), true) => {
                    let (n, added, removed) = walk(&table, name, b, a)?;
                    d.ahead = Some(n);
                    (d.rows_added, d.rows_removed) = (added, removed);
                }
                _ => {
                    d.ahead = None;
                    if let Some(from) = behind {
                        // `to` is where `from` came from: walk back, undoing each snapshot.
                        let (n, added, removed) = walk(&table, name, from, b)?;
                        d.behind = Some(n);
                        (d.rows_added, d.rows_removed) = (removed, added);
                    } else {
                        let count = |id: Option<i64>| match id {
                            Some(id) => summary_count(&table, id, "total-records"),
                            None => Ok(0),
                        };
                        let (na, nb) = (count(a)?, count(b)?);
                        d.rows_added = nb.saturating_sub(na);
                        d.rows_removed = na.saturating_sub(nb);
                    }
                }
            }
            if let Some((_, keys, values)) = MARTS.iter().find(|(m, _, _)| m == name) {
                let old = mart_values(&table, a, keys, values).await?;
                let new = mart_values(&table, b, keys, values).await?;
                let all: std::collections::BTreeSet<&String> =
                    old.keys().chain(new.keys()).collect();
                for key in all {
                    for v in *values {
                        let o = old.get(key).and_then(|r| r.get(*v)).cloned();
                        let n = new.get(key).and_then(|r| r.get(*v)).cloned();
                        if o != n {
                            changes.push(ValueChange {
                                table: name.clone(),
                                key: key.clone(),
                                column: v.to_string(),
                                old: o,
                                new: n,
                            });
                        }
                    }
                }
            }
        }
        tables.push(d);
    }
    Ok(LakeDiff {
        from: from.to_string(),
        to: to.to_string(),
        tables,
        changes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn render_lists_moved_tables_and_limits_changes() {
        let d = LakeDiff {
            from: "main".into(),
            to: "audit".into(),
            tables: vec![
                TableDiff {
                    table: "gold.mart_daily_cash".into(),
                    from: Some(1),
                    to: Some(2),
                    ahead: Some(1),
                    behind: None,
                    rows_added: 34,
                    rows_removed: 33,
                },
                TableDiff {
                    table: "bronze.fx_rates".into(),
                    from: Some(5),
                    to: Some(5),
                    ahead: Some(0),
                    behind: None,
                    rows_added: 0,
                    rows_removed: 0,
                },
                TableDiff {
                    table: "silver.orders".into(),
                    from: Some(9),
                    to: Some(7),
                    ahead: None,
                    behind: Some(2),
                    rows_added: 0,
                    rows_removed: 12,
                },
            ],
            changes: vec![
                ValueChange {
                    table: "gold.mart_daily_cash".into(),
                    key: "2026-08-16 cad".into(),
                    column: "net_minor".into(),
                    old: Some("100".into()),
                    new: Some("120".into()),
                },
                ValueChange {
                    table: "gold.mart_daily_cash".into(),
                    key: "2026-08-17 cad".into(),
                    column: "net_minor".into(),
                    old: None,
                    new: Some("7".into()),
                },
            ],
        };
        let r = d.render(1);
        assert!(r.starts_with("main..audit\n"), "{r}");
        assert!(
            r.contains("gold.mart_daily_cash      1          34          33"),
            "{r}"
        );
        assert!(
            r.contains("silver.orders            -2           0          12"),
            "{r}"
        );
        assert!(
            !r.contains("bronze.fx_rates"),
            "unmoved tables are left out: {r}"
        );
        assert!(r.contains("2026-08-16 cad  net_minor: 100 -> 120"), "{r}");
        assert!(r.contains("… and 1 more"), "{r}");
    }
}
