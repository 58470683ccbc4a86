//! `meridian certs init`: a CA and one certificate per site for the syncer's mutual TLS.
//!
//! Each site's certificate names its site id as its DNS name (the syncer checks that the
//! peer it dialed, or that dialed it, presents the certificate of the site it claims to be)
//! and serves both for the TLS server and client roles. Keys are written with mode 0600 and
//! never overwritten. When `ca.crt` and `ca.key` exist in the output directory already (made
//! by an earlier `certs init`), new sites are signed by that CA, so a site added later joins
//! the deployment's trust without touching the others.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

/// Validity of the CA certificate.
pub const CA_VALIDITY_DAYS: u32 = 3650;
/// Default validity of site certificates (the longest most TLS policies accept).
pub const SITE_VALIDITY_DAYS_DEFAULT: u32 = 825;
/// The CA's common name. A CA reused from the output directory is rebuilt under this name,
/// so only a CA made by `certs init` can be reused.
pub const CA_COMMON_NAME: &str = "Meridian deployment CA";

/// Failures of `certs init`, each naming the file or the site.
#[derive(Debug, thiserror::Error)]
pub enum CertsError {
    #[error("'{0}' is not a valid site id (a DNS label: 1-32 characters of [A-Za-z0-9-])")]
    SiteId(String),
    #[error("no site given (--sites a,b,c)")]
    NoSites,
    #[error("{path} exists already: remove it first (certificates and keys are never overwritten)")]
    Exists { path: String },
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: found without its {missing}: keep the CA's certificate and key together")]
    HalfCa { path: String, missing: String },
    #[error("certificate generation: {0}")]
    Generate(#[from] rcgen::Error),
}

/// What `init` wrote.
#[derive(Debug)]
pub struct Written {
    pub ca_cert: PathBuf,
    /// Whether the CA was made now (false: reused from the directory).
    pub ca_created: bool,
    /// Per site: (site id, certificate, key).
    pub sites: Vec<(String, PathBuf, PathBuf)>,
}

/// Creates `out` if needed, then the CA (unless reused) and every site's certificate and key.
/// Checks every site id and every target file before writing anything.
pub fn init(sites: &[String], out: &Path, site_days: u32) -> Result<Written, CertsError> {
    if sites.is_empty() {
        return Err(CertsError::NoSites);
    }
    for s in sites {
        if !crate::config::site_id_ok(s) {
            return Err(CertsError::SiteId(s.clone()));
        }
    }
    let io = |path: &Path| {
        let path = path.display().to_string();
        move |source| CertsError::Io { path, source }
    };
    std::fs::create_dir_all(out).map_err(io(out))?;
    let ca_cert_path = out.join("ca.crt");
    let ca_key_path = out.join("ca.key");
    for s in sites {
        for p in [out.join(format!("{s}.crt")), out.join(format!("{s}.key"))] {
            if p.exists() {
                return Err(CertsError::Exists {
                    path: p.display().to_string(),
                });
            }
        }
    }
    let today = days_since_epoch();
    let (issuer, ca_created) = match (ca_cert_path.exists(), ca_key_path.exists()) {
        (true, true) => {
            let pem = std::fs::read_to_string(&ca_key_path).map_err(io(&ca_key_path))?;
            let key = KeyPair::from_pem(&pem)?;
            (Issuer::new(ca_params(today), key), false)
        }
        (false, false) => {
            let key = KeyPair::generate()?;
            let cert = ca_params(today).self_signed(&key)?;
            write_new(&ca_cert_path, cert.pem().as_bytes(), 0o644)?;
            write_new(&ca_key_path, key.serialize_pem().as_bytes(), 0o600)?;
            (Issuer::new(ca_params(today), key), true)
        }
        (true, false) => {
            return Err(CertsError::HalfCa {
                path: ca_cert_path.display().to_string(),
                missing: "key (ca.key)".to_string(),
            });
        }
        (false, true) => {
            return Err(CertsError::HalfCa {
                path: ca_key_path.display().to_string(),
                missing: "certificate (ca.crt)".to_string(),
            });
        }
    };
    let mut written = Vec::with_capacity(sites.len());
    for s in sites {
        let key = KeyPair::generate()?;
        let mut p = CertificateParams::new(vec![s.clone()])?;
        p.distinguished_name.push(DnType::CommonName, s.as_str());
        set_validity(
            &mut p,
            today.saturating_sub(1),
            today + u64::from(site_days),
        );
        p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        p.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        let cert = p.signed_by(&key, &issuer)?;
        let cert_path = out.join(format!("{s}.crt"));
        let key_path = out.join(format!("{s}.key"));
        write_new(&cert_path, cert.pem().as_bytes(), 0o644)?;
        write_new(&key_path, key.serialize_pem().as_bytes(), 0o600)?;
        written.push((s.clone(), cert_path, key_path));
    }
    Ok(Written {
        ca_cert: ca_cert_path,
        ca_created,
        sites: written,
    })
}

/// The CA's parameters; the same name and constraints every time, so that a reused CA key
/// signs certificates whose issuer is the CA certificate written the first time.
fn ca_params(today: u64) -> CertificateParams {
    let mut p = CertificateParams::default();
    p.distinguished_name
        .push(DnType::CommonName, CA_COMMON_NAME);
    p.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    p.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    set_validity(
        &mut p,
        today.saturating_sub(1),
        today + u64::from(CA_VALIDITY_DAYS),
    );
    p
}

/// Writes a file that must not exist yet, with `mode`.
fn write_new(path: &Path, bytes: &[u8], mode: u32) -> Result<(), CertsError> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
        .map_err(|source| match source.kind() {
            std::io::ErrorKind::AlreadyExists => CertsError::Exists {
                path: path.display().to_string(),
            },
            _ => CertsError::Io {
                path: path.display().to_string(),
                source,
            },
        })?;
    f.write_all(bytes).map_err(|source| CertsError::Io {
        path: path.display().to_string(),
        source,
    })
}

