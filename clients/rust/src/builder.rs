//! [`ClientBuilder`]: the settings of a [`Client`] (target, token, timeout, retries, local
//! validation, TLS) and the parsing of its target.

use std::path::PathBuf;
use std::time::Duration;

use http::header::{HeaderName, HeaderValue};

use crate::client::Client;
use crate::error::{Error, TransportError, TransportErrorKind};
use crate::grpc::{Channel, ChannelOptions, TlsConnector, TlsFiles};
use crate::retry::RetryPolicy;

/// The environment variable read for the token when the builder is given none.
pub const TOKEN_ENV: &str = "SEPP_TOKEN";

/// Settings of a [`Client`]; made with [`Client::builder`].
#[derive(Clone, Debug)]
pub struct ClientBuilder {
    target: String,
    token: Option<String>,
    pub(crate) timeout: Option<Duration>,
    pub(crate) validate_locally: bool,
    pub(crate) server_info_ttl: Option<Duration>,
    pub(crate) retry: RetryPolicy,
    max_message_bytes: usize,
    pub(crate) wait_for_server_start: bool,
    tls: TlsFiles,
}

impl ClientBuilder {
    pub(crate) fn new(target: String) -> ClientBuilder {
        ClientBuilder {
            target,
            token: None,
            timeout: Some(Duration::from_secs(10)),
            validate_locally: true,
            server_info_ttl: Some(Duration::from_secs(300)),
            retry: RetryPolicy::default(),
            max_message_bytes: 16 * 1024 * 1024,
            wait_for_server_start: false,
            tls: TlsFiles::default(),
        }
    }

    /// The token (role `produce`, or `work` for a worker) sent as `authorization: Bearer`
    /// on every call. Without this call `$SEPP_TOKEN` is read; `""` sends none.
    pub fn token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into());
        self
    }

    /// Deadline of each attempt of a call (default 10 s); `None` = no deadline.
    pub fn timeout(mut self, timeout: impl Into<Option<Duration>>) -> Self {
        self.timeout = timeout.into();
        self
    }

    /// Whether requests are checked against the server's advertised limits before they are
    /// sent (default true). The server always validates too.
    pub fn validate_locally(mut self, on: bool) -> Self {
        self.validate_locally = on;
        self
    }

    /// How long the cached server info is trusted before it is fetched again (default 300 s).
    pub fn server_info_ttl(mut self, ttl: impl Into<Option<Duration>>) -> Self {
        self.server_info_ttl = ttl.into();
        self
    }

    /// How transient failures are retried (default: 4 tries, 100 ms doubling to 5 s).
    pub fn retry(mut self, policy: RetryPolicy) -> Self {
        self.retry = policy;
        self
    }

    /// Largest message sent or received, bytes (default 16 MiB, the server's default
    /// `max_message_bytes`); a larger request fails as `MessageTooLarge` unsent.
    pub fn max_message_bytes(mut self, bytes: usize) -> Self {
        self.max_message_bytes = bytes;
        self
    }

    /// What the first call does when nothing listens at the address: `false` (default) fails
    /// at once (`connection refused: is sepp running on …?`); `true` waits for the server
    /// within the call's timeout (a producer started together with its server).
    pub fn wait_for_server_start(mut self, wait: bool) -> Self {
        self.wait_for_server_start = wait;
        self
    }

    /// TLS: the PEM CA bundle the server's certificate must chain to (the Python client's
    /// `tls_ca`, the CLI's `--tls-ca`). Any `tls_*` file turns TLS on (so does an
    /// `https://` target, which without a CA trusts the system's bundle).
    pub fn tls_ca(mut self, path: impl Into<PathBuf>) -> Self {
        self.tls.ca = Some(path.into());
        self
    }

    /// Mutual TLS: the client's PEM certificate (chain), for a server started with
    /// `tls_client_ca`; needs [`tls_key`](Self::tls_key).
    pub fn tls_cert(mut self, path: impl Into<PathBuf>) -> Self {
        self.tls.cert = Some(path.into());
        self
    }

    /// Mutual TLS: the unencrypted PEM private key of [`tls_cert`](Self::tls_cert).
    pub fn tls_key(mut self, path: impl Into<PathBuf>) -> Self {
        self.tls.key = Some(path.into());
        self
    }

    /// TLS: the name the server's certificate is checked against, when it is not the
    /// target's host (needed for a target given as an IP address: the rustls Debian
    /// packages verifies DNS names only). Like gRPC's `ssl_target_name_override`.
    pub fn tls_server_name(mut self, name: impl Into<String>) -> Self {
        self.tls.server_name = Some(name.into());
        self
    }

    /// Build the client and make the first call (`GetServerInfo`, whose limits local
    /// validation uses).
    ///
    /// Errors: a `TransportError` — `Unavailable` (`not_sent`) when the address is not
    /// `HOST:PORT` (optionally after `http://`, `grpc://`, `https://` or `grpcs://`), a TLS
    /// file is bad (one line naming it), nothing answers there or the TLS handshake fails;
    /// `Unauthenticated` for a token the server does not know.
    pub async fn connect(self) -> Result<Client, Error> {
        let client = self.build()?;
        client.refresh_server_info().await?;
        Ok(client)
    }

    /// Build the client without calling the server (the first call dials).
    ///
    /// Errors: as [`connect`](Self::connect)'s for the target, the token and the TLS files.
    pub fn build(self) -> Result<Client, Error> {
        let target = parse_target(&self.target)?;
        let tls = self.tls_connector(&target)?;
        let address = target.address;
        let token = match self.token.clone() {
            Some(t) => t,
            None => std::env::var(TOKEN_ENV).unwrap_or_default(),
        };
        let token = token.trim();
        let mut metadata = Vec::new();
        if !token.is_empty() {
            if !token.bytes().all(|b| b.is_ascii_graphic()) {
                return Err(invalid("the token must be printable ASCII without spaces (as made by sepp token new)"));
            }
            let value = HeaderValue::from_str(&format!("Bearer {token}")).map_err(|e| invalid(&e.to_string()))?;
            metadata.push((HeaderName::from_static("authorization"), value));
        }
        let options = ChannelOptions { max_message_bytes: self.max_message_bytes, metadata, tls,
                                       ..ChannelOptions::default() };
        Ok(Client::assemble(&self, Channel::new(address.clone(), options), address))
    }

    /// The TLS connector when TLS is on (an `https://`/`grpcs://` target, or any TLS file).
    fn tls_connector(&self, target: &Target) -> Result<Option<TlsConnector>, Error> {
        let wanted = target.tls == Some(true) || self.tls.any_file() || self.tls.server_name.is_some();
        if !wanted {
            return Ok(None);
        }
        if target.tls == Some(false) {
            return Err(invalid(&format!("{}: http:// and grpc:// are plaintext but TLS settings are given: write \
                                         https://HOST:PORT (or HOST:PORT)", self.target)));
        }
        TlsConnector::new(&self.tls, &target.host).map(Some).map_err(|e| invalid(&e))
    }
}

