//! Object storage (`s3://bucket/prefix`, `gs://…`, `az://…`) through the `object_store` crate
//! on a small tokio runtime; the callers stay synchronous and keep their CPU work on their own
//! threads. Credentials come from the usual environment variables (`AWS_ACCESS_KEY_ID`,
//! `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`, `AWS_ENDPOINT_URL`, `AWS_ALLOW_HTTP`; `GOOGLE_*`;
//! `AZURE_*`), read by each store's `from_env`.
//!
//! A location is a `Path` throughout bertpipe: one that starts with a URL scheme is remote.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use bytes::Bytes;
use futures::stream::{BoxStream, StreamExt};
use object_store::path::Path as ObjPath;
use object_store::{ObjectStore, ObjectStoreExt, RetryConfig, WriteMultipart};

/// The schemes read as object storage.
const SCHEMES: [&str; 7] = ["s3://", "s3a://", "gs://", "az://", "abfs://", "abfss://", "azure://"];

/// Whether `path` names an object-storage location rather than a local path.
pub fn is_remote(path: &Path) -> bool {
    path.to_str().is_some_and(|s| SCHEMES.iter().any(|p| s.starts_with(p)))
}

fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("bertpipe-io")
            .enable_all()
            .build()
            .expect("a tokio runtime for object storage")
    })
}

/// Retries of a failed request: `BERTPIPE_STORE_RETRIES` (default 10) over at most
/// `BERTPIPE_STORE_RETRY_SECS` seconds (default 180), with exponential backoff.
fn retry_config() -> RetryConfig {
    let env = |k: &str, d: u64| std::env::var(k).ok().and_then(|v| v.parse().ok()).unwrap_or(d);
    RetryConfig {
        max_retries: env("BERTPIPE_STORE_RETRIES", 10) as usize,
        retry_timeout: Duration::from_secs(env("BERTPIPE_STORE_RETRY_SECS", 180)),
        ..Default::default()
    }
}

/// A folder-like prefix in an object store.
#[derive(Clone)]
pub struct Remote {
    store: Arc<dyn ObjectStore>,
    prefix: ObjPath,
    url: String,
}

impl std::fmt::Debug for Remote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Remote({})", self.url)
    }
}

