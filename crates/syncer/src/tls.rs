//! Mutual TLS between sites (rustls with the aws-lc-rs provider).
//!
//! Every site has one certificate, used both as a server (links peers dial) and as a client
//! (links it dials), and trusts one CA file. A certificate counts as site `x`'s when it chains
//! to the CA and is valid for the DNS name `x`: the dialer checks the server's name through
//! rustls, and the accepter checks the client's against the site id its `Hello` claims
//! (`check_peer_name`). `TlsContext::reload` re-reads the files (SIGHUP); links established
//! before keep their session.

use std::path::PathBuf;
use std::sync::{Arc, RwLock};

pub use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{PrivateKeyDer, ServerName};
use rustls::{ClientConfig, RootCertStore, ServerConfig};

use crate::error::SyncError;

/// The three files of a site's TLS identity.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub ca: PathBuf,
}

#[derive(Debug)]
struct Configs {
    server: Arc<ServerConfig>,
    client: Arc<ClientConfig>,
}

/// The current TLS configuration of a site, replaceable while links run.
#[derive(Debug)]
pub struct TlsContext {
    files: TlsFiles,
    // Read at each handshake, written on reload; never held across an await.
    current: RwLock<Arc<Configs>>,
}

impl TlsContext {
    /// Loads the files; fails with a message naming the file at fault.
    pub fn load(files: TlsFiles) -> Result<TlsContext, SyncError> {
        let configs = build(&files)?;
        Ok(TlsContext {
            files,
            current: RwLock::new(Arc::new(configs)),
        })
    }

    /// Re-reads the files; on failure the previous configuration stays in force.
    pub fn reload(&self) -> Result<(), SyncError> {
        let configs = Arc::new(build(&self.files)?);
        match self.current.write() {
            Ok(mut g) => *g = configs,
            Err(poisoned) => *poisoned.into_inner() = configs,
        }
        Ok(())
    }

    fn configs(&self) -> Arc<Configs> {
        match self.current.read() {
            Ok(g) => g.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Accepts a TLS connection from a peer (whose certificate must chain to the CA).
    pub async fn accept<S>(
        &self,
        stream: S,
    ) -> Result<tokio_rustls::server::TlsStream<S>, SyncError>
    where
        S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    {
        let acceptor = tokio_rustls::TlsAcceptor::from(self.configs().server.clone());
        acceptor
            .accept(stream)
            .await
            .map_err(|e| SyncError::Tls(e.to_string()))
    }

    /// Connects to the peer `site`, whose certificate must be valid for that name.
    pub async fn connect<S>(
        &self,
        site: &str,
        stream: S,
    ) -> Result<tokio_rustls::client::TlsStream<S>, SyncError>
    where
        S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    {
        let name = ServerName::try_from(site.to_string())
            .map_err(|_| SyncError::Tls(format!("site id {site:?} is not a DNS name")))?;
        let connector = tokio_rustls::TlsConnector::from(self.configs().client.clone());
        connector
            .connect(name, stream)
            .await
            .map_err(|e| SyncError::Tls(e.to_string()))
    }
}

/// The leaf certificate a peer presented on an accepted connection.
pub fn peer_leaf<S>(
    stream: &tokio_rustls::server::TlsStream<S>,
) -> Option<CertificateDer<'static>> {
    stream
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|c| c.first())
        .map(|c| c.clone().into_owned())
}

/// Checks that a peer's leaf certificate (whose chain the handshake verified) is valid for the
/// DNS name `site`.
pub fn check_cert_name(leaf: Option<&CertificateDer<'_>>, site: &str) -> Result<(), SyncError> {
    let leaf = leaf.ok_or_else(|| SyncError::Refused("peer presented no certificate".into()))?;
    let name = ServerName::try_from(site.to_string())
        .map_err(|_| SyncError::Refused(format!("site id {site:?} is not a DNS name")))?;
    let cert = webpki::EndEntityCert::try_from(leaf)
        .map_err(|e| SyncError::Refused(format!("unreadable peer certificate: {e}")))?;
    cert.verify_is_valid_for_subject_name(&name)
        .map_err(|_| SyncError::Refused(format!("peer certificate is not valid for site {site:?}")))
}

/// Checks that the client certificate of an accepted connection is valid for `site`.
pub fn check_peer_name<S>(
    stream: &tokio_rustls::server::TlsStream<S>,
    site: &str,
) -> Result<(), SyncError> {
    check_cert_name(peer_leaf(stream).as_ref(), site)
}

fn read_certs(path: &PathBuf) -> Result<Vec<CertificateDer<'static>>, SyncError> {
    let certs: Result<Vec<_>, _> = CertificateDer::pem_file_iter(path)
        .map_err(|e| SyncError::Tls(format!("{}: {e}", path.display())))?
        .collect();
    let certs = certs.map_err(|e| SyncError::Tls(format!("{}: {e}", path.display())))?;
    if certs.is_empty() {
        return Err(SyncError::Tls(format!(
            "{}: no certificate found",
            path.display()
        )));
    }
    Ok(certs)
}

