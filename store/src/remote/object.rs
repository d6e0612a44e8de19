//! The [`Remote`] handle: a URL made into an object store, the layout's object names, and
//! the few requests the protocol makes (get, create-only put, put, list, delete), counted.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::TryStreamExt;
use object_store::aws::AmazonS3Builder;
use object_store::local::LocalFileSystem;
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{
    BackoffConfig, ClientOptions, ObjectMeta, ObjectStore, ObjectStoreExt, PutMode, PutOptions,
    PutPayload, RetryConfig,
};

use crate::error::RemoteError;

/// The format object's name and the remote format this build writes and reads.
const FORMAT_OBJECT: &str = "strata-remote.json";
const REMOTE_FORMAT: u64 = 1;
/// Segments larger than this are fetched in ranges of this size, in parallel.
pub(crate) const RANGE_BYTES: u64 = 8 << 20;
/// The default bound on one request, its retries included (ADR 0018).
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(60);
/// The environment variable that sets the bound on one request, in seconds.
pub const TIMEOUT_ENV: &str = "STRATA_REMOTE_TIMEOUT";

/// Requests made and bytes moved through a [`Remote`] since it was opened.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RequestCounts {
    /// Requests of any kind (get, put, list, delete).
    pub requests: u64,
    /// Bytes received in object bodies.
    pub bytes_in: u64,
    /// Bytes sent in object bodies.
    pub bytes_out: u64,
}

#[derive(Debug, Default)]
struct Counters {
    requests: AtomicU64,
    bytes_in: AtomicU64,
    bytes_out: AtomicU64,
}

/// A remote: an object store and the prefix the store's objects live under.
#[derive(Clone)]
pub struct Remote {
    url: String,
    objects: Arc<dyn ObjectStore>,
    prefix: Path,
    runtime: Arc<tokio::runtime::Runtime>,
    counters: Arc<Counters>,
    timeout: Duration,
}

/// The bound on one request from the environment ([`TIMEOUT_ENV`], seconds, fractions
/// allowed), else [`DEFAULT_REQUEST_TIMEOUT`].
///
/// # Errors
/// [`RemoteError::BadUrl`] naming the variable when it is set but not a positive number.
fn timeout_from_env(url: &str) -> Result<Duration, RemoteError> {
    let Ok(text) = std::env::var(TIMEOUT_ENV) else {
        return Ok(DEFAULT_REQUEST_TIMEOUT);
    };
    match text.trim().parse::<f64>() {
        Ok(s) if s.is_finite() && s > 0.0 && s <= 86_400.0 => Ok(Duration::from_secs_f64(s)),
        _ => Err(RemoteError::BadUrl {
            url: url.to_string(),
            reason: format!(
                "{TIMEOUT_ENV}={text:?} is not a number of seconds between 0 and 86400"
            ),
        }),
    }
}

impl std::fmt::Debug for Remote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Remote").field("url", &self.url).finish()
    }
}

