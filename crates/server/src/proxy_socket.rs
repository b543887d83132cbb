//! `server.proxy_socket`: a unix socket only the proxy reaches, so no
//! flood on the TCP listener, from any address, can take the proxy's way
//! in. Its file's mode says who may connect; whoever may is the trusted
//! proxy ([`tollgate_http::Peer::ProxySocket`]).

use std::io;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};

use tokio::net::UnixListener;

use crate::config::ProxySocket;

/// The bound socket; its file is removed when this is dropped, so a
/// stopped tollgate leaves nothing a proxy could mistake for it.
#[derive(Debug)]
pub(crate) struct BoundSocket {
    /// The socket file.
    pub(crate) path: PathBuf,
}

impl Drop for BoundSocket {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Binds `socket` (its path relative to `base`, the config file's
/// directory) with its mode. A socket file nobody listens on (a stopped
/// tollgate's) is replaced; a live one, or any other file, is an error.
pub(crate) fn bind(socket: &ProxySocket, base: &Path) -> io::Result<(UnixListener, BoundSocket)> {
    let path = base.join(&socket.path);
    if let Ok(meta) = std::fs::symlink_metadata(&path) {
        if !meta.file_type().is_socket() {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                "a file that is not a socket is in the way",
            ));
        }
        match std::os::unix::net::UnixStream::connect(&path) {
            Ok(_) => {
                return Err(io::Error::new(
                    io::ErrorKind::AddrInUse,
                    "another process listens on it",
                ));
            }
            Err(_) => std::fs::remove_file(&path)?,
        }
    }
    let listener = UnixListener::bind(&path)?;
    let bound = BoundSocket { path };
    std::fs::set_permissions(&bound.path, std::fs::Permissions::from_mode(socket.mode))?;
    Ok((listener, bound))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn socket(path: &str) -> ProxySocket {
        ProxySocket {
            path: path.into(),
            mode: 0o600,
        }
    }

    #[tokio::test]
    async fn a_stale_socket_is_replaced_and_a_live_one_refused() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (live, bound) = bind(&socket("proxy.sock"), dir.path()).expect("binds");
        let mode = std::fs::metadata(&bound.path)
            .expect("socket file")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        let again = bind(&socket("proxy.sock"), dir.path()).expect_err("in use");
        assert_eq!(again.kind(), io::ErrorKind::AddrInUse);
        // Closed without removing its file: a stale socket.
        drop(live);
        std::mem::forget(bound);
        let (_listener, bound) = bind(&socket("proxy.sock"), dir.path()).expect("replaced");
        let path = bound.path.clone();
        drop(bound);
        assert!(!path.exists(), "removed when dropped");
    }

    #[test]
    fn a_regular_file_in_the_way_is_left_alone() {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(dir.path().join("proxy.sock"), "data").expect("write");
        let refused = bind(&socket("proxy.sock"), dir.path()).expect_err("not a socket");
        assert_eq!(refused.kind(), io::ErrorKind::AlreadyExists);
        assert_eq!(
            std::fs::read_to_string(dir.path().join("proxy.sock")).expect("still there"),
            "data"
        );
    }
}