impl Remote {
    /// Opens `s3://bucket/prefix` (or gs://, az://) with credentials from the environment.
    pub fn open(location: &Path) -> Result<Remote> {
        let url = location.to_str().context("an object-storage URL must be UTF-8")?.trim_end_matches('/').to_string();
        let parsed = url::Url::parse(&url).with_context(|| format!("'{url}' is not a valid URL"))?;
        let retry = retry_config();
        let store: Arc<dyn ObjectStore> = match parsed.scheme() {
            "s3" | "s3a" => Arc::new(
                object_store::aws::AmazonS3Builder::from_env()
                    .with_url(url.clone())
                    .with_retry(retry)
                    .build()
                    .with_context(|| format!("could not set up S3 access for '{url}' (AWS_* environment variables)"))?,
            ),
            "gs" => Arc::new(
                object_store::gcp::GoogleCloudStorageBuilder::from_env()
                    .with_url(url.clone())
                    .with_retry(retry)
                    .build()
                    .with_context(|| {
                        format!("could not set up GCS access for '{url}' (GOOGLE_* environment variables)")
                    })?,
            ),
            "az" | "abfs" | "abfss" | "azure" => Arc::new(
                object_store::azure::MicrosoftAzureBuilder::from_env()
                    .with_url(url.clone())
                    .with_retry(retry)
                    .build()
                    .with_context(|| {
                        format!("could not set up Azure access for '{url}' (AZURE_* environment variables)")
                    })?,
            ),
            other => bail!("'{url}': unsupported scheme `{other}` (s3://, gs://, az:// are)"),
        };
        // The bucket (or container) is the URL's host; the prefix is its path.
        let prefix = ObjPath::parse(parsed.path().trim_matches('/'))
            .with_context(|| format!("'{url}' has a path that is not a valid object key"))?;
        Ok(Remote { store, prefix, url })
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    /// Whether this is a whole bucket (no prefix): never a pipeline's output to replace.
    pub fn is_bucket_root(&self) -> bool {
        self.prefix.as_ref().is_empty()
    }

    /// `url/rel`, for messages.
    pub fn url_of(&self, rel: &str) -> String {
        if rel.is_empty() {
            self.url.clone()
        } else {
            format!("{}/{rel}", self.url)
        }
    }

    fn key(&self, rel: &str) -> ObjPath {
        let mut key = self.prefix.clone();
        for part in rel.split('/').filter(|p| !p.is_empty()) {
            key = key.join(part);
        }
        key
    }

    /// A sub-folder of this prefix.
    pub fn child(&self, rel: &str) -> Remote {
        Remote { store: self.store.clone(), prefix: self.key(rel), url: self.url_of(rel) }
    }

    /// Every object under the prefix: (path relative to it, size), in key order.
    pub fn list(&self) -> Result<Vec<(String, u64)>> {
        Ok(self.metas()?.into_iter().map(|(rel, meta)| (rel, meta.size)).collect())
    }

    /// Every object under the prefix with what the store says of it, by path relative to the
    /// prefix, in key order.
    fn metas(&self) -> Result<Vec<(String, object_store::ObjectMeta)>> {
        let store = self.store.clone();
        let prefix = self.prefix.clone();
        let mut found: Vec<(String, object_store::ObjectMeta)> = runtime()
            .block_on(async move {
                let mut stream = store.list(Some(&prefix));
                let mut out = Vec::new();
                while let Some(meta) = stream.next().await {
                    let meta = meta?;
                    let rel = meta
                        .location
                        .prefix_match(&prefix)
                        .map(|parts| parts.map(|p| p.as_ref().to_string()).collect::<Vec<_>>().join("/"));
                    if let Some(rel) = rel {
                        out.push((rel, meta));
                    }
                }
                Ok::<_, object_store::Error>(out)
            })
            .map_err(|e| explain(e, &self.url))?;
        found.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(found)
    }

    /// The object's size, or `None` when there is no such object.
    pub fn size(&self, rel: &str) -> Result<Option<u64>> {
        let key = self.key(rel);
        match runtime().block_on(self.store.head(&key)) {
            Ok(meta) => Ok(Some(meta.size)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(explain(e, &self.url_of(rel))),
        }
    }

    /// The whole object (its version noted as read, [`crate::contract::reads`]).
    pub fn get(&self, rel: &str) -> Result<Bytes> {
        let key = self.key(rel);
        let store = self.store.clone();
        let (meta, bytes) = runtime()
            .block_on(async move {
                let r = store.get(&key).await?;
                let meta = r.meta.clone();
                Ok::<_, object_store::Error>((meta, r.bytes().await?))
            })
            .map_err(|e| explain(e, &self.url_of(rel)))?;
        crate::contract::reads::note_object(&self.url_of(rel), &version_of(&meta));
        Ok(bytes)
    }

    /// The object as a stream of bytes, read on the calling thread as chunks arrive (its
    /// version noted as read).
    pub fn reader(&self, rel: &str) -> Result<RemoteReader> {
        let key = self.key(rel);
        let store = self.store.clone();
        let (meta, stream) = runtime()
            .block_on(async move { store.get(&key).await.map(|r| (r.meta.clone(), r.into_stream())) })
            .map_err(|e| explain(e, &self.url_of(rel)))?;
        crate::contract::reads::note_object(&self.url_of(rel), &version_of(&meta));
        Ok(RemoteReader { stream, chunk: Bytes::new(), url: self.url_of(rel) })
    }

    /// The version of the object `rel` now ([`version_of`]), or `None` when there is none.
    pub fn version(&self, rel: &str) -> Result<Option<String>> {
        let key = self.key(rel);
        match runtime().block_on(self.store.head(&key)) {
            Ok(meta) => Ok(Some(version_of(&meta))),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(explain(e, &self.url_of(rel))),
        }
    }

    /// Every object under the prefix with its version, in key order: what a chain stage that
    /// reads the prefix is keyed by.
    pub fn versions(&self) -> Result<Vec<(String, String)>> {
        Ok(self.metas()?.into_iter().map(|(rel, meta)| (rel, version_of(&meta))).collect())
    }

    /// Writes `bytes` as the object `rel`, whole or not at all.
    pub fn put(&self, rel: &str, bytes: Vec<u8>) -> Result<()> {
        let key = self.key(rel);
        let store = self.store.clone();
        runtime()
            .block_on(async move { store.put(&key, bytes.into()).await })
            .map(|_| ())
            .map_err(|e| explain(e, &self.url_of(rel)))
            .with_context(|| format!("could not upload '{}'", self.url_of(rel)))
    }

    /// Uploads a local file as the object `rel`: one request up to 32 MiB, a multipart upload
    /// above (aborted on failure). Either way the object appears only once it is complete.
    pub fn upload(&self, rel: &str, file: &Path) -> Result<()> {
        let size = std::fs::metadata(file).with_context(|| format!("could not read '{}'", file.display()))?.len();
        if size <= 32 << 20 {
            let bytes = std::fs::read(file).with_context(|| format!("could not read '{}'", file.display()))?;
            return self.put(rel, bytes);
        }
        let key = self.key(rel);
        let store = self.store.clone();
        let path = file.to_path_buf();
        let url = self.url_of(rel);
        runtime().block_on(async move {
            let upload = store.put_multipart(&key).await.map_err(|e| explain(e, &url))?;
            let mut writer = WriteMultipart::new_with_chunk_size(upload, 16 << 20);
            let mut f = std::fs::File::open(&path).with_context(|| format!("could not read '{}'", path.display()))?;
            let mut buf = vec![0u8; 8 << 20];
            loop {
                let n = f.read(&mut buf).with_context(|| format!("could not read '{}'", path.display()))?;
                if n == 0 {
                    break;
                }
                if let Err(e) = writer.wait_for_capacity(4).await {
                    let _ = writer.abort().await;
                    return Err(explain(e, &url)).with_context(|| format!("could not upload '{url}'"));
                }
                writer.write(&buf[..n]);
            }
            writer.finish().await.map_err(|e| explain(e, &url)).with_context(|| format!("could not upload '{url}'"))?;
            Ok(())
        })
    }

    pub fn delete(&self, rel: &str) -> Result<()> {
        let key = self.key(rel);
        match runtime().block_on(self.store.delete(&key)) {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(explain(e, &self.url_of(rel))),
        }
    }

    /// Downloads the object to a local file (written aside, then renamed); returns the
    /// SHA-256 of what was written, computed on the way.
    pub fn download(&self, rel: &str, to: &Path) -> Result<String> {
        if let Some(dir) = to.parent() {
            std::fs::create_dir_all(dir).with_context(|| format!("could not create '{}'", dir.display()))?;
        }
        let tmp = to.with_extension("part");
        let out = std::fs::File::create(&tmp).with_context(|| format!("could not create '{}'", tmp.display()))?;
        let sha = crate::contract::checksum::sha256_reader(self.reader(rel)?, std::io::BufWriter::new(out))
            .with_context(|| format!("could not download '{}'", self.url_of(rel)))?;
        std::fs::rename(&tmp, to).with_context(|| format!("could not write '{}'", to.display()))?;
        Ok(sha)
    }

    /// SHA-256 of the object, streamed.
    pub fn sha256(&self, rel: &str) -> Result<String> {
        crate::contract::checksum::sha256_reader(self.reader(rel)?, std::io::sink())
            .with_context(|| format!("could not read '{}'", self.url_of(rel)))
    }
}

/// What identifies the content of an object without reading it: its ETag (a content hash on
/// S3 for single-part uploads, a per-write tag elsewhere), else its version id, else its size
/// and modification time — with the size always, so a store's weak tag cannot hide a resize.
pub fn version_of(meta: &object_store::ObjectMeta) -> String {
    match (&meta.e_tag, &meta.version) {
        (Some(tag), _) => format!("etag {tag} size {}", meta.size),
        (None, Some(v)) => format!("version {v} size {}", meta.size),
        (None, None) => format!("modified {} size {}", meta.last_modified.to_rfc3339(), meta.size),
    }
}

/// A blocking `Read` over an object's byte stream.
pub struct RemoteReader {
    stream: BoxStream<'static, object_store::Result<Bytes>>,
    chunk: Bytes,
    url: String,
}

impl Read for RemoteReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.chunk.is_empty() {
            match runtime().block_on(self.stream.next()) {
                Some(Ok(chunk)) => self.chunk = chunk,
                Some(Err(e)) => return Err(std::io::Error::other(explain(e, &self.url))),
                None => return Ok(0),
            }
        }
        let n = buf.len().min(self.chunk.len());
        buf[..n].copy_from_slice(&self.chunk[..n]);
        self.chunk = self.chunk.slice(n..);
        Ok(n)
    }
}

