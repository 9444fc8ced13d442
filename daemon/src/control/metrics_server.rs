//! The Prometheus endpoint: `GET /metrics` on `metrics.address`, served by
//! `tiny_http` from a thread named `metrics` on the control plane. Each
//! scrape asks the source for a fresh [`MetricsInput`] (published state
//! only) and encodes it (`metrics::encode`); nothing here reaches a shard.
//!
//! Optional authentication: a bearer token or basic credentials read once
//! at start from the file `metrics.bearer_token_file` or
//! `metrics.basic_auth_file` names; a scrape without them gets 401.
//! Credentials are compared in constant time.
//!
//! Must not: parse HTTP by hand (`tiny_http` does; this module only reads
//! the method, the path and one header's value), run on a shard thread, or
//! block the supervisor: requests are answered one at a time on the
//! `metrics` thread, and `stop` unblocks and joins it.

use crate::control::metrics::{self, MetricsInput};
use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Where scrapes come from: the daemon's published state, or a test double.
pub trait MetricsSource: Send + Sync {
    fn metrics_input(&self) -> MetricsInput;
}

impl MetricsSource for crate::control::daemon_source::DaemonSource {
    fn metrics_input(&self) -> MetricsInput {
        crate::control::daemon_source::DaemonSource::metrics_input(self)
    }
}

/// What a scrape must present.
#[derive(Clone, PartialEq, Eq)]
pub enum MetricsAuth {
    None,
    /// `Authorization: Bearer <token>`.
    Bearer(String),
    /// `Authorization: Basic <base64 of user:password>`; held encoded.
    Basic(String),
}

impl std::fmt::Debug for MetricsAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the secret itself.
        f.write_str(match self {
            MetricsAuth::None => "None",
            MetricsAuth::Bearer(_) => "Bearer(..)",
            MetricsAuth::Basic(_) => "Basic(..)",
        })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    #[error("metrics.{key}: cannot read {path}: {source}")]
    ReadCredentials {
        key: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("metrics.{key}: {path} {problem}")]
    BadCredentials {
        key: &'static str,
        path: PathBuf,
        problem: &'static str,
    },
    #[error("metrics.address {address}: cannot listen: {source}")]
    Bind {
        address: SocketAddr,
        #[source]
        source: io::Error,
    },
    #[error("metrics.address {address}: cannot start the HTTP server: {message}")]
    Serve {
        address: SocketAddr,
        message: String,
    },
    #[error("metrics: cannot start the metrics thread: {0}")]
    Spawn(#[source] io::Error),
}

impl MetricsError {
    /// Whether the operator's configuration is at fault (exit 78).
    pub fn is_configuration(&self) -> bool {
        matches!(
            self,
            MetricsError::ReadCredentials { .. } | MetricsError::BadCredentials { .. }
        )
    }
}

impl MetricsAuth {
    /// Reads the credentials file the configuration names, if any: its first
    /// line, which must not be empty (basic: `user:password`).
    pub fn load(config: &crate::config::MetricsConfig) -> Result<MetricsAuth, MetricsError> {
        if let Some(path) = &config.bearer_token_file {
            let token = first_line("bearer_token_file", path)?;
            return Ok(MetricsAuth::Bearer(token));
        }
        if let Some(path) = &config.basic_auth_file {
            let credentials = first_line("basic_auth_file", path)?;
            if !credentials.contains(':') {
                return Err(MetricsError::BadCredentials {
                    key: "basic_auth_file",
                    path: path.clone(),
                    problem: "must hold user:password on its first line",
                });
            }
            return Ok(MetricsAuth::Basic(base64(credentials.as_bytes())));
        }
        Ok(MetricsAuth::None)
    }

