//! Point lookups by key: exact rows, and only the row groups whose bloom filter may hold an
//! asked key are read; tables (or files) without a filter give the same rows, read whole.

mod common;

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use arrow_array::{Array, Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};
use lake::iceberg::expr::{Predicate, Reference};
use lake::{
    At, Catalog, LakeError, Lookup, PROP_BLOOM_COLUMN, PROP_COMPRESSION_CODEC,
    PROP_COMPRESSION_LEVEL, PROP_INTEGER_ENCODING, PROP_ROW_GROUP_LIMIT,
};

fn schema() -> Schema {
    Schema::new(vec![
        Field::new("order_id", DataType::Utf8, false),
        Field::new("lsn", DataType::Int64, false),
        Field::new("note", DataType::Utf8, true),
    ])
}

/// A scrambled id, so neighbouring rows never share a prefix (as random order ids do).
fn id(i: i64) -> String {
    format!(
        "ord-{:016x}",
        (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)
    )
}

fn rows(ids: std::ops::Range<i64>) -> RecordBatch {
    RecordBatch::try_new(
        Arc::new(schema()),
        vec![
            Arc::new(StringArray::from_iter_values(ids.clone().map(id))),
            Arc::new(Int64Array::from_iter_values(ids.clone().map(|i| i * 10))),
            Arc::new(StringArray::from_iter_values(ids.map(|i| format!("n{i}")))),
        ],
    )
    .expect("test batch")
}

fn bloom_props(limit: usize) -> BTreeMap<String, String> {
    BTreeMap::from([
        (format!("{PROP_BLOOM_COLUMN}order_id"), "true".to_string()),
        (PROP_ROW_GROUP_LIMIT.to_string(), limit.to_string()),
    ])
}

/// Five appends of 1,000 rows each (five files) to `audit`.
async fn table(props: &BTreeMap<String, String>) -> Catalog {
    let c = Catalog::in_memory();
    fill(&c, props).await;
    c
}

/// `silver.orders` created in `c` with `props`, then [`table`]'s five appends.
async fn fill(c: &Catalog, props: &BTreeMap<String, String>) {
    let change = c
        .stage_create_table_with_properties("silver.orders", &schema(), &[], props)
        .await
        .unwrap();
    c.commit(vec![change], "create-table", "create", BTreeMap::new())
        .await
        .unwrap();
    for f in 0..5 {
        c.append(
            "silver.orders",
            "audit",
            &[rows(f * 1_000..(f + 1) * 1_000)],
            BTreeMap::new(),
        )
        .await
        .unwrap();
    }
}

/// (order_id, lsn) of every row, sorted.
fn found(batches: &[RecordBatch]) -> Vec<(String, i64)> {
    let mut out = Vec::new();
    for b in batches {
        assert_eq!(
            b.schema().field(0).name(),
            "order_id",
            "the key comes first"
        );
        let ids = b.column(0).as_any().downcast_ref::<StringArray>().unwrap();
        let lsn = b.column(1).as_any().downcast_ref::<Int64Array>().unwrap();
        for i in 0..b.num_rows() {
            out.push((ids.value(i).to_string(), lsn.value(i)));
        }
    }
    out.sort();
    out
}

fn asked(ids: &[String]) -> HashSet<&str> {
    ids.iter().map(String::as_str).collect()
}

/// `keys` looked up in silver.orders at `audit`, with their `lsn`.
async fn look_up(c: &Catalog, keys: &[String], filter: Option<Predicate>) -> Lookup {
    let t = c.table("silver.orders").await.unwrap();
    t.lookup(
        &At::reference("audit"),
        "order_id",
        &asked(keys),
        &["lsn"],
        filter,
    )
    .await
    .unwrap()
}

