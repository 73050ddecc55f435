//! Shared helpers for the lake's tests.
#![allow(dead_code)]

use std::sync::Arc;

use arrow_array::{Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};

pub fn schema() -> Schema {
    Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("day", DataType::Utf8, false),
        Field::new("amount_minor", DataType::Int64, false),
    ])
}

/// Rows `ids`, each on `day`, amount = id * 100.
pub fn batch(ids: std::ops::Range<i64>, day: &str) -> RecordBatch {
    let n = ids.clone().count();
    RecordBatch::try_new(
        Arc::new(schema()),
        vec![
            Arc::new(Int64Array::from_iter_values(ids.clone())),
            Arc::new(StringArray::from_iter_values(std::iter::repeat_n(day, n))),
            Arc::new(Int64Array::from_iter_values(ids.map(|i| i * 100))),
        ],
    )
    .expect("test batch")
}

/// The sorted ids in some batches.
pub fn ids<'a>(batches: impl IntoIterator<Item = &'a RecordBatch>) -> Vec<i64> {
    let mut out = Vec::new();
    for b in batches {
        let col = b
            .column_by_name("id")
            .expect("id column")
            .as_any()
            .downcast_ref::<Int64Array>()
            .expect("int64 ids");
        out.extend(col.values().iter().copied());
    }
    out.sort_unstable();
    out
}

/// The manifest list of `t`'s current snapshot (the table has one).
pub async fn head_manifest_list(t: &lake::Table) -> iceberg::spec::ManifestList {
    let head = t.iceberg().metadata().current_snapshot().unwrap().clone();
    t.iceberg()
        .manifest_list_reader(&head)
        .load()
        .await
        .unwrap()
}