    /// Whether an `Authorization` header value (or its absence) passes.
    pub fn admits(&self, authorization: Option<&str>) -> bool {
        let (scheme, expected) = match self {
            MetricsAuth::None => return true,
            MetricsAuth::Bearer(token) => ("bearer", token),
            MetricsAuth::Basic(encoded) => ("basic", encoded),
        };
        let Some((given_scheme, given)) = authorization.and_then(|value| value.split_once(' '))
        else {
            return false;
        };
        given_scheme.eq_ignore_ascii_case(scheme)
            && constant_time_eq(given.trim().as_bytes(), expected.as_bytes())
    }

    fn challenge(&self) -> &'static str {
        match self {
            MetricsAuth::Basic(_) => "Basic realm=\"iggyd\"",
            MetricsAuth::None | MetricsAuth::Bearer(_) => "Bearer realm=\"iggyd\"",
        }
    }
}

fn first_line(key: &'static str, path: &Path) -> Result<String, MetricsError> {
    let text = std::fs::read_to_string(path).map_err(|source| MetricsError::ReadCredentials {
        key,
        path: path.to_path_buf(),
        source,
    })?;
    let line = text.lines().next().unwrap_or("").trim().to_string();
    if line.is_empty() {
        return Err(MetricsError::BadCredentials {
            key,
            path: path.to_path_buf(),
            problem: "is empty",
        });
    }
    Ok(line)
}

/// Equal length and equal bytes, taking the same time for every input of
/// that length.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |diff, (x, y)| diff | (x ^ y)) == 0
}