#[tokio::test]
async fn a_lookup_reads_only_the_row_groups_that_may_hold_a_key() {
    let c = table(&bloom_props(100)).await;
    let t = c.table("silver.orders").await.unwrap();
    let keys = vec![id(7), id(2_345), id(4_999), "ord-never-written".to_string()];
    let l = look_up(&c, &keys, None).await;
    let mut want = vec![(id(7), 70), (id(2_345), 23_450), (id(4_999), 49_990)];
    want.sort();
    assert_eq!(found(&l.batches), want);
    assert_eq!(l.files_planned, 5);
    assert_eq!(l.row_groups_held, 50, "1,000 rows a file, 100 a row group");
    assert_eq!(l.files_unfiltered, 0);
    // Three keys are held by three row groups; a false positive (1% a key and group) may
    // add one or two.
    assert!(
        (3..=6).contains(&l.row_groups_read),
        "read {} of 50 row groups",
        l.row_groups_read
    );
    assert!(l.rows_read <= 600, "decoded {} rows", l.rows_read);

    // The handle keeps what it read of each file's footer and filters: looking up other keys
    // reads no footer or filter again, and finds exactly those keys.
    let (parsed, hits) = c.parsed_file_counts();
    let again = look_up(&c, &[id(12), id(3_999)], None).await;
    assert_eq!(
        found(&again.batches),
        vec![(id(12), 120), (id(3_999), 39_990)]
    );
    let (parsed_again, hits_again) = c.parsed_file_counts();
    assert_eq!(parsed_again, parsed, "nothing parsed a second time");
    assert!(
        hits_again >= hits + 5,
        "the five files' key indexes came from memory"
    );

    // Nothing asked: nothing read.
    let none = t
        .lookup(
            &At::reference("audit"),
            "order_id",
            &HashSet::new(),
            &["lsn"],
            None,
        )
        .await
        .unwrap();
    assert_eq!((none.num_rows(), none.row_groups_read), (0, 0));
    // `main` never moved: nothing there.
    let main = t
        .lookup(&At::Main, "order_id", &asked(&keys), &["lsn"], None)
        .await
        .unwrap();
    assert_eq!(main.num_rows(), 0);
}

#[tokio::test]
async fn a_table_without_filters_gives_the_same_rows_read_whole() {
    let keys: Vec<String> = (0..5_000).step_by(997).map(id).collect();
    let filtered = table(&bloom_props(100)).await;
    let plain = table(&BTreeMap::new()).await;
    let look = |c: Catalog| {
        let keys = keys.clone();
        async move {
            let t = c.table("silver.orders").await.unwrap();
            t.lookup(
                &At::reference("audit"),
                "order_id",
                &asked(&keys),
                &["lsn", "note"],
                None,
            )
            .await
            .unwrap()
        }
    };
    let (f, p) = (look(filtered).await, look(plain).await);
    assert_eq!(found(&f.batches), found(&p.batches));
    assert_eq!(found(&p.batches).len(), keys.len());
    assert_eq!(p.files_unfiltered, 5);
    assert_eq!(p.row_groups_read, p.row_groups_held);
    assert_eq!(p.rows_read, 5_000);
    assert!(f.rows_read < 1_000, "decoded {} rows", f.rows_read);
    // The filter on the scan prunes first: only the rows it may match are looked in.
    let t = lookup_with_lsn_filter().await;
    assert_eq!(t.0, vec![(id(4_001), 40_010)]);
    assert_eq!(t.1, 1, "one file's bounds hold lsn ≥ 40,000");
}

async fn lookup_with_lsn_filter() -> (Vec<(String, i64)>, usize) {
    let c = table(&bloom_props(100)).await;
    let at_least = Reference::new("lsn").greater_than_or_equal_to(lake::Datum::long(40_000));
    let l = look_up(&c, &[id(3), id(4_001)], Some(at_least)).await;
    (found(&l.batches), l.files_planned)
}

