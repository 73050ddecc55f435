//! The lake on S3 (and S3-compatible stores): `s3://bucket/prefix` locations.
//!
//! [`S3Config`] builds one store per bucket from the usual AWS environment (`AWS_ENDPOINT_URL`,
//! `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`, `AWS_ALLOW_HTTP`, … — every
//! `AWS_*` variable object_store's `AmazonS3Builder::from_env` knows), then any options given in
//! code (object_store's `AmazonS3ConfigKey` names: `aws_endpoint`, `aws_access_key_id`, …).
//!
//! The catalog's safety rests on create-if-absent: a catalog version is written with
//! `PutMode::Create`, which object_store sends as `If-None-Match: *`. A store that ignores that
//! header would let two writers both win one version, so every store built here checks, before
//! its first create-if-absent put, that the bucket refuses a second create of a fresh marker
//! object (written next to the object being put, then deleted). When it does not, every
//! create-if-absent put on that store fails with [`LakeError::NoCreateIfAbsent`] and nothing is
//! written. The check runs once per store (per bucket and process); a transport failure during
//! it is returned as that put's error and the check runs again on the next put.

use std::fmt;
use std::ops::Range;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;
use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey, S3ConditionalPut};
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    ObjectStoreExt, PutMode, PutMultipartOptions, PutOptions, PutPayload, PutResult, RetryConfig,
};
use tokio::sync::OnceCell;
use url::Url;

use crate::error::{LakeError, Result};

/// How to reach S3 buckets: the AWS environment, then options set here (which win).
#[derive(Clone, Debug, Default)]
pub struct S3Config {
    options: Vec<(String, String)>,
    retry: Option<RetryConfig>,
    no_env: bool,
}

impl S3Config {
    /// Everything from the AWS environment.
    pub fn new() -> Self {
        Self::default()
    }

    /// Set one option by its object_store name (`aws_endpoint`, `aws_access_key_id`,
    /// `aws_secret_access_key`, `aws_region`, `aws_allow_http`, `aws_conditional_put`, …); it
    /// wins over the environment. An unknown name fails [`S3Config::build`].
    pub fn option(mut self, key: &str, value: &str) -> Self {
        self.options.push((key.to_string(), value.to_string()));
        self
    }

    /// Retry and back off as `retry` says (object_store's default retries for up to three
    /// minutes; tests of a stopped server want less).
    pub fn retry(mut self, retry: RetryConfig) -> Self {
        self.retry = Some(retry);
        self
    }

    /// Ignore the `AWS_*` environment: only the options set here count.
    pub fn without_env(mut self) -> Self {
        self.no_env = true;
        self
    }

    /// The store for the bucket of `url` (`s3://bucket[/…]` or `s3a://…`; the path is ignored:
    /// the store's object paths are the URL paths under the bucket).
    pub fn build(&self, url: &str) -> Result<Arc<dyn ObjectStore>> {
        let bad = |detail: String| LakeError::Location {
            location: url.to_string(),
            detail,
        };
        let parsed = Url::parse(url).map_err(|e| bad(e.to_string()))?;
        if !matches!(parsed.scheme(), "s3" | "s3a") {
            return Err(bad("not an s3:// URL".into()));
        }
        let bucket = parsed
            .host_str()
            .filter(|b| !b.is_empty())
            .ok_or_else(|| bad("an s3:// URL names a bucket: s3://bucket/prefix".into()))?;
        let mut builder = if self.no_env {
            AmazonS3Builder::new()
        } else {
            AmazonS3Builder::from_env()
        }
        .with_bucket_name(bucket)
        .with_conditional_put(S3ConditionalPut::ETagMatch);
        for (k, v) in &self.options {
            let key: AmazonS3ConfigKey = k
                .parse()
                .map_err(|e| bad(format!("unknown S3 option {k:?}: {e}")))?;
            builder = builder.with_config(key, v);
        }
        if let Some(retry) = &self.retry {
            builder = builder.with_retry(retry.clone());
        }
        let s3 = builder
            .build()
            .map_err(|e| bad(format!("cannot build an S3 store for bucket {bucket}: {e}")))?;
        Ok(Arc::new(CheckedStore::new(
            Arc::new(s3),
            format!("s3://{bucket}"),
        )))
    }
}