impl Remote {
    /// Opens the remote at `url`: `s3://bucket/prefix` (endpoint, region and credentials
    /// from the `AWS_*` environment variables; `AWS_ENDPOINT_URL` for an S3-compatible
    /// server, `AWS_ALLOW_HTTP=true` or an `http://` endpoint for one without TLS), or
    /// `file:///path` (a folder, created if missing). Nothing is requested yet.
    ///
    /// Every request, its retries included, fails with [`RemoteError::TimedOut`] once it has
    /// taken [`DEFAULT_REQUEST_TIMEOUT`] (60 s), or the seconds in [`TIMEOUT_ENV`]
    /// (`STRATA_REMOTE_TIMEOUT`); [`Remote::with_timeout`] sets it in code.
    ///
    /// # Errors
    /// [`RemoteError::BadUrl`] for a URL of another scheme, without a bucket, or S3 without
    /// credentials in the environment, or a [`TIMEOUT_ENV`] that is not a number of seconds.
    pub fn open(url: &str) -> Result<Remote, RemoteError> {
        let timeout = timeout_from_env(url)?;
        let bad = |reason: &str| RemoteError::BadUrl {
            url: url.to_string(),
            reason: reason.to_string(),
        };
        let (objects, prefix): (Arc<dyn ObjectStore>, &str) =
            if let Some(rest) = url.strip_prefix("s3://") {
                let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
                if bucket.is_empty() {
                    return Err(bad("no bucket: use s3://bucket/prefix"));
                }
                (Arc::new(s3(bucket, timeout).map_err(|r| bad(&r))?), prefix)
            } else if let Some(path) = url.strip_prefix("file://") {
                if !path.starts_with('/') {
                    return Err(bad("a file URL needs an absolute path: file:///path"));
                }
                std::fs::create_dir_all(path)
                    .map_err(|e| bad(&format!("cannot create the folder: {e}")))?;
                let fs = LocalFileSystem::new_with_prefix(path).map_err(|e| bad(&e.to_string()))?;
                (Arc::new(fs), "")
            } else {
                return Err(bad("expected s3://bucket/prefix or file:///path"));
            };
        let prefix = Path::parse(prefix.trim_matches('/')).map_err(|e| bad(&e.to_string()))?;
        Ok(Remote::with_objects(url, objects, prefix).with_timeout(timeout))
    }

    /// The same remote with every request, its retries included, bounded by `timeout`.
    #[must_use]
    pub fn with_timeout(mut self, timeout: Duration) -> Remote {
        self.timeout = timeout;
        self
    }

    /// The bound on one request, its retries included.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Runs request `op` on `p` within the remote's bound on one request.
    async fn bounded<T>(
        &self,
        op: &'static str,
        p: &Path,
        request: impl std::future::Future<Output = Result<T, RemoteError>>,
    ) -> Result<T, RemoteError> {
        tokio::time::timeout(self.timeout, request)
            .await
            .unwrap_or_else(|_| {
                Err(RemoteError::TimedOut {
                    op,
                    object: p.to_string(),
                    after: self.timeout,
                })
            })
    }

    /// A remote in this process's memory (object_store's `InMemory`), for tests.
    pub fn in_memory() -> Remote {
        Remote::with_objects("memory://", Arc::new(InMemory::new()), Path::default())
    }

    fn with_objects(url: &str, objects: Arc<dyn ObjectStore>, prefix: Path) -> Remote {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a tokio runtime of two threads can be built");
        Remote {
            url: url.to_string(),
            objects,
            prefix,
            runtime: Arc::new(runtime),
            counters: Arc::default(),
            timeout: DEFAULT_REQUEST_TIMEOUT,
        }
    }

    /// The URL the remote was opened with.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Requests and bytes so far.
    pub fn counts(&self) -> RequestCounts {
        RequestCounts {
            requests: self.counters.requests.load(Ordering::Relaxed),
            bytes_in: self.counters.bytes_in.load(Ordering::Relaxed),
            bytes_out: self.counters.bytes_out.load(Ordering::Relaxed),
        }
    }

    /// Runs a future on the remote's runtime.
    pub(crate) fn block_on<F: std::future::Future>(&self, f: F) -> F::Output {
        self.runtime.block_on(f)
    }

    /// The object `rel` under the prefix.
    pub(crate) fn path(&self, rel: &str) -> Path {
        let mut p = self.prefix.clone();
        for part in rel.split('/') {
            p = p.clone().join(part);
        }
        p
    }

    /// The object of the segment at `address`.
    pub(crate) fn segment_path(&self, address: u128) -> Path {
        self.path(&format!("segments/{address:032x}"))
    }

    /// The manifest object of checkpoint `step`.
    pub(crate) fn manifest_path(&self, step: u64) -> Path {
        self.path(&format!("checkpoints/{step:020}"))
    }

    /// The object of part `part` of checkpoint `step`.
    pub(crate) fn part_path(&self, step: u64, part: &str) -> Path {
        self.path(&format!("parts/{step:020}/{}", hex(part)))
    }

    /// The object of tag `name`.
    pub(crate) fn tag_path(&self, name: &str) -> Path {
        self.path(&format!("tags/{}", hex(name)))
    }

