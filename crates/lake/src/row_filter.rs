//! A scan's filter, evaluated on a data file's rows by lake itself, so a filtered read of a file
//! lake wrote can use the footer its catalog handle keeps (as [`crate::read`]'s plain read does)
//! instead of iceberg's reader, which parses every footer again.
//!
//! [`RowFilter::compile`] turns a bound predicate into arrow comparisons on the file's own
//! columns, found by Parquet field id. It answers `None` for anything it does not evaluate
//! exactly as iceberg's reader would: NOT, NaN tests, prefixes, floating-point or decimal
//! values, a column the file lacks, a nested field or a column of another Arrow type. The caller
//! then hands the file to iceberg's reader. A row is kept when the predicate is true for it;
//! a comparison with null is null (SQL's three-valued logic, as iceberg's reader does), and a
//! null result drops the row.

use std::sync::Arc;

use arrow::compute::kernels::{boolean, cmp};
use arrow::compute::prep_null_mask_filter;
use arrow_array::{
    Array, ArrayRef, BooleanArray, Date32Array, Int32Array, Int64Array, RecordBatch, Scalar,
    StringArray, TimestampMicrosecondArray,
};
use arrow_schema::{ArrowError, DataType, Schema, TimeUnit};
use iceberg::expr::{BoundPredicate, BoundReference, PredicateOperator};
use iceberg::spec::{Datum, PrimitiveLiteral, PrimitiveType, Type};
use parquet::arrow::PARQUET_FIELD_ID_META_KEY;

/// A compiled predicate over the columns of one file, and those columns (root indices,
/// ascending) in the order the batches it is given hold them.
#[derive(Debug)]
pub(crate) struct RowFilter {
    expr: Expr,
    roots: Vec<usize>,
}

#[derive(Debug)]
enum Expr {
    Const(bool),
    And(Box<Expr>, Box<Expr>),
    Or(Box<Expr>, Box<Expr>),
    /// `IS NULL` (`negate`: `IS NOT NULL`) of a column, by its position among the roots.
    Null {
        column: usize,
        negate: bool,
    },
    Compare {
        column: usize,
        op: PredicateOperator,
        value: Scalar<ArrayRef>,
    },
    /// `IN` (`negate`: `NOT IN`) a set of values.
    In {
        column: usize,
        values: Vec<Scalar<ArrayRef>>,
        negate: bool,
    },
}

impl RowFilter {
    /// `p` over the file whose Arrow schema (as parquet reads it, with field ids) is `file`;
    /// `None` when it is not one this evaluates (see the module's docs).
    pub(crate) fn compile(p: &BoundPredicate, file: &Schema) -> Option<RowFilter> {
        let mut roots = Vec::new();
        let expr = compile(p, file, &mut roots)?;
        // The batches come with the roots in file order: renumber the columns to match.
        let mut sorted = roots.clone();
        sorted.sort_unstable();
        sorted.dedup();
        let at = |i: usize| sorted.iter().position(|r| *r == roots[i]);
        let expr = expr.renumber(&at)?;
        Some(RowFilter {
            expr,
            roots: sorted,
        })
    }

    /// The file's root columns the filter reads, ascending.
    pub(crate) fn roots(&self) -> &[usize] {
        &self.roots
    }

    /// Which rows of `batch` (holding [`RowFilter::roots`]' columns, in that order) to keep.
    pub(crate) fn keep(&self, batch: &RecordBatch) -> Result<BooleanArray, ArrowError> {
        let b = self.expr.eval(batch)?;
        Ok(if b.null_count() > 0 {
            prep_null_mask_filter(&b)
        } else {
            b
        })
    }
}

fn compile(p: &BoundPredicate, file: &Schema, roots: &mut Vec<usize>) -> Option<Expr> {
    Some(match p {
        BoundPredicate::AlwaysTrue => Expr::Const(true),
        BoundPredicate::AlwaysFalse => Expr::Const(false),
        BoundPredicate::And(e) => {
            let [l, r] = e.inputs();
            Expr::And(
                Box::new(compile(l, file, roots)?),
                Box::new(compile(r, file, roots)?),
            )
        }
        BoundPredicate::Or(e) => {
            let [l, r] = e.inputs();
            Expr::Or(
                Box::new(compile(l, file, roots)?),
                Box::new(compile(r, file, roots)?),
            )
        }
        BoundPredicate::Not(_) => return None,
        BoundPredicate::Unary(e) => {
            let (column, _) = column(e.term(), file, roots)?;
            match e.op() {
                PredicateOperator::IsNull => Expr::Null {
                    column,
                    negate: false,
                },
                PredicateOperator::NotNull => Expr::Null {
                    column,
                    negate: true,
                },
                _ => return None,
            }
        }
        BoundPredicate::Binary(e) => {
            let op = e.op();
            if !matches!(
                op,
                PredicateOperator::LessThan
                    | PredicateOperator::LessThanOrEq
                    | PredicateOperator::GreaterThan
                    | PredicateOperator::GreaterThanOrEq
                    | PredicateOperator::Eq
                    | PredicateOperator::NotEq
            ) {
                return None;
            }
            let (column, ty) = column(e.term(), file, roots)?;
            Expr::Compare {
                column,
                op,
                value: scalar(e.literal(), &ty)?,
            }
        }
        BoundPredicate::Set(e) => {
            let negate = match e.op() {
                PredicateOperator::In => false,
                PredicateOperator::NotIn => true,
                _ => return None,
            };
            let (column, ty) = column(e.term(), file, roots)?;
            let values = e
                .literals()
                .iter()
                .map(|v| scalar(v, &ty))
                .collect::<Option<Vec<_>>>()?;
            Expr::In {
                column,
                values,
                negate,
            }
        }
    })
}