#[tokio::test]
async fn properties_set_later_apply_to_files_written_from_then_on() {
    let c = table(&BTreeMap::new()).await;
    let t = c.table("silver.orders").await.unwrap();
    let change = t.stage_set_properties(&bloom_props(100)).unwrap().unwrap();
    c.commit(vec![change], "set-properties", "bloom", BTreeMap::new())
        .await
        .unwrap();
    let t = c.table("silver.orders").await.unwrap();
    assert!(
        t.stage_set_properties(&bloom_props(100)).unwrap().is_none(),
        "already set: nothing to stage"
    );
    c.append(
        "silver.orders",
        "audit",
        &[rows(5_000..6_000)],
        BTreeMap::new(),
    )
    .await
    .unwrap();
    let l = look_up(&c, &[id(5_500)], None).await;
    assert_eq!(found(&l.batches), vec![(id(5_500), 55_000)]);
    assert_eq!(l.files_unfiltered, 5, "the five files written before");
    assert!(l.row_groups_read <= 5 + 2, "read {}", l.row_groups_read);
}

#[tokio::test]
async fn bad_write_properties_are_refused_by_name() {
    for (key, value) in [
        (PROP_ROW_GROUP_LIMIT.to_string(), "lots"),
        (format!("{PROP_BLOOM_COLUMN}order_id"), "yes"),
        (format!("{PROP_BLOOM_COLUMN}no_such_column"), "true"),
        (PROP_COMPRESSION_CODEC.to_string(), "lzo"),
        (PROP_COMPRESSION_LEVEL.to_string(), "99"),
        (PROP_INTEGER_ENCODING.to_string(), "zigzag"),
    ] {
        let props = BTreeMap::from([(key.clone(), value.to_string())]);
        let c = Catalog::in_memory();
        let change = c
            .stage_create_table_with_properties("silver.orders", &schema(), &[], &props)
            .await
            .unwrap();
        c.commit(vec![change], "create-table", "create", BTreeMap::new())
            .await
            .unwrap();
        let err = c
            .append("silver.orders", "audit", &[rows(0..10)], BTreeMap::new())
            .await
            .unwrap_err();
        assert!(
            matches!(&err, LakeError::Schema { detail, .. } if detail.contains(&key)),
            "{key}={value}: {err}"
        );
    }
    let c = table(&BTreeMap::new()).await;
    let t = c.table("silver.orders").await.unwrap();
    let err = t
        .lookup(&At::Main, "lsn", &HashSet::new(), &[], None)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("not a string"), "{err}");
}

/// The Parquet footer of the data file at `path` of `t`.
async fn footer(t: &lake::Table, path: &str) -> parquet::file::metadata::ParquetMetaData {
    let bytes = t
        .iceberg()
        .file_io()
        .new_input(path)
        .unwrap()
        .read()
        .await
        .unwrap();
    parquet::file::metadata::ParquetMetaDataReader::new()
        .parse_and_finish(&bytes)
        .unwrap()
}

/// `write.parquet.compression-codec` (and the zstd level) choose the codec of new data files,
/// which read back the same rows.
#[tokio::test]
async fn the_codec_property_chooses_the_codec_of_new_files() {
    use parquet::basic::Compression;
    for (props, want) in [
        (vec![], "SNAPPY"),
        (vec![(PROP_COMPRESSION_CODEC, "ZSTD")], "ZSTD"),
        (vec![(PROP_COMPRESSION_CODEC, "lz4_raw")], "LZ4_RAW"),
        (
            vec![(PROP_COMPRESSION_CODEC, "uncompressed")],
            "UNCOMPRESSED",
        ),
        (
            vec![
                (PROP_COMPRESSION_CODEC, "zstd"),
                (PROP_COMPRESSION_LEVEL, "9"),
            ],
            "ZSTD",
        ),
    ] {
        let props: BTreeMap<String, String> = props
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let c = table(&props).await;
        let t = c.table("silver.orders").await.unwrap();
        let at = At::reference("audit");
        assert_eq!(
            t.scan(&at)
                .await
                .unwrap()
                .iter()
                .map(|b| b.num_rows())
                .sum::<usize>(),
            5_000
        );
        for f in t.data_files(&at).await.unwrap() {
            let meta = footer(&t, f.file_path()).await;
            let codec = meta.row_group(0).column(0).compression();
            let name = match codec {
                Compression::ZSTD(_) => "ZSTD",
                Compression::SNAPPY => "SNAPPY",
                Compression::LZ4_RAW => "LZ4_RAW",
                Compression::UNCOMPRESSED => "UNCOMPRESSED",
                _ => "other",
            };
            assert_eq!(name, want, "{props:?}: {codec:?}");
            // Statistics per column chunk (the data file's bounds come from them), no
            // per-page statistics index nor page offset index for every reader to read and
            // parse with the footer.
            for rg in meta.row_groups() {
                for col in rg.columns() {
                    assert!(col.statistics().is_some(), "{props:?}: chunk statistics");
                    assert!(
                        col.column_index_offset().is_none(),
                        "{props:?}: a page statistics index"
                    );
                    assert!(
                        col.offset_index_offset().is_none(),
                        "{props:?}: a page offset index"
                    );
                }
            }
        }
    }
}

