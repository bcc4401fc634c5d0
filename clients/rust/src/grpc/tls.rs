//! TLS for the channel (cargo feature `tls`, on by default): rustls 0.20 and tokio-rustls
//! 0.23, the versions Debian 12 packages (`librust-rustls-dev`, `librust-tokio-rustls-dev`,
//! `librust-rustls-pemfile-dev`), from PEM files as the Python client takes them: a CA
//! bundle the server's certificate must chain to (none: the system's bundle), and
//! optionally the client's own certificate and key for a server that requires one (mutual
//! TLS). ALPN offers `h2`.
//!
//! Every problem with the files is one line naming the setting and the path (as
//! `sepp.client.tls` words it). rustls 0.20 verifies DNS names only: a server reached by an
//! IP address needs [`TlsFiles::server_name`] (a name in its certificate, e.g. `localhost`).

#[cfg(feature = "tls")]
use std::path::Path;
use std::path::PathBuf;

#[cfg(feature = "tls")]
/// Where the system's CA bundle is looked for when no CA file is given (after
/// `$SSL_CERT_FILE`): Debian/Ubuntu, then Fedora/RHEL, then Alpine/openSUSE.
const SYSTEM_BUNDLES: [&str; 3] = ["/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt",
                                   "/etc/ssl/ca-bundle.pem"];

/// The TLS settings of a client (all paths of PEM files); TLS is on when the target is
/// `https://` / `grpcs://` or any of `ca`, `cert`, `key` is set.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TlsFiles {
    /// The CA bundle the server's certificate must chain to (`None`: the system's bundle).
    pub ca: Option<PathBuf>,
    /// The client's certificate (chain), for a server requiring one; needs `key`.
    pub cert: Option<PathBuf>,
    /// The client certificate's unencrypted private key (PKCS#8, PKCS#1 RSA or SEC1 EC).
    pub key: Option<PathBuf>,
    /// The name the server's certificate is checked against (default: the target's host,
    /// which must then be a DNS name, not an IP address).
    pub server_name: Option<String>,
}

impl TlsFiles {
    /// Whether any file is set (TLS implied).
    pub fn any_file(&self) -> bool {
        self.ca.is_some() || self.cert.is_some() || self.key.is_some()
    }
}

#[cfg(feature = "tls")]
fn read(name: &str, path: &Path) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| format!("{name}: cannot read {}: {e}", path.display()))
}

#[cfg(feature = "tls")]
/// The DER certificates in the PEM file `path` (setting `name`), at least one.
fn certificates(name: &str, path: &Path) -> Result<Vec<Vec<u8>>, String> {
    let data = read(name, path)?;
    if !data.windows(27).any(|w| w == b"-----BEGIN CERTIFICATE-----") {
        return Err(format!("{name}: {} is not a PEM certificate (no '-----BEGIN CERTIFICATE-----' line)", path.display()));
    }
    let certs = rustls_pemfile::certs(&mut data.as_slice())
        .map_err(|e| format!("{name}: {} is not a valid PEM certificate ({e})", path.display()))?;
    if certs.is_empty() {
        return Err(format!("{name}: {} is not a valid PEM certificate", path.display()));
    }
    Ok(certs)
}

#[cfg(feature = "tls")]
/// The DER private key in the PEM file `path` (the first one).
fn private_key(path: &Path) -> Result<Vec<u8>, String> {
    let data = read("tls_key", path)?;
    if data.windows(9).any(|w| w == b"ENCRYPTED") {
        return Err(format!("tls_key: {} is encrypted; give an unencrypted key", path.display()));
    }
    let mut reader = data.as_slice();
    loop {
        match rustls_pemfile::read_one(&mut reader) {
            Ok(Some(rustls_pemfile::Item::PKCS8Key(key) | rustls_pemfile::Item::RSAKey(key)
                    | rustls_pemfile::Item::ECKey(key))) => return Ok(key),
            Ok(Some(_)) => continue,
            Ok(None) | Err(_) => return Err(format!("tls_key: {} is not a PEM private key", path.display())),
        }
    }
}

#[cfg(feature = "tls")]
/// The system's CA bundle: `$SSL_CERT_FILE`, else the first of [`SYSTEM_BUNDLES`] present.
fn system_bundle() -> Result<PathBuf, String> {
    if let Some(path) = std::env::var_os("SSL_CERT_FILE") {
        return Ok(PathBuf::from(path));
    }
    SYSTEM_BUNDLES.iter().map(PathBuf::from).find(|p| p.exists()).ok_or_else(|| {
        format!("no tls_ca given and no system CA bundle found ({} or $SSL_CERT_FILE)", SYSTEM_BUNDLES.join(", "))
    })
}

#[cfg(feature = "tls")]
/// A ready TLS configuration: what [`crate::grpc::Channel`] wraps each new TCP connection in.
#[derive(Clone)]
pub struct TlsConnector {
    connector: tokio_rustls::TlsConnector,
    server_name: tokio_rustls::rustls::ServerName,
}

#[cfg(feature = "tls")]
impl std::fmt::Debug for TlsConnector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsConnector").field("server_name", &self.server_name).finish()
    }
}