/// An object-store error in words a user can act on.
fn explain(e: object_store::Error, url: &str) -> anyhow::Error {
    if let object_store::Error::NotFound { .. } = e {
        return anyhow!("'{url}' does not exist");
    }
    let text = e.to_string();
    // S3-compatible servers do not always answer with the status object_store maps.
    let refused =
        matches!(e, object_store::Error::PermissionDenied { .. } | object_store::Error::Unauthenticated { .. })
            || ["InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied", "403"].iter().any(|m| text.contains(m));
    if refused {
        anyhow!(
            "access to '{url}' was refused: check the credentials (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, GOOGLE_*, AZURE_*) and the bucket's permissions ({text})"
        )
    } else {
        anyhow!("object storage error on '{url}': {text}")
    }
}

/// The local folder of a bucket URL (its staged or fetched shards): `remote/<url>-<hash>` in
/// bertpipe's cache folder ([`crate::contract::cache_dir`]), one folder per URL.
pub fn local_folder(url: &str) -> PathBuf {
    use sha2::{Digest, Sha256};
    let base = crate::contract::cache_dir().join("remote");
    let name: String = url.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).take(60).collect();
    base.join(format!("{name}-{}", &hex::encode(Sha256::digest(url.as_bytes()))[..12]))
}

/// Makes a relative local path relative to `base`, absolute and free of `..`; object-storage
/// URLs (`s3://…`) are left as they are. (Every configuration path goes through this.)
pub fn resolve_path(path: &mut PathBuf, base: &Path) {
    if is_remote(path) {
        return;
    }
    let joined = if path.is_relative() { base.join(&*path) } else { path.clone() };
    let absolute = std::path::absolute(&joined).unwrap_or(joined);
    let mut clean = PathBuf::new();
    for part in absolute.components() {
        match part {
            std::path::Component::ParentDir => {
                clean.pop();
            }
            std::path::Component::CurDir => {}
            other => clean.push(other),
        }
    }
    *path = clean;
}
