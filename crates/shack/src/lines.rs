//! Reading landing files without parsing them: a file's identity (sha256, size, line count) in
//! one streaming pass, and its lines in another, as Arrow rows of bounded size.

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

use arrow_array::builder::{
    Int64Builder, LargeBinaryBuilder, StringBuilder, TimestampMicrosecondBuilder,
};
use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::SchemaRef;
use sha2::{Digest, Sha256};

use crate::error::{Result, ShackError};

const READ_BUFFER: usize = 256 * 1024;

/// What a landing file is, by content.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct FileDigest {
    /// Hex sha256 of the bytes.
    pub sha256: String,
    pub bytes: u64,
    /// Lines as bronze counts them: every `\n`, plus a last line without one.
    pub lines: u64,
}

fn read_error(path: &Path, line: Option<u64>, error: std::io::Error) -> ShackError {
    ShackError::Read {
        path: path.to_path_buf(),
        line,
        error,
    }
}

/// Hash a file and count its lines in one pass with a fixed buffer.
pub(crate) fn digest(path: &Path) -> Result<FileDigest> {
    let mut f = File::open(path).map_err(|e| read_error(path, None, e))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; READ_BUFFER];
    let mut bytes = 0u64;
    let mut newlines = 0u64;
    let mut last = None;
    loop {
        let n = match f.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(read_error(path, None, e)),
        };
        let chunk = &buf[..n];
        hasher.update(chunk);
        bytes += n as u64;
        newlines += chunk.iter().filter(|b| **b == b'\n').count() as u64;
        last = chunk.last().copied();
    }
    let unterminated = u64::from(matches!(last, Some(b) if b != b'\n'));
    Ok(FileDigest {
        sha256: hex::encode(hasher.finalize()),
        bytes,
        lines: newlines + unterminated,
    })
}

/// [`digest`] of every path, in order, the files shared out over the cores (a tap of a whole
/// season hashes thousands of small files). Each answer stands alone: a file that cannot be read
/// is an error in its own place.
pub(crate) fn digest_all(paths: &[&Path]) -> Vec<Result<FileDigest>> {
    crate::par::map_in_order(paths, 16, |p| digest(p))
}

/// The lines of a file, one at a time, hashing the bytes as they go by so the caller can check
/// that what it read is what it hashed.
pub(crate) struct LineReader {
    path: PathBuf,
    reader: BufReader<File>,
    hasher: Sha256,
    buf: Vec<u8>,
    line: u64,
}

impl LineReader {
    pub(crate) fn open(path: &Path) -> Result<LineReader> {
        let f = File::open(path).map_err(|e| read_error(path, None, e))?;
        Ok(LineReader {
            path: path.to_path_buf(),
            reader: BufReader::with_capacity(READ_BUFFER, f),
            hasher: Sha256::new(),
            buf: Vec::new(),
            line: 0,
        })
    }

    /// The next line without its `\n`, and its number (from 1); `None` at the end.
    pub(crate) fn next_line(&mut self) -> Result<Option<(u64, &[u8])>> {
        self.buf.clear();
        let n = loop {
            match self.reader.read_until(b'\n', &mut self.buf) {
                Ok(n) => break n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(read_error(&self.path, Some(self.line + 1), e)),
            }
        };
        if n == 0 {
            return Ok(None);
        }
        self.hasher.update(&self.buf);
        self.line += 1;
        let line = self.buf.strip_suffix(b"\n").unwrap_or(&self.buf);
        Ok(Some((self.line, line)))
    }

    /// The hex sha256 of everything read, and how many lines.
    pub(crate) fn finish(self) -> (String, u64) {
        (hex::encode(self.hasher.finalize()), self.line)
    }
}

/// Where a file's lines came from: the lineage every bronze row carries.
pub(crate) struct Lineage<'a> {
    pub file: &'a str,
    pub sha256: &'a str,
    pub arrived_us: i64,
}

/// Bronze rows being gathered, flushed to a data file when they reach a bound.
pub(crate) struct RowBuffer {
    schema: SchemaRef,
    raw: StringBuilder,
    raw_bytes: LargeBinaryBuilder,
    file: StringBuilder,
    line: Int64Builder,
    sha256: StringBuilder,
    arrived: TimestampMicrosecondBuilder,
    rows: usize,
    bytes: usize,
    max_rows: usize,
    max_bytes: usize,
}

impl RowBuffer {
    pub(crate) fn new(schema: SchemaRef, max_rows: usize, max_bytes: usize) -> RowBuffer {
        RowBuffer {
            schema,
            raw: StringBuilder::new(),
            raw_bytes: LargeBinaryBuilder::new(),
            file: StringBuilder::new(),
            line: Int64Builder::new(),
            sha256: StringBuilder::new(),
            arrived: TimestampMicrosecondBuilder::new(),
            rows: 0,
            bytes: 0,
            max_rows: max_rows.max(1),
            max_bytes: max_bytes.max(1),
        }
    }