fn days_since_epoch() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() / 86_400)
}

/// Valid from midnight UTC of day `from` to that of day `to` (days since 1970-01-01).
fn set_validity(p: &mut CertificateParams, from: u64, to: u64) {
    let (y, m, d) = civil_from_days(from as i64);
    p.not_before = rcgen::date_time_ymd(y, m, d);
    let (y, m, d) = civil_from_days(to as i64);
    p.not_after = rcgen::date_time_ymd(y, m, d);
}

/// Proleptic Gregorian (year, month, day) of a day count since 1970-01-01 (Howard Hinnant's
/// `civil_from_days`).
fn civil_from_days(z: i64) -> (i32, u8, u8) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y as i32, m as u8, d as u8)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(59), (1970, 3, 1));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
        assert_eq!(civil_from_days(20_454), (2026, 1, 1));
    }

    #[test]
    fn init_writes_refuses_to_overwrite_and_reuses_the_ca() {
        let dir = tempfile::tempdir().unwrap();
        let w = init(&["a".into(), "b".into()], dir.path(), 30).unwrap();
        assert!(w.ca_created);
        assert_eq!(w.sites.len(), 2);
        let ca = std::fs::read_to_string(dir.path().join("ca.crt")).unwrap();
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(dir.path().join("a.key"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        let e = init(&["b".into()], dir.path(), 30).unwrap_err().to_string();
        assert!(e.contains("b.crt exists already"), "{e}");
        let w = init(&["c".into()], dir.path(), 30).unwrap();
        assert!(!w.ca_created);
        assert_eq!(
            std::fs::read_to_string(dir.path().join("ca.crt")).unwrap(),
            ca
        );
        assert!(init(&["bad_id".into()], dir.path(), 30).is_err());
        assert!(init(&[], dir.path(), 30).is_err());
    }
}