/// Numeric columns whose values are mostly distinct (ids, event times) are written without a
/// dictionary, as parquet-java writes them (delta-encoded, or plain when the table asks for
/// `write.parquet.integer-encoding=plain`), and columns a dictionary shrinks keep one; each
/// file is judged on its own rows (a day-partitioned table's files too), and every row reads
/// back.
#[tokio::test]
async fn a_dictionary_only_where_it_makes_the_file_smaller() {
    use arrow_array::TimestampMicrosecondArray;
    use arrow_schema::TimeUnit;
    use parquet::basic::Encoding;
    let schema = Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("grp", DataType::Int64, false),
        Field::new(
            "at",
            DataType::Timestamp(TimeUnit::Microsecond, Some("+00:00".into())),
            false,
        ),
        Field::new("label", DataType::Utf8, false),
    ]);
    let n = 20_000i64;
    let batch = RecordBatch::try_new(
        Arc::new(schema.clone()),
        vec![
            Arc::new(Int64Array::from_iter_values(0..n)),
            Arc::new(Int64Array::from_iter_values((0..n).map(|i| i % 97))),
            // Four days, a distinct second each.
            Arc::new(
                TimestampMicrosecondArray::from_iter_values(
                    (0..n)
                        .map(|i| 1_785_024_000_000_000 + (i % 4) * 86_400_000_000 + i * 1_000_000),
                )
                .with_timezone("+00:00"),
            ),
            Arc::new(StringArray::from_iter_values(
                (0..n).map(|i| format!("l{}", i % 5)),
            )),
        ],
    )
    .unwrap();
    let c = Catalog::in_memory();
    let plain = BTreeMap::from([(PROP_INTEGER_ENCODING.to_string(), "plain".to_string())]);
    for (name, partition, properties) in [
        ("silver.flat", vec![], BTreeMap::new()),
        (
            "silver.by_day",
            vec![lake::PartitionField::day("at")],
            BTreeMap::new(),
        ),
        ("silver.plain", vec![], plain),
    ] {
        let delta = properties.is_empty();
        let change = c
            .stage_create_table_with_properties(name, &schema, &partition, &properties)
            .await
            .unwrap();
        c.commit(vec![change], "create-table", "create", BTreeMap::new())
            .await
            .unwrap();
        c.append(name, "audit", std::slice::from_ref(&batch), BTreeMap::new())
            .await
            .unwrap();
        let t = c.table(name).await.unwrap();
        let at = At::reference("audit");
        let files = t.data_files(&at).await.unwrap();
        assert_eq!(
            files.len(),
            if partition.is_empty() { 1 } else { 4 },
            "{name}"
        );
        for f in files {
            let meta = footer(&t, f.file_path()).await;
            for rg in meta.row_groups() {
                for col in rg.columns() {
                    let column = col.column_path().string();
                    let dictionary = col.dictionary_page_offset().is_some();
                    let encodings: Vec<Encoding> = col.encodings().collect();
                    let want = matches!(column.as_str(), "grp" | "label");
                    assert_eq!(dictionary, want, "{name} {column}: {encodings:?}");
                    assert_eq!(
                        encodings.contains(&Encoding::RLE_DICTIONARY),
                        want,
                        "{name} {column}: {encodings:?}"
                    );
                    assert_eq!(
                        encodings.contains(&Encoding::DELTA_BINARY_PACKED),
                        delta && !want,
                        "{name} {column}: {encodings:?}"
                    );
                }
            }
        }
        let rows = t.scan(&at).await.unwrap();
        assert_eq!(common::ids(&rows), (0..n).collect::<Vec<_>>(), "{name}");
        let grp_sum: i64 = rows
            .iter()
            .map(|b| {
                arrow::compute::sum(b.column(1).as_any().downcast_ref::<Int64Array>().unwrap())
                    .unwrap()
            })
            .sum();
        assert_eq!(grp_sum, (0..n).map(|i| i % 97).sum::<i64>(), "{name}");
    }
}

