//! What ships beside the binary (LICENSE, deploy/, the Dockerfile) says what
//! the binary does: the Kubernetes probes hit the endpoints tollgate serves,
//! the ConfigMap holds a config tollgate loads, the systemd unit starts and
//! reloads it as it expects, and the image holds a static binary run as a
//! non-root user. The Kubernetes manifests validate against the schemas
//! (`kubernetes-validate`, from PyPI, ships them) and are parsed to check
//! that what refers to what (selectors, ports, the store URL) agrees.
//!
//! `files` reads the repository's files and `manifests` parses the
//! Kubernetes ones; each other module checks one thing that ships.

mod files;
mod image;
mod kubernetes;
mod license;
mod manifests;
mod systemd;