fn build(files: &TlsFiles) -> Result<Configs, SyncError> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let certs = read_certs(&files.cert)?;
    let key = PrivateKeyDer::from_pem_file(&files.key)
        .map_err(|e| SyncError::Tls(format!("{}: {e}", files.key.display())))?;
    let mut roots = RootCertStore::empty();
    for ca in read_certs(&files.ca)? {
        roots
            .add(ca)
            .map_err(|e| SyncError::Tls(format!("{}: {e}", files.ca.display())))?;
    }
    let roots = Arc::new(roots);
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
        roots.clone(),
        provider.clone(),
    )
    .build()
    .map_err(|e| SyncError::Tls(format!("{}: {e}", files.ca.display())))?;
    let server = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| SyncError::Tls(e.to_string()))?
        .with_client_cert_verifier(verifier)
        .with_single_cert(certs.clone(), key.clone_key())
        .map_err(|e| SyncError::Tls(format!("{}: {e}", files.cert.display())))?;
    let client = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| SyncError::Tls(e.to_string()))?
        .with_root_certificates(roots)
        .with_client_auth_cert(certs, key)
        .map_err(|e| SyncError::Tls(format!("{}: {e}", files.cert.display())))?;
    Ok(Configs {
        server: Arc::new(server),
        client: Arc::new(client),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};

    struct Ca {
        cert: rcgen::Certificate,
        issuer: rcgen::Issuer<'static, KeyPair>,
    }

    fn ca() -> Ca {
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let key = KeyPair::generate().unwrap();
        let cert = p.self_signed(&key).unwrap();
        Ca {
            cert,
            issuer: rcgen::Issuer::new(p, key),
        }
    }

    fn site_files(dir: &std::path::Path, ca: &Ca, site: &str) -> TlsFiles {
        let key = KeyPair::generate().unwrap();
        let cert = CertificateParams::new(vec![site.to_string()])
            .unwrap()
            .signed_by(&key, &ca.issuer)
            .unwrap();
        let files = TlsFiles {
            cert: dir.join(format!("{site}.crt")),
            key: dir.join(format!("{site}.key")),
            ca: dir.join(format!("{site}-ca.crt")),
        };
        std::fs::write(&files.cert, cert.pem()).unwrap();
        std::fs::write(&files.key, key.serialize_pem()).unwrap();
        std::fs::write(&files.ca, ca.cert.pem()).unwrap();
        files
    }

    async fn handshake(
        a: &TlsContext,
        b: &TlsContext,
        dial_as: &str,
        claim: &str,
    ) -> Result<(), SyncError> {
        let (c, s) = tokio::io::duplex(1 << 16);
        let client = a.connect(dial_as, c);
        let server = async {
            let st = b.accept(s).await?;
            check_peer_name(&st, claim)
        };
        let (cr, sr) = tokio::join!(client, server);
        cr.map(|_| ()).and(sr)
    }

    #[tokio::test(flavor = "current_thread")]
    async fn mutual_tls_checks_chain_and_names() {
        let dir = tempfile::tempdir().unwrap();
        let ca1 = ca();
        let a = TlsContext::load(site_files(dir.path(), &ca1, "a")).unwrap();
        let b = TlsContext::load(site_files(dir.path(), &ca1, "b")).unwrap();
        // a dials b: b's certificate must name b; a's must name the site it claims (a).
        handshake(&a, &b, "b", "a").await.unwrap();
        // a dials a host whose certificate names b while expecting site c: refused.
        assert!(handshake(&a, &b, "c", "a").await.is_err());
        // a claims to be site z: its certificate does not say so.
        let e = handshake(&a, &b, "b", "z").await.unwrap_err();
        assert!(e.to_string().contains("not valid for site"), "{e}");
        // A certificate from another CA is refused in the handshake.
        let other = ca();
        let sub = dir.path().join("other");
        std::fs::create_dir(&sub).unwrap();
        let x = TlsContext::load(site_files(&sub, &other, "a")).unwrap();
        assert!(handshake(&x, &b, "b", "a").await.is_err());
        // Reload keeps working with valid files and refuses broken ones, keeping the old.
        b.reload().unwrap();
        std::fs::write(dir.path().join("b.key"), "garbage").unwrap();
        assert!(b.reload().is_err());
        handshake(&a, &b, "b", "a").await.unwrap();
    }

    #[test]
    fn missing_files_name_the_file() {
        let e = TlsContext::load(TlsFiles {
            cert: "/nonexistent/x.crt".into(),
            key: "/nonexistent/x.key".into(),
            ca: "/nonexistent/ca.crt".into(),
        })
        .unwrap_err();
        assert!(e.to_string().contains("/nonexistent/x.crt"), "{e}");
    }
}
