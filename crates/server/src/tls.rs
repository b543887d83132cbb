//! TLS at the edge (`server.tls`): one certificate and key, read and checked
//! when the config loads (so `tollgate validate` refuses what `serve`
//! would), served on the HTTP listener (ALPN `http/1.1`) and on the gRPC
//! listener (ALPN `h2`).
//!
//! rustls with the `ring` provider, named explicitly, so that the crypto
//! does not depend on which provider some other crate happened to enable.
//! Each handshake runs on the worker that owns the connection, never on
//! the acceptor: one slow client cannot stall accepting. [`EdgeStream`] is
//! the connection either way, so the code above it is the same for both.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use serde::Deserialize;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::ServerConfig;
use tokio_rustls::rustls::crypto::ring;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// `server.tls` as written: PEM files, relative to the config file.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct TlsPaths {
    /// The certificate chain, leaf first.
    pub cert: PathBuf,
    /// The private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
}

/// Why `server.tls` could not be used; each names the file at fault (and
/// never quotes the key file's content).
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read.
    #[error("server.tls.{field}: cannot read {}: {source}", path.display())]
    Read {
        /// `cert` or `key`.
        field: &'static str,
        /// The file.
        path: PathBuf,
        /// Why reading failed.
        source: io::Error,
    },
    /// The certificate file holds no usable certificate.
    #[error("server.tls.cert: {} holds no PEM certificate{}", path.display(), reason.as_deref().map(|r| format!(" ({r})")).unwrap_or_default())]
    Cert {
        /// The certificate file.
        path: PathBuf,
        /// The PEM parser's error; `None` when the file parsed but holds none.
        reason: Option<String>,
    },
    /// The key file holds no usable private key.
    #[error("server.tls.key: {} holds no PEM private key (PKCS#8, PKCS#1 or SEC1)", path.display())]
    Key {
        /// The key file.
        path: PathBuf,
    },
    /// The key and certificate do not make a usable server identity.
    #[error("server.tls: the key {} does not serve the certificate {}: {reason}", key.display(), cert.display())]
    Identity {
        /// The certificate file.
        cert: PathBuf,
        /// The key file.
        key: PathBuf,
        /// Why the TLS library refused the pair.
        reason: String,
    },
}

/// A loaded `server.tls`, ready for both listeners.
#[derive(Clone)]
pub struct EdgeTls {
    /// The files it was loaded from.
    pub paths: TlsPaths,
    http: Arc<ServerConfig>,
    grpc: Arc<ServerConfig>,
}

impl fmt::Debug for EdgeTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The key's bytes are in the configs; only the paths are shown.
        f.debug_struct("EdgeTls")
            .field("cert", &self.paths.cert)
            .field("key", &self.paths.key)
            .finish_non_exhaustive()
    }
}

impl EdgeTls {
    /// Reads and checks the files, relative to `base` (the config file's
    /// directory).
    pub fn load(paths: &TlsPaths, base: &Path) -> Result<Self, TlsError> {
        let cert_path = base.join(&paths.cert);
        let key_path = base.join(&paths.key);
        let read = |field, path: &Path| {
            std::fs::read(path).map_err(|source| TlsError::Read {
                field,
                path: path.to_owned(),
                source,
            })
        };
        let cert_pem = read("cert", &cert_path)?;
        let key_pem = read("key", &key_path)?;
        let chain = CertificateDer::pem_slice_iter(&cert_pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| TlsError::Cert {
                path: cert_path.clone(),
                reason: Some(e.to_string()),
            })?;
        if chain.is_empty() {
            return Err(TlsError::Cert {
                path: cert_path,
                reason: None,
            });
        }
        let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|_| TlsError::Key {
            path: key_path.clone(),
        })?;
        let mut http = ServerConfig::builder_with_provider(Arc::new(ring::default_provider()))
            .with_safe_default_protocol_versions()
            .and_then(|b| b.with_no_client_auth().with_single_cert(chain, key))
            .map_err(|e| TlsError::Identity {
                cert: cert_path.clone(),
                key: key_path.clone(),
                reason: e.to_string(),
            })?;
        let mut grpc = http.clone();
        http.alpn_protocols = vec![b"http/1.1".to_vec()];
        grpc.alpn_protocols = vec![b"h2".to_vec()];
        Ok(Self {
            paths: paths.clone(),
            http: Arc::new(http),
            grpc: Arc::new(grpc),
        })
    }

    /// The acceptor for HTTP connections.
    pub fn acceptor(&self) -> TlsAcceptor {
        TlsAcceptor::from(Arc::clone(&self.http))
    }

    /// The acceptor for gRPC connections (ALPN `h2`).
    pub fn grpc_acceptor(&self) -> TlsAcceptor {
        TlsAcceptor::from(Arc::clone(&self.grpc))
    }
}

/// An HTTP connection's stream: plain TCP, or TLS over it.
pub enum EdgeStream {
    /// Plain TCP.
    Plain(TcpStream),
    /// TLS over TCP, handshake done.
    Tls(Box<tokio_rustls::server::TlsStream<TcpStream>>),
}

impl AsyncRead for EdgeStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            EdgeStream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            EdgeStream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for EdgeStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            EdgeStream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            EdgeStream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            EdgeStream::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            EdgeStream::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            EdgeStream::Plain(s) => s.is_write_vectored(),
            EdgeStream::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            EdgeStream::Plain(s) => Pin::new(s).poll_flush(cx),
            EdgeStream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            EdgeStream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            EdgeStream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}
