//! Table metadata as the JSON a commit writes, without iceberg-rust's clone of it.
//!
//! iceberg-rust serialises `TableMetadata` by cloning the whole of it into its versioned serde
//! structs first, every snapshot and every snapshot summary included. A table whose every
//! publish is tagged keeps every snapshot, so that clone grows with the table's history: it was
//! about half of the time a `season` spent writing metadata. Here a format-v2 table's metadata
//! is written field by field from borrowed parts, in iceberg-rust's own order and with its own
//! serialisers for every part but the snapshots and refs (whose serde structs are private), so
//! a reader parses the same metadata. Other format versions, and metadata whose refs the
//! writer does not know, go to iceberg-rust's serialiser.
//!
//! A snapshot never changes once committed, and a table's metadata carries every snapshot a
//! ref or tag keeps: writing each one's JSON again on every commit (its summary most of all)
//! was most of what was left of writing metadata. A [`SnapshotJson`] on the catalog handle
//! keeps each snapshot's JSON as it was written, with the snapshot it was written from, and as
//! it stood in a metadata file the handle read (so a new process's first commit of a table
//! copies too); the next commit of the table copies it when the snapshot is the same (the same
//! shared snapshot, or one equal to it), and writes it again when not.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use iceberg::spec::{FormatVersion, Snapshot, SnapshotRef, TableMetadata};
use serde::Serialize;
use serde::ser::{SerializeMap, SerializeStruct};
use serde_json::value::RawValue;

use crate::types::RefMap;

/// The JSON of each snapshot a commit wrote or a metadata read held, by table (its uuid) and
/// snapshot id, with the snapshot it stands for. Each commit of a table keeps only the
/// snapshots its metadata still holds, so what is kept is about the size of the metadata the
/// handle keeps anyway (a table only ever read keeps what its reads held until it is written).
#[derive(Default)]
pub(crate) struct SnapshotJson {
    tables: Mutex<HashMap<uuid::Uuid, Arc<Mutex<Written>>>>,
}

/// One table's snapshots as JSON, by snapshot id.
type Written = HashMap<i64, (SnapshotRef, Box<RawValue>)>;

impl SnapshotJson {
    fn table(&self, uuid: uuid::Uuid) -> Arc<Mutex<Written>> {
        let mut tables = self.tables.lock().unwrap_or_else(|p| p.into_inner());
        tables.entry(uuid).or_default().clone()
    }

    /// Keep the JSON of `md`'s snapshots as read from the file `md` was parsed from
    /// (`snapshots`, each as it stands there), so a handle's first commit of a table it read
    /// copies them as a later commit copies what the handle wrote. A snapshot's JSON names its
    /// own id; one whose id `md` does not hold, or which cannot be read, is left out (the
    /// commit writes that snapshot itself). Format v2 only, as [`to_vec`] copies only there.
    pub(crate) fn keep_read(&self, md: &TableMetadata, snapshots: &[&RawValue]) {
        if md.format_version() != FormatVersion::V2 || snapshots.is_empty() {
            return;
        }
        let table = self.table(md.uuid());
        let mut written = table.lock().unwrap_or_else(|p| p.into_inner());
        for raw in snapshots {
            let Some(snap) = snapshot_id(raw).and_then(|id| md.snapshot_by_id(id)) else {
                continue;
            };
            written
                .entry(snap.snapshot_id())
                .or_insert_with(|| (snap.clone(), (*raw).to_owned()));
        }
    }
}

/// The `snapshot-id` of a snapshot's JSON: read straight off the front where it comes first
/// (as every writer of format v2 we know puts it), else by parsing the object.
fn snapshot_id(raw: &RawValue) -> Option<i64> {
    const FRONT: &str = "{\"snapshot-id\":";
    if let Some(rest) = raw.get().strip_prefix(FRONT) {
        let end = rest.find([',', '}']).unwrap_or(rest.len());
        if let Ok(id) = rest[..end].parse::<i64>() {
            return Some(id);
        }
    }
    #[derive(serde::Deserialize)]
    struct Id {
        #[serde(rename = "snapshot-id")]
        id: i64,
    }
    serde_json::from_str::<Id>(raw.get()).ok().map(|i| i.id)
}