/// The file's top-level column with `r`'s field id, when its Arrow type is the one lake writes
/// for the field's Iceberg type: its position in `roots` (added there) and its type.
fn column(r: &BoundReference, file: &Schema, roots: &mut Vec<usize>) -> Option<(usize, DataType)> {
    let field = r.field();
    let Type::Primitive(ty) = field.field_type.as_ref() else {
        return None;
    };
    let id = field.id.to_string();
    let root = file
        .fields()
        .iter()
        .position(|f| f.metadata().get(PARQUET_FIELD_ID_META_KEY) == Some(&id))?;
    let data_type = file.field(root).data_type().clone();
    let fits = match (ty, &data_type) {
        (PrimitiveType::Boolean, DataType::Boolean)
        | (PrimitiveType::Int, DataType::Int32)
        | (PrimitiveType::Long, DataType::Int64)
        | (PrimitiveType::Date, DataType::Date32)
        | (PrimitiveType::Timestamp, DataType::Timestamp(TimeUnit::Microsecond, None))
        | (PrimitiveType::String, DataType::Utf8) => true,
        // Microseconds since the epoch in UTC, whatever zone name the file gives them.
        (PrimitiveType::Timestamptz, DataType::Timestamp(TimeUnit::Microsecond, Some(_))) => true,
        _ => false,
    };
    if !fits {
        return None;
    }
    roots.push(root);
    Some((roots.len() - 1, data_type))
}

/// `v` as a one-value array of exactly `ty`, when `v` is of the Iceberg type that maps to it.
fn scalar(v: &Datum, ty: &DataType) -> Option<Scalar<ArrayRef>> {
    let array: ArrayRef = match (v.data_type(), v.literal(), ty) {
        (PrimitiveType::Boolean, PrimitiveLiteral::Boolean(b), DataType::Boolean) => {
            Arc::new(BooleanArray::from(vec![*b]))
        }
        (PrimitiveType::Int, PrimitiveLiteral::Int(i), DataType::Int32) => {
            Arc::new(Int32Array::from(vec![*i]))
        }
        (PrimitiveType::Date, PrimitiveLiteral::Int(d), DataType::Date32) => {
            Arc::new(Date32Array::from(vec![*d]))
        }
        (PrimitiveType::Long, PrimitiveLiteral::Long(i), DataType::Int64) => {
            Arc::new(Int64Array::from(vec![*i]))
        }
        (
            PrimitiveType::Timestamp,
            PrimitiveLiteral::Long(us),
            DataType::Timestamp(TimeUnit::Microsecond, None),
        ) => Arc::new(TimestampMicrosecondArray::from(vec![*us])),
        (
            PrimitiveType::Timestamptz,
            PrimitiveLiteral::Long(us),
            DataType::Timestamp(TimeUnit::Microsecond, Some(tz)),
        ) => Arc::new(TimestampMicrosecondArray::from(vec![*us]).with_timezone(tz.clone())),
        (PrimitiveType::String, PrimitiveLiteral::String(s), DataType::Utf8) => {
            Arc::new(StringArray::from(vec![s.as_str()]))
        }
        _ => return None,
    };
    Some(Scalar::new(array))
}

impl Expr {
    /// The same expression with each column `i` numbered `at(i)`.
    fn renumber(self, at: &impl Fn(usize) -> Option<usize>) -> Option<Expr> {
        Some(match self {
            Expr::Const(b) => Expr::Const(b),
            Expr::And(l, r) => Expr::And(Box::new(l.renumber(at)?), Box::new(r.renumber(at)?)),
            Expr::Or(l, r) => Expr::Or(Box::new(l.renumber(at)?), Box::new(r.renumber(at)?)),
            Expr::Null { column, negate } => Expr::Null {
                column: at(column)?,
                negate,
            },
            Expr::Compare { column, op, value } => Expr::Compare {
                column: at(column)?,
                op,
                value,
            },
            Expr::In {
                column,
                values,
                negate,
            } => Expr::In {
                column: at(column)?,
                values,
                negate,
            },
        })
    }