fn invalid(message: &str) -> Error {
    Error::Transport(TransportError::new(TransportErrorKind::Unavailable, message).with_not_sent(true))
}

/// A parsed target: where to dial and whether its scheme asks for TLS.
#[derive(Debug, PartialEq)]
struct Target {
    /// `HOST:PORT`, as dialled.
    address: String,
    /// The host, without the brackets of an IPv6 address.
    host: String,
    /// `Some(true)` for `https://` / `grpcs://`, `Some(false)` for `http://` / `grpc://`,
    /// `None` without a scheme.
    tls: Option<bool>,
}

/// The target written `HOST:PORT`, optionally after `http://`, `grpc://`, `https://` or
/// `grpcs://` (and before one `/`).
fn parse_target(target: &str) -> Result<Target, Error> {
    let text = target.trim();
    let (tls, rest) = match text.split_once("://") {
        Some(("https" | "grpcs", rest)) => (Some(true), rest),
        Some(("http" | "grpc", rest)) => (Some(false), rest),
        Some(_) => return Err(invalid(&format!("{target:?}: the scheme is not http://, grpc://, https:// or grpcs://"))),
        None => (None, text),
    };
    let rest = rest.trim_end_matches('/');
    match rest.rsplit_once(':') {
        Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok() && !host.contains('/') => {
            let bare = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host);
            Ok(Target { address: rest.to_string(), host: bare.to_string(), tls })
        }
        _ => Err(invalid(&format!("{target:?} is not HOST:PORT (e.g. http://127.0.0.1:7700)"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_are_host_port_after_an_optional_scheme() {
        let parsed = |t: &str| parse_target(t).map(|t| (t.address, t.host, t.tls)).unwrap();
        assert_eq!(parsed("http://127.0.0.1:7700"), ("127.0.0.1:7700".into(), "127.0.0.1".into(), Some(false)));
        assert_eq!(parsed("grpc://localhost:7700/"), ("localhost:7700".into(), "localhost".into(), Some(false)));
        assert_eq!(parsed("127.0.0.1:7700"), ("127.0.0.1:7700".into(), "127.0.0.1".into(), None));
        assert_eq!(parsed("[::1]:7700"), ("[::1]:7700".into(), "::1".into(), None));
        assert_eq!(parsed("https://sepp.example:7700"), ("sepp.example:7700".into(), "sepp.example".into(), Some(true)));
        assert_eq!(parsed("grpcs://h:7700"), ("h:7700".into(), "h".into(), Some(true)));
        for bad in ["127.0.0.1", "http://host:port", ":7700", "http://h:7700/path", "ftp://h:7700"] {
            assert!(parse_target(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn tls_settings_with_a_plaintext_scheme_are_refused() {
        let err = Client::builder("http://localhost:7700").tls_ca("/x/ca.pem").build().unwrap_err().to_string();
        assert!(err.contains("http:// and grpc:// are plaintext but TLS settings are given"), "{err}");
    }

    #[test]
    fn a_bad_tls_file_fails_the_build_with_one_line_naming_it() {
        let err = Client::builder("localhost:7700").tls_ca("/nonexistent/ca.pem").build().unwrap_err().to_string();
        assert!(err.contains("tls_ca: cannot read /nonexistent/ca.pem"), "{err}");
        let err = Client::builder("https://localhost:7700").tls_cert("/nonexistent/c.pem").build().unwrap_err().to_string();
        assert!(err.contains("tls_cert is given without tls_key"), "{err}");
    }
}