/// The JSON of `md`. `refs`, when given, must be `md`'s refs: lake's writers pass the refs they
/// set, debug builds check them whole against the metadata when a table is opened, and here
/// every ref given must name the snapshot `md` has under that name, or iceberg-rust writes it.
/// Each snapshot's JSON is taken from `kept` when it holds the same snapshot, and kept there
/// for the next commit.
pub(crate) fn to_vec(
    md: &TableMetadata,
    refs: Option<&RefMap>,
    kept: &SnapshotJson,
) -> serde_json::Result<Vec<u8>> {
    let Some(refs) =
        refs.filter(|refs| md.format_version() == FormatVersion::V2 && agrees(md, refs))
    else {
        return serde_json::to_vec(md);
    };
    let table = kept.table(md.uuid());
    let mut written = table.lock().unwrap_or_else(|p| p.into_inner());
    written.retain(|id, _| md.snapshot_by_id(*id).is_some());
    for snap in md.snapshots() {
        let same = written
            .get(&snap.snapshot_id())
            .is_some_and(|(was, _)| Arc::ptr_eq(was, snap) || was == snap);
        if !same {
            let json = RawValue::from_string(serde_json::to_string(&SnapshotV2(snap))?)?;
            written.insert(snap.snapshot_id(), (snap.clone(), json));
        }
    }
    // In `md`'s order, as iceberg-rust writes them (each was written above when missing; were
    // one not there, iceberg-rust writes the whole metadata rather than leave it out).
    let Some(snapshots) = md
        .snapshots()
        .map(|s| written.get(&s.snapshot_id()).map(|(_, json)| json.as_ref()))
        .collect::<Option<Vec<&RawValue>>>()
    else {
        return serde_json::to_vec(md);
    };
    serde_json::to_vec(&V2 {
        md,
        refs,
        snapshots,
    })
}

/// True when every ref in `refs` is a ref of `md` at the same snapshot.
fn agrees(md: &TableMetadata, refs: &RefMap) -> bool {
    refs.iter()
        .all(|(name, &(_, id))| md.snapshot_for_ref(name).map(|s| s.snapshot_id()) == Some(id))
}

/// A format-v2 `TableMetadata` with its refs and every snapshot's JSON.
struct V2<'a> {
    md: &'a TableMetadata,
    refs: &'a RefMap,
    snapshots: Vec<&'a RawValue>,
}

impl Serialize for V2<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let md = self.md;
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("format-version", &2u8)?;
        m.serialize_entry("table-uuid", &md.uuid())?;
        m.serialize_entry("location", md.location())?;
        m.serialize_entry("last-sequence-number", &md.last_sequence_number())?;
        m.serialize_entry("last-updated-ms", &md.last_updated_ms())?;
        m.serialize_entry("last-column-id", &md.last_column_id())?;
        m.serialize_entry("schemas", &Seq(|| md.schemas_iter().map(|s| s.as_ref())))?;
        m.serialize_entry("current-schema-id", &md.current_schema_id())?;
        m.serialize_entry(
            "partition-specs",
            &Seq(|| md.partition_specs_iter().map(|s| s.as_ref())),
        )?;
        m.serialize_entry("default-spec-id", &md.default_partition_spec_id())?;
        m.serialize_entry("last-partition-id", &md.last_partition_id())?;
        if !md.properties().is_empty() {
            m.serialize_entry("properties", md.properties())?;
        }
        if let Some(id) = md.current_snapshot_id() {
            m.serialize_entry("current-snapshot-id", &id)?;
        }
        if !md.history().is_empty() {
            m.serialize_entry("snapshot-log", md.history())?;
        }
        if !md.metadata_log().is_empty() {
            m.serialize_entry("metadata-log", md.metadata_log())?;
        }
        m.serialize_entry(
            "sort-orders",
            &Seq(|| md.sort_orders_iter().map(|s| s.as_ref())),
        )?;
        m.serialize_entry("default-sort-order-id", &md.default_sort_order_id())?;
        m.serialize_entry("refs", &Refs(self.refs))?;
        if md.statistics_iter().len() > 0 {
            m.serialize_entry("statistics", &Seq(|| md.statistics_iter()))?;
        }
        if md.partition_statistics_iter().len() > 0 {
            m.serialize_entry(
                "partition-statistics",
                &Seq(|| md.partition_statistics_iter()),
            )?;
        }
        if !self.snapshots.is_empty() {
            m.serialize_entry("snapshots", &self.snapshots)?;
        }
        m.end()
    }
}

/// A sequence serialised from an iterator made on demand.
struct Seq<F>(F);

impl<F, I> Serialize for Seq<F>
where
    F: Fn() -> I,
    I: Iterator,
    I::Item: Serialize,
{
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq((self.0)())
    }
}