    fn eval(&self, batch: &RecordBatch) -> Result<BooleanArray, ArrowError> {
        let col = |i: usize| {
            batch.columns().get(i).ok_or_else(|| {
                ArrowError::SchemaError(format!("the filter's column {i} is not in the batch"))
            })
        };
        match self {
            Expr::Const(b) => Ok(BooleanArray::from(vec![*b; batch.num_rows()])),
            Expr::And(l, r) => boolean::and_kleene(&l.eval(batch)?, &r.eval(batch)?),
            Expr::Or(l, r) => boolean::or_kleene(&l.eval(batch)?, &r.eval(batch)?),
            Expr::Null { column, negate } => {
                let c = col(*column)?;
                if *negate {
                    boolean::is_not_null(c)
                } else {
                    boolean::is_null(c)
                }
            }
            Expr::Compare { column, op, value } => {
                let c = col(*column)?;
                match op {
                    PredicateOperator::LessThan => cmp::lt(c, value),
                    PredicateOperator::LessThanOrEq => cmp::lt_eq(c, value),
                    PredicateOperator::GreaterThan => cmp::gt(c, value),
                    PredicateOperator::GreaterThanOrEq => cmp::gt_eq(c, value),
                    PredicateOperator::Eq => cmp::eq(c, value),
                    PredicateOperator::NotEq => cmp::neq(c, value),
                    other => Err(ArrowError::InvalidArgumentError(format!(
                        "{other} is not a comparison this filter evaluates"
                    ))),
                }
            }
            Expr::In {
                column,
                values,
                negate,
            } => {
                let c = col(*column)?;
                // x IN (a, b) is x = a OR x = b; a null x is null either way, and so dropped.
                let mut any = BooleanArray::from(vec![false; batch.num_rows()]);
                for v in values {
                    any = boolean::or_kleene(&any, &cmp::eq(c, v)?)?;
                }
                if *negate { boolean::not(&any) } else { Ok(any) }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use arrow_schema::Field;
    use iceberg::expr::{Bind, Reference};
    use iceberg::spec::{NestedField, Schema as IcebergSchema};

    use super::*;

    fn with_id(name: &str, ty: DataType, id: i32) -> Field {
        Field::new(name, ty, true).with_metadata(
            [(PARQUET_FIELD_ID_META_KEY.to_string(), id.to_string())]
                .into_iter()
                .collect(),
        )
    }

    fn bound(p: iceberg::expr::Predicate) -> BoundPredicate {
        let schema = IcebergSchema::builder()
            .with_fields(vec![
                NestedField::optional(1, "n", Type::Primitive(PrimitiveType::Long)).into(),
                NestedField::optional(2, "x", Type::Primitive(PrimitiveType::Double)).into(),
                NestedField::optional(3, "s", Type::Primitive(PrimitiveType::String)).into(),
            ])
            .build()
            .expect("schema");
        p.bind(Arc::new(schema), true).expect("bind")
    }

    #[test]
    fn only_what_it_evaluates_exactly_is_compiled() {
        let file = Schema::new(vec![
            with_id("s", DataType::Utf8, 3),
            with_id("n", DataType::Int64, 1),
            with_id("x", DataType::Float64, 2),
        ]);
        let n = || Reference::new("n");
        // Columns are found by field id and read in file order.
        let f = RowFilter::compile(
            &bound(
                n().greater_than(Datum::long(1))
                    .and(Reference::new("s").equal_to(Datum::string("a"))),
            ),
            &file,
        )
        .expect("compiled");
        assert_eq!(f.roots(), &[0, 1]);
        let batch = RecordBatch::try_from_iter([
            (
                "s",
                Arc::new(StringArray::from(vec![Some("a"), Some("a"), None])) as ArrayRef,
            ),
            (
                "n",
                Arc::new(Int64Array::from(vec![Some(2), Some(1), Some(5)])),
            ),
        ])
        .expect("batch");
        // The null string's comparison is null: the row is dropped, not kept.
        assert_eq!(
            f.keep(&batch).expect("keep"),
            BooleanArray::from(vec![true, false, false])
        );

        let none = |p, file: &Schema| RowFilter::compile(&bound(p), file).is_none();
        // A floating-point value, a prefix, a column the file lacks, a column of another
        // type: iceberg's reader decides those.
        assert!(none(
            Reference::new("x").less_than(Datum::double(1.0)),
            &file
        ));
        assert!(none(
            Reference::new("s").starts_with(Datum::string("a")),
            &file
        ));
        let without_n = Schema::new(vec![with_id("s", DataType::Utf8, 3)]);
        assert!(none(n().is_null(), &without_n));
        let n_as_int = Schema::new(vec![with_id("n", DataType::Int32, 1)]);
        assert!(none(n().equal_to(Datum::long(1)), &n_as_int));
    }
}