#[cfg(feature = "tls")]
impl TlsConnector {
    /// Read and check the files of `files` for a server reached as `host` (the target's
    /// host, without port or brackets).
    ///
    /// Errors, one line each: a file that cannot be read, one with no PEM certificate or
    /// key in it, an encrypted key, a certificate without its key (or the reverse), an IP
    /// address without `server_name`, no system CA bundle when no `ca` is given.
    pub fn new(files: &TlsFiles, host: &str) -> Result<TlsConnector, String> {
        use tokio_rustls::rustls::{Certificate, ClientConfig, PrivateKey, RootCertStore, ServerName};

        if files.cert.is_some() != files.key.is_some() {
            let (given, missing) = if files.cert.is_some() { ("tls_cert", "tls_key") } else { ("tls_key", "tls_cert") };
            return Err(format!("{given} is given without {missing}: a client certificate needs both"));
        }
        let name = files.server_name.as_deref().unwrap_or(host);
        if files.server_name.is_none() && name.parse::<std::net::IpAddr>().is_ok() {
            return Err(format!("TLS to an IP address ({name}) cannot be verified by rustls 0.20 (the version Debian \
                                packages checks DNS names only): connect by a name in the server's certificate \
                                (e.g. https://localhost:PORT) or give tls_server_name"));
        }
        let server_name = ServerName::try_from(name).map_err(|_| format!("tls_server_name: {name:?} is not a DNS name"))?;
        let (ca_name, ca_path) = match &files.ca {
            Some(path) => ("tls_ca", path.clone()),
            None => ("the system CA bundle", system_bundle()?),
        };
        let mut roots = RootCertStore::empty();
        for der in certificates(ca_name, &ca_path)? {
            roots.add(&Certificate(der)).map_err(|e| format!("{ca_name}: {} holds a certificate rustls cannot use: {e}",
                                                               ca_path.display()))?;
        }
        let builder = ClientConfig::builder().with_safe_defaults().with_root_certificates(roots);
        let mut config = match (&files.cert, &files.key) {
            (Some(cert), Some(key)) => {
                let chain = certificates("tls_cert", cert)?.into_iter().map(Certificate).collect();
                builder.with_single_cert(chain, PrivateKey(private_key(key)?))
                    .map_err(|e| format!("tls_key: cannot use {} with {}: {e}", key.display(), cert.display()))?
            }
            _ => builder.with_no_client_auth(),
        };
        config.alpn_protocols = vec![b"h2".to_vec()];
        Ok(TlsConnector { connector: tokio_rustls::TlsConnector::from(std::sync::Arc::new(config)), server_name })
    }

    /// The TLS handshake over `tcp`. Errors: rustls's reason (an unknown issuer, a name
    /// the certificate does not hold, a server that is not TLS, …).
    pub async fn connect(&self, tcp: tokio::net::TcpStream)
                         -> std::io::Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>> {
        self.connector.connect(self.server_name.clone(), tcp).await
    }
}

/// Without the `tls` feature: never made ([`TlsConnector::new`] says how to get TLS).
#[cfg(not(feature = "tls"))]
#[derive(Clone, Debug)]
pub struct TlsConnector {
    never: std::convert::Infallible,
}

#[cfg(not(feature = "tls"))]
impl TlsConnector {
    /// Always an error: this build has no TLS.
    pub fn new(_files: &TlsFiles, _host: &str) -> Result<TlsConnector, String> {
        Err("TLS needs sepp-rs built with its `tls` cargo feature (on by default)".to_string())
    }

    /// Never called (no `TlsConnector` exists without the feature).
    pub async fn connect(&self, _tcp: tokio::net::TcpStream) -> std::io::Result<tokio::net::TcpStream> {
        match self.never {}
    }
}

#[cfg(all(test, feature = "tls"))]
mod tests {
    use super::*;

    fn files(ca: Option<&str>, cert: Option<&str>, key: Option<&str>) -> TlsFiles {
        TlsFiles { ca: ca.map(PathBuf::from), cert: cert.map(PathBuf::from), key: key.map(PathBuf::from), server_name: None }
    }

    #[test]
    fn a_certificate_without_its_key_is_refused_before_any_file_is_read() {
        let err = TlsConnector::new(&files(None, Some("/nonexistent/c.pem"), None), "localhost").unwrap_err();
        assert_eq!(err, "tls_cert is given without tls_key: a client certificate needs both");
        let err = TlsConnector::new(&files(None, None, Some("/nonexistent/k.pem")), "localhost").unwrap_err();
        assert_eq!(err, "tls_key is given without tls_cert: a client certificate needs both");
    }

    #[test]
    fn an_unreadable_ca_names_the_setting_and_the_path() {
        let err = TlsConnector::new(&files(Some("/nonexistent/ca.pem"), None, None), "localhost").unwrap_err();
        assert!(err.starts_with("tls_ca: cannot read /nonexistent/ca.pem: "), "{err}");
    }

    #[test]
    fn a_file_that_is_not_pem_is_refused() {
        let dir = std::env::temp_dir().join(format!("sepp-rs-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("not.pem");
        std::fs::write(&path, b"hello").unwrap();
        let err = TlsConnector::new(&files(Some(path.to_str().unwrap()), None, None), "localhost").unwrap_err();
        assert!(err.contains("is not a PEM certificate"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_ip_address_needs_a_server_name() {
        let err = TlsConnector::new(&files(Some("/nonexistent/ca.pem"), None, None), "127.0.0.1").unwrap_err();
        assert!(err.starts_with("TLS to an IP address (127.0.0.1) cannot be verified"), "{err}");
        let named = TlsFiles { server_name: Some("localhost".into()), ..files(Some("/nonexistent/ca.pem"), None, None) };
        // Past the name check, the (missing) CA file is what fails.
        assert!(TlsConnector::new(&named, "127.0.0.1").unwrap_err().starts_with("tls_ca: cannot read"));
    }
}