/// The refs, as iceberg-rust writes them: every ref by name, `main` included.
struct Refs<'a>(&'a RefMap);

impl Serialize for Refs<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for (name, &(is_branch, id)) in self.0.iter() {
            m.serialize_entry(name, &self.0.reference(name, is_branch, id))?;
        }
        m.end()
    }
}

/// A snapshot in format v2's shape, borrowed.
struct SnapshotV2<'a>(&'a Snapshot);

impl Serialize for SnapshotV2<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let snap = self.0;
        let mut st = s.serialize_struct("SnapshotV2", 7)?;
        st.serialize_field("snapshot-id", &snap.snapshot_id())?;
        if let Some(parent) = snap.parent_snapshot_id() {
            st.serialize_field("parent-snapshot-id", &parent)?;
        }
        st.serialize_field("sequence-number", &snap.sequence_number())?;
        st.serialize_field("timestamp-ms", &snap.timestamp_ms())?;
        st.serialize_field("manifest-list", snap.manifest_list())?;
        st.serialize_field("summary", snap.summary())?;
        if let Some(id) = snap.schema_id() {
            st.serialize_field("schema-id", &id)?;
        }
        st.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::ref_map;
    use iceberg::spec::{
        MAIN_BRANCH, NestedField, Operation, PrimitiveType, Schema, SnapshotReference,
        SnapshotRetention, StatisticsFile, Summary, Type,
    };
    use std::collections::HashMap;

    fn snapshot(id: i64, parent: Option<i64>, seq: i64, props: &[(&str, &str)]) -> Snapshot {
        Snapshot::builder()
            .with_snapshot_id(id)
            .with_parent_snapshot_id(parent)
            .with_sequence_number(seq)
            .with_timestamp_ms(4_000_000_000_000 + id)
            .with_manifest_list(format!("file:///t/metadata/snap-{id}.avro"))
            .with_schema_id(0)
            .with_summary(Summary {
                operation: Operation::Append,
                additional_properties: props
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect::<HashMap<_, _>>(),
            })
            .build()
    }

    /// Metadata with three snapshots, a branch with retention of its own, a tag, table
    /// properties and a statistics file.
    fn rich() -> TableMetadata {
        let schema = Schema::builder()
            .with_fields(vec![
                NestedField::required(1, "id", Type::Primitive(PrimitiveType::String)).into(),
                NestedField::optional(2, "amount", Type::Primitive(PrimitiveType::Long)).into(),
            ])
            .build()
            .unwrap();
        let mut b = iceberg::spec::TableMetadataBuilder::new(
            schema,
            iceberg::spec::PartitionSpec::unpartition_spec(),
            iceberg::spec::SortOrder::unsorted_order(),
            "file:///t".to_string(),
            FormatVersion::V2,
            HashMap::from([("write.format.default".to_string(), "parquet".to_string())]),
        )
        .unwrap()
        .build()
        .unwrap()
        .metadata
        .into_builder(Some("file:///t/metadata/00000-a.metadata.json".to_string()));
        b = b
            .set_branch_snapshot(snapshot(1, None, 1, &[("k", "v")]), MAIN_BRANCH)
            .unwrap();
        b = b
            .set_branch_snapshot(snapshot(2, Some(1), 2, &[]), "audit")
            .unwrap();
        b = b
            .add_snapshot(snapshot(3, Some(2), 3, &[("sugarshack.x", "1")]))
            .unwrap()
            .set_ref(
                "audit",
                SnapshotReference::new(3, SnapshotRetention::branch(Some(4), None, Some(99))),
            )
            .unwrap()
            .set_ref(
                "publish-1",
                SnapshotReference::new(
                    1,
                    SnapshotRetention::Tag {
                        max_ref_age_ms: None,
                    },
                ),
            )
            .unwrap()
            .set_statistics(StatisticsFile {
                snapshot_id: 3,
                statistics_path: "file:///t/metadata/stats.puffin".to_string(),
                file_size_in_bytes: 10,
                file_footer_size_in_bytes: 5,
                key_metadata: None,
                blob_metadata: Vec::new(),
            });
        b.build().unwrap().metadata
    }

    fn same_as_iceberg(md: &TableMetadata) {
        let refs = ref_map(md);
        assert_eq!(refs.get(MAIN_BRANCH).map(|r| r.1), md.current_snapshot_id());
        let ours = to_vec(md, Some(&refs), &SnapshotJson::default()).unwrap();
        let theirs = serde_json::to_vec(md).unwrap();
        let ours_v: serde_json::Value = serde_json::from_slice(&ours).unwrap();
        let theirs_v: serde_json::Value = serde_json::from_slice(&theirs).unwrap();
        assert_eq!(ours_v, theirs_v);
        let parsed: TableMetadata = serde_json::from_slice(&ours).unwrap();
        assert_eq!(&parsed, md);
    }

    #[test]
    fn a_v2_metadata_is_written_as_iceberg_rust_writes_it() {
        same_as_iceberg(&rich());
    }

    #[test]
    fn a_metadata_without_snapshots_is_written_as_iceberg_rust_writes_it() {
        let md = rich();
        let bare = iceberg::spec::TableMetadataBuilder::new(
            md.current_schema().as_ref().clone(),
            iceberg::spec::PartitionSpec::unpartition_spec(),
            iceberg::spec::SortOrder::unsorted_order(),
            "file:///u".to_string(),
            FormatVersion::V2,
            HashMap::new(),
        )
        .unwrap()
        .build()
        .unwrap()
        .metadata;
        same_as_iceberg(&bare);
    }

    /// Kept snapshot JSON is copied only for the same snapshot: metadata read back (equal
    /// snapshots, not shared) is written as iceberg-rust writes it, a snapshot that differs under
    /// the same id is written again, and snapshots the metadata no longer holds are forgotten.
    #[test]
    fn kept_snapshot_json_is_used_only_for_the_same_snapshot() {
        let kept = SnapshotJson::default();
        let written = |md: &TableMetadata| {
            let ours = to_vec(md, Some(&ref_map(md)), &kept).unwrap();
            let theirs = serde_json::to_vec(md).unwrap();
            let value = |b: &[u8]| serde_json::from_slice::<serde_json::Value>(b).unwrap();
            assert_eq!(value(&ours), value(&theirs));
            let parsed: TableMetadata = serde_json::from_slice(&ours).unwrap();
            assert_eq!(&parsed, md);
            kept.table(md.uuid())
                .lock()
                .unwrap()
                .keys()
                .copied()
                .collect::<std::collections::BTreeSet<i64>>()
        };
        let md = rich();
        assert_eq!(written(&md), [1, 2, 3].into());
        // The same metadata again, then read back from its JSON (new, equal snapshots).
        assert_eq!(written(&md), [1, 2, 3].into());
        let mut json: serde_json::Value = serde_json::to_value(&md).unwrap();
        let again: TableMetadata = serde_json::from_value(json.clone()).unwrap();
        assert_eq!(written(&again), [1, 2, 3].into());
        // Snapshot 3 under the same id with another summary: written from the new one.
        let snapshots = json["snapshots"].as_array_mut().unwrap();
        for snap in snapshots.iter_mut() {
            if snap["snapshot-id"] == 3 {
                snap["summary"]["sugarshack.x"] = "2".into();
            }
        }
        let changed: TableMetadata = serde_json::from_value(json.clone()).unwrap();
        assert_eq!(written(&changed), [1, 2, 3].into());
        let ours = to_vec(&changed, Some(&ref_map(&changed)), &kept).unwrap();
        assert!(
            String::from_utf8(ours)
                .unwrap()
                .contains(r#""sugarshack.x":"2""#)
        );
        // Snapshot 2 expired: forgotten.
        json["snapshots"]
            .as_array_mut()
            .unwrap()
            .retain(|snap| snap["snapshot-id"] != 2);
        let expired: TableMetadata = serde_json::from_value(json).unwrap();
        assert_eq!(written(&expired), [1, 3].into());
        // Another table's snapshots are its own.
        let other = rich();
        assert_ne!(other.uuid(), md.uuid());
        assert_eq!(written(&other), [1, 2, 3].into());
    }

    /// Snapshot JSON kept from the file a metadata was read from is what the first commit
    /// copies: the metadata written is the same as iceberg-rust's, and a snapshot's JSON is
    /// the file's own (here spaced as iceberg-rust would not space it, to tell them apart).
    /// A snapshot the file lists under an id the metadata does not hold, or that cannot be
    /// read, is not kept; one whose id comes later in its object is found all the same.
    #[test]
    fn snapshot_json_read_from_the_file_is_copied_by_the_first_commit() {
        let md = rich();
        let mut json: serde_json::Value = serde_json::to_value(&md).unwrap();
        let snapshots = json["snapshots"].as_array().unwrap().clone();
        let spaced = |snap: &serde_json::Value| serde_json::to_string_pretty(snap).unwrap();
        let mut raws: Vec<String> = snapshots.iter().map(spaced).collect();
        // Snapshot 2's id after its other fields (a writer that orders them otherwise).
        let two = raws
            .iter_mut()
            .find(|r| r.contains("\"snapshot-id\": 2"))
            .unwrap();
        let mut reordered = serde_json::Map::new();
        let obj = serde_json::from_str::<serde_json::Value>(two).unwrap();
        for (k, v) in obj.as_object().unwrap() {
            if k != "snapshot-id" {
                reordered.insert(k.clone(), v.clone());
            }
        }
        let mut tail = serde_json::to_string(&reordered).unwrap();
        tail.truncate(tail.len() - 1);
        *two = format!("{tail},\"snapshot-id\":2}}");
        // A snapshot the metadata does not hold, and one without an id.
        raws.push(r#"{"snapshot-id":77,"summary":{"operation":"append"}}"#.to_string());
        raws.push(r#"{"summary":{"operation":"append"}}"#.to_string());
        let parsed_raws: Vec<Box<RawValue>> = raws
            .iter()
            .map(|r| RawValue::from_string(r.clone()).unwrap())
            .collect();
        let borrowed: Vec<&RawValue> = parsed_raws.iter().map(|r| r.as_ref()).collect();
        json["snapshots"] = serde_json::Value::Array(snapshots);
        let read: TableMetadata = serde_json::from_value(json).unwrap();

        let kept = SnapshotJson::default();
        kept.keep_read(&read, &borrowed);
        let ids: std::collections::BTreeSet<i64> = kept
            .table(read.uuid())
            .lock()
            .unwrap()
            .keys()
            .copied()
            .collect();
        assert_eq!(ids, [1, 2, 3].into());
        let ours = to_vec(&read, Some(&ref_map(&read)), &kept).unwrap();
        let text = String::from_utf8(ours.clone()).unwrap();
        for raw in &raws[..3] {
            assert!(text.contains(raw.as_str()), "not copied: {raw}");
        }
        let value = |b: &[u8]| serde_json::from_slice::<serde_json::Value>(b).unwrap();
        assert_eq!(value(&ours), value(&serde_json::to_vec(&read).unwrap()));
        let back: TableMetadata = serde_json::from_slice(&ours).unwrap();
        assert_eq!(back, read);
        // Another metadata's snapshots are not taken for these.
        let other = rich();
        let ours = to_vec(&other, Some(&ref_map(&other)), &kept).unwrap();
        assert!(!String::from_utf8(ours).unwrap().contains(raws[0].as_str()));
    }

    #[test]
    fn a_snapshot_id_is_read_off_the_front_or_by_parsing() {
        let id = |s: &str| snapshot_id(&RawValue::from_string(s.to_string()).unwrap());
        assert_eq!(id(r#"{"snapshot-id":-5,"x":1}"#), Some(-5));
        assert_eq!(id(r#"{"snapshot-id":9223372036854775807}"#), Some(i64::MAX));
        assert_eq!(id(r#"{ "snapshot-id" : 12 }"#), Some(12));
        assert_eq!(id(r#"{"x":{"snapshot-id":1},"snapshot-id":3}"#), Some(3));
        assert_eq!(id(r#"{"snapshot-id":"3"}"#), None);
        assert_eq!(id(r#"{"snapshot-id":99999999999999999999}"#), None);
        assert_eq!(id(r#"{"x":1}"#), None);
    }

    #[test]
    fn unknown_or_disagreeing_refs_go_to_iceberg_rust() {
        let md = rich();
        let theirs = |b: Vec<u8>| serde_json::from_slice::<serde_json::Value>(&b).unwrap();
        let want = theirs(serde_json::to_vec(&md).unwrap());
        assert_eq!(
            theirs(to_vec(&md, None, &SnapshotJson::default()).unwrap()),
            want
        );
        // A ref at another snapshot, and one the metadata does not have.
        for (name, id) in [("audit", 2), ("elsewhere", 1)] {
            let mut refs = ref_map(&md);
            refs.insert(name.to_string(), (true, id));
            assert!(!agrees(&md, &refs));
            assert_eq!(
                theirs(to_vec(&md, Some(&refs), &SnapshotJson::default()).unwrap()),
                want
            );
        }
        assert!(agrees(&md, &ref_map(&md)));
    }
}
