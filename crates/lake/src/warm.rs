//! Reading a table's history ahead, into the catalog handle's caches, while other work runs.
//!
//! A new process knows nothing of a table: the first scan or lookup of it reads and parses the
//! table's metadata, the manifest list and manifests of the snapshot it reads, and (for a
//! lookup) the footer and bloom filters of every data file the lookup plans. That grows with
//! the table's history, and it sits on the path of whatever step needs it first. [`Table::warm`]
//! and [`Catalog::warm`] do the same reads beforehand, so a caller can start them beside work
//! that does not need them (a run warms silver and gold while its tap reads the landing zone)
//! and the later step finds them kept.
//!
//! What is read is exactly what those steps read, kept where they look for it (every cache key
//! is an immutable file's location, so nothing warmed can be stale). A warm-up changes no
//! answer: a read that finds nothing kept reads it itself, and one that fails reports its own
//! error. What this module does not do: read any row, nor choose what to warm (the caller
//! names the tables and the ref).

use futures::{StreamExt, TryStreamExt};
use iceberg::spec::{PrimitiveType, Type};

use crate::catalog::Catalog;
use crate::error::{LakeError, Result};
use crate::lookup::key_index;
use crate::read::{lookup_parallelism, spawned};
use crate::table::{At, Table};
use crate::write::PROP_BLOOM_COLUMN;

/// What a warm-up went through (whether it read each thing or found it kept already).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Warmed {
    /// Tables with a snapshot at the ref asked: their manifest list and manifests are kept.
    pub tables: usize,
    /// Live data files in those snapshots.
    pub data_files: usize,
    /// Key indexes kept: a data file's footer and its bloom filters on one key column, for
    /// each column its table asks bloom filters on ([`PROP_BLOOM_COLUMN`]).
    pub key_indexes: usize,
}

impl Warmed {
    fn add(&mut self, other: &Warmed) {
        self.tables += other.tables;
        self.data_files += other.data_files;
        self.key_indexes += other.key_indexes;
    }
}

impl Table {
    /// Read ahead what reading this table at `at` and looking it up by key will need: the
    /// snapshot's manifest list and manifests, and for each top-level string column the table
    /// asks bloom filters on ([`PROP_BLOOM_COLUMN`]), every live data file's footer and
    /// filters on it (what [`Table::lookup`] reads of a file before it reads any row). Kept on
    /// the catalog handle, as those reads keep them; nothing kept already is read again. A
    /// table with no snapshot at `at` reads nothing.
    pub async fn warm(&self, at: &At) -> Result<Warmed> {
        let mut out = Warmed::default();
        let Some(id) = self.resolve(at)? else {
            return Ok(out);
        };
        let tasks = self.plan_files_at(id, None, None).await?;
        out.tables = 1;
        out.data_files = tasks.len();
        let keys = self.bloom_keys();
        if keys.is_empty() {
            return Ok(out);
        }
        let name = self.name().to_string();
        let jobs: Vec<_> = tasks
            .iter()
            .flat_map(|task| keys.iter().map(move |key| (task.clone(), key.clone())))
            .collect();
        out.key_indexes = jobs.len();
        // As a lookup reads them: several files in flight, each on a task of its own, so the
        // waits on the store overlap and the decoding takes whichever core is free.
        futures::stream::iter(jobs)
            .map(|(task, (field_id, key))| {
                let catalog = self.catalog().clone();
                let ctx = format!("reading ahead the key index of {name} on {key}");
                async move {
                    spawned(&ctx, async move {
                        key_index(&catalog, &task, field_id, &key).await.map(drop)
                    })
                    .await?
                    .map_err(|e| LakeError::iceberg(ctx, e))
                }
            })
            .buffer_unordered(lookup_parallelism())
            .try_collect::<Vec<()>>()
            .await?;
        Ok(out)
    }