    /// What follows `prefix/folder/` in an object's path, if it is under that folder.
    pub(crate) fn name_in<'a>(&self, p: &'a Path, folder: &str) -> Option<&'a str> {
        let base = self.path(folder);
        p.as_ref().strip_prefix(base.as_ref())?.strip_prefix('/')
    }

    /// The object's bytes, or `None` if it does not exist.
    pub(crate) async fn get(&self, p: &Path) -> Result<Option<Bytes>, RemoteError> {
        self.count(0);
        self.bounded("get", p, async {
            match self.objects.get(p).await {
                Ok(r) => {
                    let bytes = r.bytes().await.map_err(RemoteError::request("get", p))?;
                    self.received(bytes.len() as u64);
                    Ok(Some(bytes))
                }
                Err(object_store::Error::NotFound { .. }) => Ok(None),
                Err(e) => Err(RemoteError::request("get", p)(e)),
            }
        })
        .await
    }

    /// The object's size and last-modified time, or `None` if it does not exist.
    pub(crate) async fn head(&self, p: &Path) -> Result<Option<ObjectMeta>, RemoteError> {
        self.count(0);
        self.bounded("head", p, async {
            match self.objects.head(p).await {
                Ok(meta) => Ok(Some(meta)),
                Err(object_store::Error::NotFound { .. }) => Ok(None),
                Err(e) => Err(RemoteError::request("head", p)(e)),
            }
        })
        .await
    }

    /// Bytes `range` of an object.
    pub(crate) async fn get_range(
        &self,
        p: &Path,
        range: std::ops::Range<u64>,
    ) -> Result<Bytes, RemoteError> {
        self.count(0);
        let bytes = self
            .bounded("get", p, async {
                self.objects
                    .get_range(p, range)
                    .await
                    .map_err(RemoteError::request("get", p))
            })
            .await?;
        self.received(bytes.len() as u64);
        Ok(bytes)
    }

    /// Creates an object unless one exists (`If-None-Match: *`): `true` if this call created
    /// it, `false` if it was there.
    pub(crate) async fn create(&self, p: &Path, bytes: Bytes) -> Result<bool, RemoteError> {
        self.count(bytes.len() as u64);
        let opts = PutOptions {
            mode: PutMode::Create,
            ..PutOptions::default()
        };
        self.bounded("put", p, async {
            match self
                .objects
                .put_opts(p, PutPayload::from_bytes(bytes), opts)
                .await
            {
                Ok(_) => Ok(true),
                Err(
                    object_store::Error::AlreadyExists { .. }
                    | object_store::Error::Precondition { .. },
                ) => Ok(false),
                Err(e) => Err(RemoteError::request("put", p)(e)),
            }
        })
        .await
    }

    /// Writes an object, replacing any.
    pub(crate) async fn put(&self, p: &Path, bytes: Bytes) -> Result<(), RemoteError> {
        self.count(bytes.len() as u64);
        self.bounded("put", p, async {
            self.objects
                .put(p, PutPayload::from_bytes(bytes))
                .await
                .map(|_| ())
                .map_err(RemoteError::request("put", p))
        })
        .await
    }

    /// Every object under `rel` (a folder of the layout).
    pub(crate) async fn list(&self, rel: &str) -> Result<Vec<ObjectMeta>, RemoteError> {
        self.count(0);
        let p = self.path(rel);
        self.bounded("list", &p, async {
            self.objects
                .list(Some(&p))
                .try_collect()
                .await
                .map_err(RemoteError::request("list", &p))
        })
        .await
    }

    /// Deletes an object (one that is already gone is not an error).
    pub(crate) async fn delete(&self, p: &Path) -> Result<(), RemoteError> {
        self.count(0);
        self.bounded("delete", p, async {
            match self.objects.delete(p).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
                Err(e) => Err(RemoteError::request("delete", p)(e)),
            }
        })
        .await
    }

    /// Counts one request sending `bytes_out` body bytes.
    fn count(&self, bytes_out: u64) {
        self.counters.requests.fetch_add(1, Ordering::Relaxed);
        self.counters
            .bytes_out
            .fetch_add(bytes_out, Ordering::Relaxed);
    }

    /// Counts body bytes received for a request counted already.
    fn received(&self, bytes: u64) {
        self.counters.bytes_in.fetch_add(bytes, Ordering::Relaxed);
    }

    /// Checks the format object: `Ok(true)` if the remote holds one this build reads,
    /// `Ok(false)` if there is none yet; with `create`, writes it if missing.
    ///
    /// # Errors
    /// [`RemoteError::NewerFormat`], [`RemoteError::NotARemote`], request errors.
    pub(crate) async fn check_format(&self, create: bool) -> Result<bool, RemoteError> {
        let p = self.path(FORMAT_OBJECT);
        let bytes = match self.get(&p).await? {
            Some(b) => b,
            None if create => {
                let body =
                    format!("{{\"format\": \"strata-remote\", \"version\": {REMOTE_FORMAT}}}\n");
                if self.create(&p, Bytes::from(body)).await? {
                    return Ok(true);
                }
                self.get(&p).await?.unwrap_or_default()
            }
            None => return Ok(false),
        };
        let not = |reason: String| RemoteError::NotARemote {
            object: p.to_string(),
            reason,
        };
        let v: serde_json::Value =
            serde_json::from_slice(&bytes).map_err(|e| not(format!("not JSON: {e}")))?;
        if v.get("format").and_then(|f| f.as_str()) != Some("strata-remote") {
            return Err(not("no \"format\": \"strata-remote\" field".into()));
        }
        let found = v
            .get("version")
            .and_then(serde_json::Value::as_u64)
            .ok_or_else(|| not("no numeric \"version\" field".into()))?;
        if found > REMOTE_FORMAT {
            return Err(RemoteError::NewerFormat {
                object: p.to_string(),
                found,
                supported: REMOTE_FORMAT,
            });
        }
        Ok(true)
    }
}

