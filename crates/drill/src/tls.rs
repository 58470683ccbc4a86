//! Mutual-TLS material for one cluster, made at run time with rcgen: a CA and, per site, a
//! certificate for the DNS name equal to the site id (docs/replication.md §7).

use std::path::{Path, PathBuf};

use anyhow::Context as _;

/// The three files a site passes as `--sync-tls-cert/--sync-tls-key/--sync-tls-ca`.
#[derive(Clone, Debug)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub ca: PathBuf,
}

impl TlsFiles {
    pub fn flags(&self) -> Vec<String> {
        vec![
            "--sync-tls-cert".into(),
            self.cert.display().to_string(),
            "--sync-tls-key".into(),
            self.key.display().to_string(),
            "--sync-tls-ca".into(),
            self.ca.display().to_string(),
        ]
    }
}

/// Writes `ca.crt` and `<site>.crt`/`<site>.key` for every site into `dir`.
pub fn make(dir: &Path, sites: &[String]) -> anyhow::Result<Vec<TlsFiles>> {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
    std::fs::create_dir_all(dir)?;
    let mut p = CertificateParams::new(Vec::<String>::new()).context("ca params")?;
    p.distinguished_name
        .push(DnType::CommonName, "meridian drill ca");
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_key = KeyPair::generate().context("ca key")?;
    let ca_cert = p.self_signed(&ca_key).context("self-signed ca")?;
    let issuer = rcgen::Issuer::new(p, ca_key);
    let ca_path = dir.join("ca.crt");
    std::fs::write(&ca_path, ca_cert.pem())?;
    let mut out = Vec::with_capacity(sites.len());
    for s in sites {
        let key = KeyPair::generate().context("site key")?;
        let cert = CertificateParams::new(vec![s.clone()])
            .context("site params")?
            .signed_by(&key, &issuer)
            .context("sign site certificate")?;
        let files = TlsFiles {
            cert: dir.join(format!("{s}.crt")),
            key: dir.join(format!("{s}.key")),
            ca: ca_path.clone(),
        };
        std::fs::write(&files.cert, cert.pem())?;
        std::fs::write(&files.key, key.serialize_pem())?;
        out.push(files);
    }
    Ok(out)
}
