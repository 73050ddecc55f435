//! Shared by the client tests: rows for an `(id long, name string)` table.

use std::sync::Arc;

use arrow_array::{Int64Array, RecordBatch, StringArray};

/// Rows `(id, "n<id>")` of `schema`.
pub fn batch(schema: arrow_schema::SchemaRef, ids: Vec<i64>) -> RecordBatch {
    let names: Vec<String> = ids.iter().map(|i| format!("n{i}")).collect();
    RecordBatch::try_new(
        schema,
        vec![
            Arc::new(Int64Array::from(ids)),
            Arc::new(StringArray::from(names)),
        ],
    )
    .expect("batch")
}
