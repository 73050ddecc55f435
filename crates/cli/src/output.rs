//! Printing: aligned tables for people, JSON (an array of row objects) or CSV for machines.

use std::io::Write;

use lake::arrow::array::RecordBatch;

/// How a command that prints a report (not rows) prints it: for people, or JSON. Such a
/// command has no CSV form, so `--format csv` is refused by the parser rather than ignored.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Report {
    Table,
    Json,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Table,
    Json,
    Csv,
}

pub fn ms_to_utc(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.format("%Y-%m-%d %H:%M:%S%.3f UTC").to_string())
        .unwrap_or_else(|| ms.to_string())
}

pub fn print_batches(batches: &[RecordBatch], format: Format) -> anyhow::Result<()> {
    crate::progress::quiet();
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    match format {
        Format::Table => {
            let text = lake::arrow::util::pretty::pretty_format_batches(batches)?;
            writeln!(out, "{text}")?;
        }
        Format::Json => {
            let mut w = lake::arrow::json::ArrayWriter::new(Vec::new());
            let refs: Vec<&RecordBatch> = batches.iter().collect();
            w.write_batches(&refs)?;
            w.finish()?;
            let bytes = w.into_inner();
            if bytes.is_empty() {
                writeln!(out, "[]")?;
            } else {
                out.write_all(&bytes)?;
                writeln!(out)?;
            }
        }
        Format::Csv => {
            let mut w = lake::arrow::csv::WriterBuilder::new()
                .with_header(true)
                .build(&mut out);
            for b in batches {
                w.write(b)?;
            }
        }
    }
    Ok(())
}

/// Print rows given as JSON objects; `columns` in order (others appear only in JSON output).
pub fn print_json_rows(
    rows: &[serde_json::Value],
    format: Format,
    columns: &[&str],
) -> anyhow::Result<()> {
    crate::progress::quiet();
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    match format {
        Format::Json => {
            serde_json::to_writer_pretty(&mut out, rows)?;
            writeln!(out)?;
        }
        Format::Table | Format::Csv => {
            if rows.is_empty() {
                writeln!(out, "(none)")?;
                return Ok(());
            }
            let cols: Vec<String> = columns.iter().map(|c| c.to_string()).collect();
            let cell = |v: &serde_json::Value| match v {
                serde_json::Value::String(s) => s.clone(),
                serde_json::Value::Null => String::new(),
                other => other.to_string(),
            };
            let grid: Vec<Vec<String>> = rows
                .iter()
                .map(|r| cols.iter().map(|c| cell(&r[c.as_str()])).collect())
                .collect();
            if format == Format::Csv {
                writeln!(out, "{}", cols.join(","))?;
                for r in grid {
                    let escaped: Vec<String> = r
                        .iter()
                        .map(|v| {
                            if v.contains([',', '"', '\n']) {
                                format!("\"{}\"", v.replace('"', "\"\""))
                            } else {
                                v.clone()
                            }
                        })
                        .collect();
                    writeln!(out, "{}", escaped.join(","))?;
                }
                return Ok(());
            }
            let widths: Vec<usize> = cols
                .iter()
                .enumerate()
                .map(|(i, c)| {
                    grid.iter()
                        .map(|r| r[i].chars().count())
                        .chain([c.len()])
                        .max()
                        .unwrap_or(0)
                })
                .collect();
            let numeric: Vec<bool> = cols
                .iter()
                .map(|c| {
                    rows.iter()
                        .all(|r| r[c.as_str()].is_number() || r[c.as_str()].is_null())
                })
                .collect();
            let line = |cells: Vec<String>| -> String {
                cells
                    .iter()
                    .enumerate()
                    .map(|(i, v)| {
                        if numeric[i] {
                            format!("{v:>w$}", w = widths[i])
                        } else {
                            format!("{v:<w$}", w = widths[i])
                        }
                    })
                    .collect::<Vec<_>>()
                    .join("  ")
                    .trim_end()
                    .to_string()
            };
            writeln!(out, "{}", line(cols.clone()))?;
            for r in grid {
                writeln!(out, "{}", line(r))?;
            }
        }
    }
    Ok(())
}