/// An S3 client from the environment for `bucket`, whose requests and retries stop within
/// `timeout` (each request is also bounded as a whole by [`Remote::bounded`]).
fn s3(bucket: &str, timeout: Duration) -> Result<object_store::aws::AmazonS3, String> {
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let skip = env("AWS_SKIP_SIGNATURE").is_some_and(|v| v == "true" || v == "1");
    if !skip
        && env("AWS_ACCESS_KEY_ID").is_none()
        && env("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI").is_none()
        && env("AWS_WEB_IDENTITY_TOKEN_FILE").is_none()
    {
        return Err(
            "no credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY \
                    (or AWS_SKIP_SIGNATURE=true for a public bucket)"
                .into(),
        );
    }
    let mut b = AmazonS3Builder::from_env()
        .with_bucket_name(bucket)
        .with_retry(RetryConfig {
            backoff: BackoffConfig {
                init_backoff: Duration::from_millis(100),
                max_backoff: Duration::from_secs(5),
                base: 2.0,
            },
            max_retries: 5,
            retry_timeout: timeout,
        })
        // One second past the bound, so that the whole request's bound in Remote::bounded,
        // whose error says it timed out, fires first.
        .with_client_options(
            ClientOptions::new()
                .with_connect_timeout(Duration::from_secs(5).min(timeout))
                .with_timeout(timeout + Duration::from_secs(1)),
        );
    if env("AWS_ENDPOINT_URL")
        .or_else(|| env("AWS_ENDPOINT"))
        .is_some_and(|e| e.starts_with("http://"))
    {
        b = b.with_allow_http(true);
    }
    if env("AWS_REGION").is_none() && env("AWS_DEFAULT_REGION").is_none() {
        b = b.with_region("us-east-1");
    }
    b.build().map_err(|e| e.to_string())
}

/// Lower-case hex of a name's bytes (tag and part names in object names).
fn hex(name: &str) -> String {
    name.bytes().map(|b| format!("{b:02x}")).collect()
}

/// The name back from [`hex`], if it is one.
pub(crate) fn unhex(text: &str) -> Option<String> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    let bytes: Option<Vec<u8>> = (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect();
    String::from_utf8(bytes?).ok()
}