/// A store that checks it really refuses a second create-if-absent before its first one.
#[derive(Debug)]
pub(crate) struct CheckedStore {
    inner: Arc<dyn ObjectStore>,
    root: String,
    /// `Ok(())`: the store refuses a second create. `Err(why)`: it does not (final).
    verdict: OnceCell<std::result::Result<(), String>>,
}

impl fmt::Display for CheckedStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.root, self.inner)
    }
}

impl CheckedStore {
    pub(crate) fn new(inner: Arc<dyn ObjectStore>, root: String) -> Self {
        CheckedStore {
            inner,
            root,
            verdict: OnceCell::new(),
        }
    }

    /// Put a fresh marker beside `next_to` twice with create-if-absent: the second must be
    /// refused. Transport failures are returned (and the check runs again next time).
    async fn probe(&self, next_to: &Path) -> object_store::Result<std::result::Result<(), String>> {
        let dir: Vec<_> = next_to.parts().collect();
        let marker_name = format!(".sugarshack-create-if-absent-{}", uuid::Uuid::new_v4());
        let marker = match dir.split_last() {
            Some((_, parents)) => Path::from_iter(
                parents
                    .iter()
                    .cloned()
                    .chain(std::iter::once(marker_name.as_str().into())),
            ),
            None => Path::from(marker_name.as_str()),
        };
        let create = || PutOptions {
            mode: PutMode::Create,
            ..Default::default()
        };
        let at = format!("{}/{marker}", self.root);
        let verdict = match self
            .inner
            .put_opts(&marker, PutPayload::from_static(b"1"), create())
            .await
        {
            Ok(_) => match self
                .inner
                .put_opts(&marker, PutPayload::from_static(b"2"), create())
                .await
            {
                Err(object_store::Error::AlreadyExists { .. }) => Ok(()),
                Ok(_) => Err(format!(
                    "it accepted a second create-if-absent put (If-None-Match: *) of {at}, so two writers could both win one catalog version"
                )),
                Err(object_store::Error::NotImplemented { .. }) => {
                    Err(format!("it cannot put {at} only if absent"))
                }
                Err(e) => {
                    let _ = self.inner.delete(&marker).await;
                    return Err(e);
                }
            },
            Err(object_store::Error::NotImplemented { .. }) => Err(format!(
                "it cannot put {at} only if absent (conditional put is disabled)"
            )),
            Err(e) => return Err(e),
        };
        let _ = self.inner.delete(&marker).await;
        Ok(verdict)
    }

    async fn check(&self, next_to: &Path) -> object_store::Result<()> {
        let verdict = self.verdict.get_or_try_init(|| self.probe(next_to)).await?;
        verdict
            .clone()
            .map_err(|detail| object_store::Error::NotImplemented {
                operation: format!("create-if-absent: {detail}"),
                implementer: self.root.clone(),
            })
    }
}