    /// Add one line. Valid UTF-8 is stored as is; anything else as its lossy decoding plus the
    /// exact bytes.
    pub(crate) fn push(&mut self, number: u64, line: &[u8], from: &Lineage<'_>) {
        match std::str::from_utf8(line) {
            Ok(s) => {
                self.raw.append_value(s);
                self.raw_bytes.append_null();
            }
            Err(_) => {
                self.raw.append_value(String::from_utf8_lossy(line));
                self.raw_bytes.append_value(line);
                self.bytes += line.len();
            }
        }
        self.file.append_value(from.file);
        self.line
            .append_value(i64::try_from(number).unwrap_or(i64::MAX));
        self.sha256.append_value(from.sha256);
        self.arrived.append_value(from.arrived_us);
        self.rows += 1;
        self.bytes += line.len() + from.file.len() + from.sha256.len() + 16;
    }

    pub(crate) fn is_full(&self) -> bool {
        self.rows >= self.max_rows || self.bytes >= self.max_bytes
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.rows == 0
    }

    /// The gathered rows as one batch; the buffer starts over empty.
    pub(crate) fn take(&mut self, table: &str) -> Result<RecordBatch> {
        let arrived_type = self.schema.field(5).data_type().clone();
        let columns: Vec<ArrayRef> = vec![
            std::sync::Arc::new(self.raw.finish()),
            std::sync::Arc::new(self.raw_bytes.finish()),
            std::sync::Arc::new(self.file.finish()),
            std::sync::Arc::new(self.line.finish()),
            std::sync::Arc::new(self.sha256.finish()),
            std::sync::Arc::new(self.arrived.finish().with_data_type(arrived_type)),
        ];
        self.rows = 0;
        self.bytes = 0;
        RecordBatch::try_new(self.schema.clone(), columns).map_err(|e| ShackError::BadTable {
            table: table.to_string(),
            detail: format!("building a batch of rows: {e}"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, bytes).expect("write test file");
        p
    }

    /// Digests taken on several threads are each file's own, in the order asked, and a file that
    /// cannot be read is an error in its own place.
    #[test]
    fn digests_of_many_files_come_back_in_order() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut paths: Vec<PathBuf> = (0..70)
            .map(|i| {
                write(
                    dir.path(),
                    &format!("f{i}.txt"),
                    format!("{i}\n{}", "x".repeat(i)).as_bytes(),
                )
            })
            .collect();
        paths.insert(33, dir.path().join("missing.txt"));
        let refs: Vec<&Path> = paths.iter().map(PathBuf::as_path).collect();
        let all = digest_all(&refs);
        assert_eq!(all.len(), refs.len());
        for (p, d) in refs.iter().zip(&all) {
            match (d, digest(p)) {
                (Ok(a), Ok(b)) => assert_eq!(*a, b, "{}", p.display()),
                (Err(_), Err(_)) => assert!(p.ends_with("missing.txt")),
                (a, b) => panic!("{}: {a:?} vs {b:?}", p.display()),
            }
        }
    }

    #[test]
    fn lines_are_counted_the_way_they_are_read() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cases: [(&[u8], &[&[u8]]); 7] = [
            (b"", &[]),
            (b"\n", &[b""]),
            (b"a", &[b"a"]),
            (b"a\n", &[b"a"]),
            (b"a\nb", &[b"a", b"b"]),
            (b"a\r\n\nb\n", &[b"a\r", b"", b"b"]),
            (b"{\"x\": 1}\n{\"tru", &[b"{\"x\": 1}", b"{\"tru"]),
        ];
        for (i, (bytes, want)) in cases.iter().enumerate() {
            let p = write(dir.path(), &format!("f{i}"), bytes);
            let d = digest(&p).expect("digest");
            assert_eq!(d.lines, want.len() as u64, "case {i}");
            assert_eq!(d.bytes, bytes.len() as u64);
            let mut r = LineReader::open(&p).expect("open");
            let mut got = Vec::new();
            while let Some((n, l)) = r.next_line().expect("line") {
                assert_eq!(n, got.len() as u64 + 1);
                got.push(l.to_vec());
            }
            let (sha, lines) = r.finish();
            assert_eq!(sha, d.sha256);
            assert_eq!(lines, d.lines);
            let want: Vec<Vec<u8>> = want.iter().map(|w| w.to_vec()).collect();
            assert_eq!(got, want, "case {i}");
        }
    }

    #[test]
    fn non_utf8_lines_keep_their_bytes() {
        let mut buf = RowBuffer::new(crate::bronze::source_schema(), 10, 1 << 20);
        let from = Lineage {
            file: "payments/2026-08-17/x.jsonl",
            sha256: "00",
            arrived_us: 0,
        };
        buf.push(1, b"ok", &from);
        buf.push(2, b"caf\xe9", &from);
        let batch = buf.take("bronze.payments").expect("batch");
        let raw = batch
            .column(0)
            .as_any()
            .downcast_ref::<arrow_array::StringArray>()
            .expect("string");
        let bytes = batch
            .column(1)
            .as_any()
            .downcast_ref::<arrow_array::LargeBinaryArray>()
            .expect("binary");
        assert_eq!(raw.value(0), "ok");
        assert!(arrow_array::Array::is_null(bytes, 0));
        assert_eq!(raw.value(1), "caf\u{fffd}");
        assert_eq!(bytes.value(1), b"caf\xe9");
        assert!(buf.is_empty());
    }
}