    /// The top-level string columns the table's properties ask bloom filters on, with their
    /// field ids in the current schema (a property naming no such column asks nothing here:
    /// the writer refuses it by name).
    fn bloom_keys(&self) -> Vec<(i32, String)> {
        let schema = self.metadata().current_schema();
        let mut keys: Vec<(i32, String)> = self
            .metadata()
            .properties()
            .iter()
            .filter_map(|(k, v)| {
                let column = k.strip_prefix(PROP_BLOOM_COLUMN)?;
                if !v.trim().eq_ignore_ascii_case("true") {
                    return None;
                }
                let field = schema.as_struct().field_by_name(column)?;
                matches!(*field.field_type, Type::Primitive(PrimitiveType::String))
                    .then(|| (field.id, column.to_string()))
            })
            .collect();
        keys.sort();
        keys
    }
}

/// A warm-up running on a thread of its own ([`Catalog::warm_in_background`]). Dropping it
/// stops the warm-up at its next wait on the store; [`WarmUp::wait`] waits for it instead.
pub struct WarmUp {
    _stop: tokio::sync::oneshot::Sender<()>,
    done: tokio::sync::oneshot::Receiver<Result<Warmed>>,
}

impl WarmUp {
    /// What the warm-up went through, once it is over; `None` when it never ran (its thread
    /// could not be started, or stopped without answering).
    pub async fn wait(self) -> Option<Result<Warmed>> {
        let WarmUp { _stop, done } = self;
        done.await.ok()
    }
}

impl Catalog {
    /// [`Catalog::warm`] on a thread of its own, returning at once. The thread asks for the
    /// lowest CPU priority there is (Linux's `SCHED_IDLE`; elsewhere it runs as any thread
    /// does), so the warm-up takes only the time the caller's own work leaves a core idle
    /// and never slows that work down: started beside a step that needs none of it (a run's
    /// tap), it reads what later steps will need while that step waits on the disk or keeps
    /// one core of two busy. On a machine with no idle core it reads little before it is
    /// dropped, and each step reads what it needs itself, as without it.
    pub fn warm_in_background(&self, names: &[&str], branch: &str) -> WarmUp {
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let (done_tx, done_rx) = tokio::sync::oneshot::channel();
        let catalog = self.clone();
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let branch = branch.to_string();
        // A thread that cannot be started, or a runtime that cannot be built, warms nothing:
        // every read then reads what it needs itself.
        let _ = std::thread::Builder::new()
            .name("lake-warm".into())
            .spawn(move || {
                lowest_priority();
                let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                else {
                    return;
                };
                runtime.block_on(async move {
                    let names: Vec<&str> = names.iter().map(String::as_str).collect();
                    tokio::select! {
                        warmed = catalog.warm(&names, &branch) => {
                            let _ = done_tx.send(warmed);
                        }
                        _ = stop_rx => {}
                    }
                });
            });
        WarmUp {
            _stop: stop_tx,
            done: done_rx,
        }
    }

    /// [`Table::warm`] of each of `names` as the newest catalog version has it (its metadata
    /// read and kept too), at `branch`, or at `main` for a table without that branch. Names
    /// the catalog does not hold are skipped. Tables are warmed one after another, in the order
    /// given (put first what is needed first), each table's files several at a time.
    pub async fn warm(&self, names: &[&str], branch: &str) -> Result<Warmed> {
        let head = self.head().await?;
        let mut out = Warmed::default();
        for name in names {
            if !head.tables.contains_key(*name) {
                continue;
            }
            let table = self.table_in(&head, name).await?;
            let at = if table.head(branch).is_some() {
                At::reference(branch)
            } else {
                At::Main
            };
            out.add(&table.warm(&at).await?);
        }
        Ok(out)
    }
}

/// Put the calling thread at the lowest CPU priority there is: Linux's `SCHED_IDLE`, which
/// runs it only on a core nothing else wants (the threads it starts inherit it). Best effort:
/// where that is refused, or elsewhere, the thread keeps the priority it has.
fn lowest_priority() {
    #[cfg(target_os = "linux")]
    {
        let param = libc::sched_param { sched_priority: 0 };
        // SAFETY: a valid parameter for SCHED_IDLE (priority 0), applied to this thread only
        // (pid 0 is the calling thread).
        unsafe {
            libc::sched_setscheduler(0, libc::SCHED_IDLE, &param);
        }
    }
}