#[async_trait]
impl ObjectStore for CheckedStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        if matches!(opts.mode, PutMode::Create) {
            self.check(location).await?;
        }
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        self.inner.get_opts(location, options).await
    }

    async fn get_ranges(
        &self,
        location: &Path,
        ranges: &[Range<u64>],
    ) -> object_store::Result<Vec<Bytes>> {
        self.inner.get_ranges(location, ranges).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        self.inner.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.inner.list(prefix)
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.inner.list_with_offset(prefix, offset)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(
        &self,
        from: &Path,
        to: &Path,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        self.inner.copy_opts(from, to, options).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::memory::InMemory;

    /// A store that ignores `PutMode::Create` (as a store ignoring If-None-Match would).
    #[derive(Debug)]
    struct Careless(InMemory);

    impl fmt::Display for Careless {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "Careless")
        }
    }

    #[async_trait]
    impl ObjectStore for Careless {
        async fn put_opts(
            &self,
            location: &Path,
            payload: PutPayload,
            _opts: PutOptions,
        ) -> object_store::Result<PutResult> {
            self.0
                .put_opts(location, payload, PutOptions::default())
                .await
        }
        async fn put_multipart_opts(
            &self,
            location: &Path,
            opts: PutMultipartOptions,
        ) -> object_store::Result<Box<dyn MultipartUpload>> {
            self.0.put_multipart_opts(location, opts).await
        }
        async fn get_opts(
            &self,
            location: &Path,
            options: GetOptions,
        ) -> object_store::Result<GetResult> {
            self.0.get_opts(location, options).await
        }
        fn delete_stream(
            &self,
            locations: BoxStream<'static, object_store::Result<Path>>,
        ) -> BoxStream<'static, object_store::Result<Path>> {
            self.0.delete_stream(locations)
        }
        fn list(
            &self,
            prefix: Option<&Path>,
        ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
            self.0.list(prefix)
        }
        async fn list_with_delimiter(
            &self,
            prefix: Option<&Path>,
        ) -> object_store::Result<ListResult> {
            self.0.list_with_delimiter(prefix).await
        }
        async fn copy_opts(
            &self,
            from: &Path,
            to: &Path,
            options: CopyOptions,
        ) -> object_store::Result<()> {
            self.0.copy_opts(from, to, options).await
        }
    }

    #[tokio::test]
    async fn a_store_that_accepts_a_second_create_is_refused_before_anything_is_written() {
        let store = Arc::new(Careless(InMemory::new()));
        let checked = CheckedStore::new(store.clone(), "s3://careless".into());
        let create = PutOptions {
            mode: PutMode::Create,
            ..Default::default()
        };
        let p = Path::from("c/versions/v1.json");
        let err = checked
            .put_opts(&p, PutPayload::from_static(b"x"), create.clone())
            .await
            .unwrap_err();
        assert!(
            matches!(&err, object_store::Error::NotImplemented { .. }),
            "{err}"
        );
        assert!(err.to_string().contains("second create-if-absent"), "{err}");
        // Nothing written: neither the version nor the marker.
        let left: Vec<_> = futures::TryStreamExt::try_collect::<Vec<_>>(store.list(None))
            .await
            .unwrap();
        assert!(left.is_empty(), "{left:?}");
        // The verdict is kept: the next create fails the same way, plain puts still work.
        assert!(
            checked
                .put_opts(&p, PutPayload::from_static(b"x"), create)
                .await
                .is_err()
        );
        checked
            .put(&Path::from("c/hint"), PutPayload::from_static(b"1"))
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn a_store_that_refuses_a_second_create_passes_and_leaves_no_marker() {
        let store = Arc::new(InMemory::new());
        let checked = CheckedStore::new(store.clone(), "s3://ok".into());
        let create = || PutOptions {
            mode: PutMode::Create,
            ..Default::default()
        };
        let p = Path::from("c/versions/v1.json");
        checked
            .put_opts(&p, PutPayload::from_static(b"x"), create())
            .await
            .unwrap();
        assert!(matches!(
            checked
                .put_opts(&p, PutPayload::from_static(b"y"), create())
                .await,
            Err(object_store::Error::AlreadyExists { .. })
        ));
        let left: Vec<_> = futures::TryStreamExt::try_collect::<Vec<_>>(store.list(None))
            .await
            .unwrap();
        assert_eq!(left.len(), 1, "only the version: {left:?}");
    }

    #[test]
    fn bad_urls_and_unknown_options_are_location_errors() {
        assert!(matches!(
            S3Config::new().build("gs://b/x"),
            Err(LakeError::Location { .. })
        ));
        assert!(matches!(
            S3Config::new()
                .option("aws_no_such_thing", "1")
                .build("s3://b/x"),
            Err(LakeError::Location { .. })
        ));
        let s = S3Config::new()
            .without_env()
            .option("aws_region", "us-east-1")
            .build("s3://b/x")
            .unwrap();
        assert!(s.to_string().starts_with("s3://b"), "{s}");
    }
}