/// A new handle on a lake (a new process, say) that warms a table first finds everything a
/// lookup reads of the table's history already kept: the lookup parses no manifest, footer or
/// filter of its own, and answers as a handle that warmed nothing.
#[tokio::test]
async fn a_warmed_handle_looks_up_without_parsing_anything_more() {
    let store: Arc<dyn object_store::ObjectStore> = Arc::new(object_store::memory::InMemory::new());
    let open = || Catalog::open_store(store.clone(), "memory:///catalog", "memory:///warehouse");
    fill(&open(), &bloom_props(100)).await;
    let keys = vec![id(7), id(2_345), id(4_999), "ord-never-written".to_string()];

    let cold = open();
    let (parsed_before, _) = cold.parsed_file_counts();
    let unwarmed = look_up(&cold, &keys, None).await;
    let (parsed_cold, _) = cold.parsed_file_counts();
    assert!(
        parsed_cold >= parsed_before + 5,
        "a cold lookup parses each file's key index ({parsed_before} -> {parsed_cold})"
    );

    let warm = open();
    let warmed = warm
        .warm(&["silver.orders", "silver.not_there"], "audit")
        .await
        .unwrap();
    assert_eq!(
        warmed,
        lake::Warmed {
            tables: 1,
            data_files: 5,
            key_indexes: 5
        }
    );
    let (parsed_warm, _) = warm.parsed_file_counts();
    let l = look_up(&warm, &keys, None).await;
    assert_eq!(
        warm.parsed_file_counts().0,
        parsed_warm,
        "the lookup found every manifest, footer and filter kept"
    );
    assert_eq!(found(&l.batches), found(&unwarmed.batches));
    assert_eq!(l.row_groups_read, unwarmed.row_groups_read);
    assert_eq!(found(&l.batches).len(), 3);

    // The same on a thread of its own: waited for, it went through the same files, and a
    // handle it warmed parses nothing more for the lookup; one dropped at once is stopped, and
    // the lookup reads what it needs itself.
    let behind = open();
    let report = behind
        .warm_in_background(&["silver.orders"], "audit")
        .wait()
        .await
        .expect("the warm-up ran")
        .unwrap();
    assert_eq!(report, warmed);
    let (parsed_behind, _) = behind.parsed_file_counts();
    let l = look_up(&behind, &keys, None).await;
    assert_eq!(behind.parsed_file_counts().0, parsed_behind);
    assert_eq!(found(&l.batches), found(&unwarmed.batches));
    let dropped = open();
    drop(dropped.warm_in_background(&["silver.orders"], "audit"));
    let l = look_up(&dropped, &keys, None).await;
    assert_eq!(found(&l.batches), found(&unwarmed.batches));

    // A second warm-up reads nothing again; a table without the branch is warmed at `main`
    // (never written there: nothing to read).
    let again = warm.warm(&["silver.orders"], "audit").await.unwrap();
    assert_eq!(again.key_indexes, 5);
    assert_eq!(warm.parsed_file_counts().0, parsed_warm);
    let at_main = warm
        .warm(&["silver.orders"], "no-such-branch")
        .await
        .unwrap();
    assert_eq!(at_main, lake::Warmed::default());
}
