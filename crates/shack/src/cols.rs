//! A record batch built column by column, each column knowing its field: the one way silver's
//! and gold's row types become Arrow batches (and so the schemas their tables are created with).

use std::sync::Arc;

use arrow_array::ArrayRef;
use arrow_array::RecordBatch;
use arrow_array::builder::{
    BooleanBuilder, Date32Builder, Int64Builder, LargeBinaryBuilder, StringBuilder,
    TimestampMicrosecondBuilder,
};
use arrow_schema::{Field, Schema};

use crate::bronze;
use crate::error::{Result, ShackError};

/// Columns in order, with their fields.
pub(crate) struct Cols {
    fields: Vec<Field>,
    arrays: Vec<ArrayRef>,
}

impl Cols {
    pub(crate) fn new() -> Cols {
        Cols {
            fields: Vec::new(),
            arrays: Vec::new(),
        }
    }

    fn push(mut self, name: &str, nullable: bool, array: ArrayRef) -> Cols {
        self.fields
            .push(Field::new(name, array.data_type().clone(), nullable));
        self.arrays.push(array);
        self
    }

    pub(crate) fn str<'a>(self, name: &str, values: impl Iterator<Item = &'a str>) -> Cols {
        let mut b = StringBuilder::new();
        values.for_each(|v| b.append_value(v));
        self.push(name, false, Arc::new(b.finish()))
    }

    pub(crate) fn opt_str<'a>(
        self,
        name: &str,
        values: impl Iterator<Item = Option<&'a str>>,
    ) -> Cols {
        let mut b = StringBuilder::new();
        values.for_each(|v| b.append_option(v));
        self.push(name, true, Arc::new(b.finish()))
    }

    pub(crate) fn i64(self, name: &str, values: impl Iterator<Item = i64>) -> Cols {
        let mut b = Int64Builder::new();
        values.for_each(|v| b.append_value(v));
        self.push(name, false, Arc::new(b.finish()))
    }

    pub(crate) fn opt_i64(self, name: &str, values: impl Iterator<Item = Option<i64>>) -> Cols {
        let mut b = Int64Builder::new();
        values.for_each(|v| b.append_option(v));
        self.push(name, true, Arc::new(b.finish()))
    }

    /// Microseconds since the epoch, as UTC timestamps.
    pub(crate) fn ts(self, name: &str, values: impl Iterator<Item = i64>) -> Cols {
        let mut b = TimestampMicrosecondBuilder::new();
        values.for_each(|v| b.append_value(v));
        let a = b.finish().with_data_type(bronze::timestamp_type());
        self.push(name, false, Arc::new(a))
    }

    /// Days since the epoch.
    pub(crate) fn date(self, name: &str, values: impl Iterator<Item = i32>) -> Cols {
        let mut b = Date32Builder::new();
        values.for_each(|v| b.append_value(v));
        self.push(name, false, Arc::new(b.finish()))
    }

    pub(crate) fn opt_date(self, name: &str, values: impl Iterator<Item = Option<i32>>) -> Cols {
        let mut b = Date32Builder::new();
        values.for_each(|v| b.append_option(v));
        self.push(name, true, Arc::new(b.finish()))
    }

    pub(crate) fn bool(self, name: &str, values: impl Iterator<Item = bool>) -> Cols {
        let mut b = BooleanBuilder::new();
        values.for_each(|v| b.append_value(v));
        self.push(name, false, Arc::new(b.finish()))
    }

    pub(crate) fn bin<'a>(
        self,
        name: &str,
        values: impl Iterator<Item = Option<&'a [u8]>>,
    ) -> Cols {
        let mut b = LargeBinaryBuilder::new();
        values.for_each(|v| b.append_option(v));
        self.push(name, true, Arc::new(b.finish()))
    }

    /// The batch; an error names `table`.
    pub(crate) fn finish(self, table: &str) -> Result<RecordBatch> {
        RecordBatch::try_new(Arc::new(Schema::new(self.fields)), self.arrays).map_err(|e| {
            ShackError::BadTable {
                table: table.to_string(),
                detail: format!("building a batch: {e}"),
            }
        })
    }
}