/// Standard base64 with padding (RFC 4648), for the basic credentials.
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for (i, shift) in [18, 12, 6, 0].into_iter().enumerate() {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[((n >> shift) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Binds `address` (boot does this before any shard starts, so a busy port
/// fails the start like the Iggy listener does).
pub fn bind(address: SocketAddr) -> Result<std::net::TcpListener, MetricsError> {
    std::net::TcpListener::bind(address).map_err(|source| MetricsError::Bind { address, source })
}

/// The running endpoint; `stop` (or drop) ends its thread.
pub struct MetricsServer {
    address: SocketAddr,
    server: Arc<tiny_http::Server>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl std::fmt::Debug for MetricsServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetricsServer")
            .field("address", &self.address)
            .finish_non_exhaustive()
    }
}

impl MetricsServer {
    /// Serve `source` on `listener` until `stop`.
    pub fn start(
        listener: std::net::TcpListener,
        auth: MetricsAuth,
        source: Arc<dyn MetricsSource>,
    ) -> Result<MetricsServer, MetricsError> {
        let address = listener.local_addr().map_err(|source| MetricsError::Bind {
            address: SocketAddr::from(([0, 0, 0, 0], 0)),
            source,
        })?;
        let server = tiny_http::Server::from_listener(listener, None).map_err(|error| {
            MetricsError::Serve {
                address,
                message: error.to_string(),
            }
        })?;
        let server = Arc::new(server);
        let serving = Arc::clone(&server);
        let thread = std::thread::Builder::new()
            .name("metrics".into())
            .spawn(move || serve(&serving, &auth, source.as_ref()))
            .map_err(MetricsError::Spawn)?;
        Ok(MetricsServer {
            address,
            server,
            thread: Some(thread),
        })
    }

    /// The bound address (port 0 resolved).
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        if let Some(thread) = self.thread.take() {
            self.server.unblock();
            let _ = thread.join();
        }
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Answers requests until `unblock` makes `recv` fail.
fn serve(server: &tiny_http::Server, auth: &MetricsAuth, source: &dyn MetricsSource) {
    while let Ok(request) = server.recv() {
        let response = answer(&request, auth, source);
        if let Err(error) = request.respond(response) {
            tracing::debug!(%error, "metrics: writing a response failed");
        }
    }
}

type Response = tiny_http::Response<io::Cursor<Vec<u8>>>;

fn header(name: &str, value: &str) -> Option<tiny_http::Header> {
    tiny_http::Header::from_bytes(name.as_bytes(), value.as_bytes()).ok()
}

fn text(status: u16, body: &str) -> Response {
    let mut response = tiny_http::Response::from_string(body).with_status_code(status);
    if let Some(content_type) = header("Content-Type", "text/plain; charset=utf-8") {
        response.add_header(content_type);
    }
    response
}

fn answer(
    request: &tiny_http::Request,
    auth: &MetricsAuth,
    source: &dyn MetricsSource,
) -> Response {
    let path = request.url().split('?').next().unwrap_or("");
    let method = request.method();
    if path != "/metrics" {
        return text(404, "not found: the metrics are at /metrics\n");
    }
    if !matches!(method, tiny_http::Method::Get | tiny_http::Method::Head) {
        let mut response = text(405, "only GET\n");
        if let Some(allow) = header("Allow", "GET, HEAD") {
            response.add_header(allow);
        }
        return response;
    }
    let authorization = request
        .headers()
        .iter()
        .find(|header| header.field.equiv("Authorization"))
        .map(|header| header.value.as_str());
    if !auth.admits(authorization) {
        let mut response = text(401, "unauthorized\n");
        if let Some(challenge) = header("WWW-Authenticate", auth.challenge()) {
            response.add_header(challenge);
        }
        return response;
    }
    let page = metrics::encode(&source.metrics_input());
    let mut response = tiny_http::Response::from_data(page.into_bytes());
    if let Some(content_type) = header("Content-Type", metrics::CONTENT_TYPE) {
        response.add_header(content_type);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_rfc_4648_vectors() {
        for (plain, encoded) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
            ("prometheus:s3cret", "cHJvbWV0aGV1czpzM2NyZXQ="),
        ] {
            assert_eq!(base64(plain.as_bytes()), encoded, "{plain}");
        }
    }

    /// Proves the credentials come from the first line of the file, that an
    /// empty file or basic credentials without a colon are configuration
    /// errors, and that only the matching scheme and secret are admitted.
    #[test]
    fn credentials_from_files() {
        let dir = tempfile::tempdir().unwrap();
        let token = dir.path().join("token");
        std::fs::write(&token, "t0ken\nignored\n").unwrap();
        let config = |bearer: Option<&Path>, basic: Option<&Path>| crate::config::MetricsConfig {
            address: None,
            bearer_token_file: bearer.map(Path::to_path_buf),
            basic_auth_file: basic.map(Path::to_path_buf),
        };
        let auth = MetricsAuth::load(&config(Some(&token), None)).unwrap();
        assert!(auth.admits(Some("Bearer t0ken")));
        assert!(auth.admits(Some("bearer t0ken")));
        assert!(!auth.admits(Some("Bearer t0ke")));
        assert!(!auth.admits(Some("Basic t0ken")));
        assert!(!auth.admits(None));
        assert_eq!(format!("{auth:?}"), "Bearer(..)");

        let basic = dir.path().join("basic");
        std::fs::write(&basic, "prometheus:s3cret\n").unwrap();
        let auth = MetricsAuth::load(&config(None, Some(&basic))).unwrap();
        assert!(auth.admits(Some("Basic cHJvbWV0aGV1czpzM2NyZXQ=")));
        assert!(!auth.admits(Some("Basic cHJvbWV0aGV1czpzM2NyZXQ")));

        std::fs::write(&basic, "no-colon\n").unwrap();
        let error = MetricsAuth::load(&config(None, Some(&basic))).unwrap_err();
        assert!(error.is_configuration(), "{error}");
        std::fs::write(&token, "\n").unwrap();
        let error = MetricsAuth::load(&config(Some(&token), None)).unwrap_err();
        assert!(error.to_string().contains("is empty"), "{error}");
        let missing = dir.path().join("missing");
        let error = MetricsAuth::load(&config(Some(&missing), None)).unwrap_err();
        assert!(error.is_configuration(), "{error}");
        assert!(MetricsAuth::load(&config(None, None)).unwrap().admits(None));
    }
}
