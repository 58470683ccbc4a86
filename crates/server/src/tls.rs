//! Client TLS (`tls-port`): Redis 7.0's `tls-*` parameters turned into a rustls server
//! configuration (the aws-lc-rs provider the syncer uses), replaceable while connections
//! run, and the session of each connection accepted on the TLS port (its handshake runs in
//! `stream::ClientStream`).
//!
//! Redis's meanings (src/tls.c), with what rustls cannot do refused by name: only TLSv1.2
//! and TLSv1.3 exist (`tls-protocols` naming TLSv1 or TLSv1.1 is an error); `tls-ciphers`
//! (TLS 1.2) and `tls-ciphersuites` (TLS 1.3) take OpenSSL's names of the suites rustls
//! implements, not OpenSSL's cipher-string keywords; an encrypted private key
//! (`tls-key-file-pass`) is refused. `tls-ca-cert-dir` is read as every certificate of every
//! file in the directory (an OpenSSL hashed directory included).
//!
//! `ClientTls::reload` (CONFIG SET of a `tls-*` parameter) and `reload_files` (SIGHUP) swap the
//! configuration; a failed reload keeps the previous one. Sessions already established keep
//! theirs: a reload never drops a connection.

use std::path::Path;
use std::sync::{Arc, Mutex, RwLock};

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{CipherSuite, RootCertStore, ServerConfig, SupportedCipherSuite};

use crate::config::Config;

/// A client certificate request, Redis's `tls-auth-clients`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AuthClients {
    No,
    Yes,
    Optional,
}

/// Why a TLS configuration could not be built: the parameter or the file at fault.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{param}: {message}")]
    Setting {
        param: &'static str,
        message: String,
    },
    #[error("{param} {path}: {message}")]
    File {
        param: &'static str,
        path: String,
        message: String,
    },
}

/// The current client TLS configuration, shared by every connection thread.
#[derive(Debug)]
pub struct ClientTls {
    // Read at each handshake, written on reload; never held across an await.
    current: RwLock<Arc<ServerConfig>>,
    /// The settings it was built from, which SIGHUP re-reads (CONFIG SET replaces them).
    source: Mutex<Config>,
}

impl ClientTls {
    /// Builds the configuration `config`'s `tls-*` parameters describe.
    pub fn load(config: &Config) -> Result<ClientTls, TlsError> {
        Ok(ClientTls {
            current: RwLock::new(Arc::new(server_config(config)?)),
            source: Mutex::new(config.clone()),
        })
    }

    /// Rebuilds it from `config` (CONFIG SET); on failure the previous configuration stays
    /// in force.
    pub fn reload(&self, config: &Config) -> Result<(), TlsError> {
        let next = Arc::new(server_config(config)?);
        *crate::node::lock(&self.source) = config.clone();
        match self.current.write() {
            Ok(mut g) => *g = next,
            Err(poisoned) => *poisoned.into_inner() = next,
        }
        Ok(())
    }

    /// Re-reads the files of the settings in force (SIGHUP).
    pub fn reload_files(&self) -> Result<(), TlsError> {
        let config = crate::node::lock(&self.source).clone();
        self.reload(&config)
    }

    fn current(&self) -> Arc<ServerConfig> {
        match self.current.read() {
            Ok(g) => g.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// A server session for a new connection, under the configuration in force; its
    /// handshake runs as the connection reads (`stream::ClientStream::handshake`).
    pub fn session(&self) -> Result<rustls::ServerConnection, rustls::Error> {
        rustls::ServerConnection::new(self.current())
    }
}

/// The default of `tls-handshake-timeout-ms`: how long a connection to the TLS port may take
/// to complete its handshake before it is closed.
pub const HANDSHAKE_TIMEOUT_MS_DEFAULT: u64 = 10_000;

/// The parameters whose change rebuilds the configuration (CONFIG SET reloads on them).
pub const PARAMS: &[&str] = &[
    "tls-cert-file",
    "tls-key-file",
    "tls-key-file-pass",
    "tls-ca-cert-file",
    "tls-ca-cert-dir",
    "tls-auth-clients",
    "tls-protocols",
    "tls-ciphers",
    "tls-ciphersuites",
    "tls-prefer-server-ciphers",
];

/// OpenSSL's names of the TLS 1.3 suites rustls implements (`tls-ciphersuites`).
const TLS13_SUITES: &[(&str, CipherSuite)] = &[
    (
        "TLS_AES_256_GCM_SHA384",
        CipherSuite::TLS13_AES_256_GCM_SHA384,
    ),
    (
        "TLS_AES_128_GCM_SHA256",
        CipherSuite::TLS13_AES_128_GCM_SHA256,
    ),
    (
        "TLS_CHACHA20_POLY1305_SHA256",
        CipherSuite::TLS13_CHACHA20_POLY1305_SHA256,
    ),
];

/// OpenSSL's names of the TLS 1.2 suites rustls implements (`tls-ciphers`).
const TLS12_SUITES: &[(&str, CipherSuite)] = &[
    (
        "ECDHE-ECDSA-AES256-GCM-SHA384",
        CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
    ),
    (
        "ECDHE-ECDSA-AES128-GCM-SHA256",
        CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
    ),
    (
        "ECDHE-ECDSA-CHACHA20-POLY1305",
        CipherSuite::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
    ),
    (
        "ECDHE-RSA-AES256-GCM-SHA384",
        CipherSuite::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
    ),
    (
        "ECDHE-RSA-AES128-GCM-SHA256",
        CipherSuite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
    ),
    (
        "ECDHE-RSA-CHACHA20-POLY1305",
        CipherSuite::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
    ),
];

/// `tls-protocols`: which of TLSv1.2 and TLSv1.3 (empty: both, Redis's default). Returns
/// (TLS 1.2, TLS 1.3).
pub fn parse_protocols(text: &str) -> Result<(bool, bool), String> {
    let mut v12 = false;
    let mut v13 = false;
    for word in text.split_ascii_whitespace() {
        match word.to_ascii_lowercase().as_str() {
            "tlsv1.2" => v12 = true,
            "tlsv1.3" => v13 = true,
            "tlsv1" | "tlsv1.1" => {
                return Err(format!(
                    "{word} is not supported: Meridian's TLS (rustls) implements TLSv1.2 and TLSv1.3 only"
                ));
            }
            _ => {
                return Err(
                    "Invalid tls-protocols specified. Use a combination of 'TLSv1.2' and 'TLSv1.3'."
                        .to_string(),
                );
            }
        }
    }
    if !v12 && !v13 {
        return Ok((true, true));
    }
    Ok((v12, v13))
}

/// A colon-separated list of OpenSSL suite names (`tls-ciphers`, `tls-ciphersuites`), in
/// preference order; empty: every suite of the table.
fn parse_suites(
    text: &str,
    table: &[(&str, CipherSuite)],
    param: &str,
) -> Result<Vec<CipherSuite>, String> {
    let mut out = Vec::new();
    for name in text
        .split([':', ',', ' '])
        .map(str::trim)
        .filter(|n| !n.is_empty())
    {
        match table.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)) {
            Some((_, suite)) => {
                if !out.contains(suite) {
                    out.push(*suite);
                }
            }
            None => {
                let known: Vec<&str> = table.iter().map(|(n, _)| *n).collect();
                return Err(format!(
                    "unsupported {param} '{name}': Meridian's TLS (rustls) offers {} (OpenSSL cipher-string keywords are not supported)",
                    known.join(":")
                ));
            }
        }
    }
    if out.is_empty() {
        out = table.iter().map(|(_, s)| *s).collect();
    }
    Ok(out)
}

/// Checks a `tls-ciphers` value (CONFIG SET, the file, flags).
pub fn check_ciphers(text: &str) -> Result<String, String> {
    parse_suites(text, TLS12_SUITES, "tls-ciphers").map(|_| text.to_string())
}

/// Checks a `tls-ciphersuites` value.
pub fn check_ciphersuites(text: &str) -> Result<String, String> {
    parse_suites(text, TLS13_SUITES, "tls-ciphersuites").map(|_| text.to_string())
}

/// Checks a `tls-protocols` value.
pub fn check_protocols(text: &str) -> Result<String, String> {
    parse_protocols(text).map(|_| text.to_string())
}

/// Checks a `tls-key-file-pass` value: rustls reads no encrypted key, so only "" is taken.
pub fn check_key_file_pass(text: &str) -> Result<String, String> {
    if text.is_empty() {
        Ok(String::new())
    } else {
        Err(KEY_PASS_REFUSED.to_string())
    }
}

const KEY_PASS_REFUSED: &str = "encrypted private keys are not supported (rustls reads unencrypted PEM keys only): decrypt it with `openssl pkey -in KEY -out PLAIN.key` and leave tls-key-file-pass empty";

fn auth_clients(text: &str) -> AuthClients {
    match text {
        "no" => AuthClients::No,
        "optional" => AuthClients::Optional,
        _ => AuthClients::Yes,
    }
}

fn file_err(param: &'static str, path: &str, message: impl std::fmt::Display) -> TlsError {
    TlsError::File {
        param,
        path: path.to_string(),
        message: message.to_string(),
    }
}

fn read_certs(param: &'static str, path: &str) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs: Result<Vec<_>, _> = CertificateDer::pem_file_iter(path)
        .map_err(|e| file_err(param, path, e))?
        .collect();
    let certs = certs.map_err(|e| file_err(param, path, e))?;
    if certs.is_empty() {
        return Err(file_err(param, path, "no PEM certificate found"));
    }
    Ok(certs)
}

fn read_key(path: &str) -> Result<PrivateKeyDer<'static>, TlsError> {
    let text = std::fs::read(path).map_err(|e| file_err("tls-key-file", path, e))?;
    if memchr::memmem::find(&text, b"ENCRYPTED").is_some() {
        return Err(file_err("tls-key-file", path, KEY_PASS_REFUSED));
    }
    PrivateKeyDer::from_pem_slice(&text)
        .map_err(|e| file_err("tls-key-file", path, format!("no usable private key: {e}")))
}

/// The CA certificates of `tls-ca-cert-file` and of every file in `tls-ca-cert-dir`.
fn read_roots(config: &Config) -> Result<RootCertStore, TlsError> {
    let mut roots = RootCertStore::empty();
    if !config.tls_ca_cert_file.is_empty() {
        let path = config.tls_ca_cert_file.as_str();
        for ca in read_certs("tls-ca-cert-file", path)? {
            roots
                .add(ca)
                .map_err(|e| file_err("tls-ca-cert-file", path, e))?;
        }
    }
    if !config.tls_ca_cert_dir.is_empty() {
        let dir = config.tls_ca_cert_dir.as_str();
        let entries =
            std::fs::read_dir(Path::new(dir)).map_err(|e| file_err("tls-ca-cert-dir", dir, e))?;
        let mut found = 0usize;
        for entry in entries {
            let entry = entry.map_err(|e| file_err("tls-ca-cert-dir", dir, e))?;
            let path = entry.path();
            if !path.is_file() {
                continue;
            }
            // Files that hold no certificate (a README, a CRL) are passed over.
            let Ok(iter) = CertificateDer::pem_file_iter(&path) else {
                continue;
            };
            for cert in iter.flatten() {
                if roots.add(cert).is_ok() {
                    found += 1;
                }
            }
        }
        if found == 0 {
            return Err(file_err(
                "tls-ca-cert-dir",
                dir,
                "no PEM CA certificate found in the directory",
            ));
        }
    }
    Ok(roots)
}

/// The rustls server configuration of `config`'s `tls-*` parameters.
pub fn server_config(config: &Config) -> Result<ServerConfig, TlsError> {
    let setting = |param: &'static str, message: String| TlsError::Setting { param, message };
    if config.tls_cert_file.is_empty() {
        return Err(setting(
            "tls-cert-file",
            "No tls-cert-file configured!".into(),
        ));
    }
    if config.tls_key_file.is_empty() {
        return Err(setting(
            "tls-key-file",
            "No tls-key-file configured!".into(),
        ));
    }
    check_key_file_pass(&config.tls_key_file_pass).map_err(|m| setting("tls-key-file-pass", m))?;
    let auth = auth_clients(&config.tls_auth_clients);
    if auth != AuthClients::No
        && config.tls_ca_cert_file.is_empty()
        && config.tls_ca_cert_dir.is_empty()
    {
        return Err(setting(
            "tls-auth-clients",
            "Either tls-ca-cert-file or tls-ca-cert-dir must be specified when tls-auth-clients is enabled!".into(),
        ));
    }
    let (v12, v13) =
        parse_protocols(&config.tls_protocols).map_err(|m| setting("tls-protocols", m))?;
    let mut wanted: Vec<CipherSuite> = Vec::new();
    if v13 {
        wanted.extend(
            parse_suites(&config.tls_ciphersuites, TLS13_SUITES, "tls-ciphersuites")
                .map_err(|m| setting("tls-ciphersuites", m))?,
        );
    }
    if v12 {
        wanted.extend(
            parse_suites(&config.tls_ciphers, TLS12_SUITES, "tls-ciphers")
                .map_err(|m| setting("tls-ciphers", m))?,
        );
    }
    let base = rustls::crypto::aws_lc_rs::default_provider();
    let suites: Vec<SupportedCipherSuite> = wanted
        .iter()
        .filter_map(|w| base.cipher_suites.iter().find(|s| s.suite() == *w).copied())
        .collect();
    let provider = Arc::new(CryptoProvider {
        cipher_suites: suites,
        ..base
    });
    let versions: Vec<&'static rustls::SupportedProtocolVersion> = [
        v13.then_some(&rustls::version::TLS13),
        v12.then_some(&rustls::version::TLS12),
    ]
    .into_iter()
    .flatten()
    .collect();
    let certs = read_certs("tls-cert-file", &config.tls_cert_file)?;
    let key = read_key(&config.tls_key_file)?;
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&versions)
        .map_err(|e| setting("tls-protocols", e.to_string()))?;
    let builder = match auth {
        AuthClients::No => builder.with_no_client_auth(),
        AuthClients::Yes | AuthClients::Optional => {
            let roots = Arc::new(read_roots(config)?);
            let b = WebPkiClientVerifier::builder_with_provider(roots, provider);
            let b = if auth == AuthClients::Optional {
                b.allow_unauthenticated()
            } else {
                b
            };
            let ca = if config.tls_ca_cert_file.is_empty() {
                ("tls-ca-cert-dir", config.tls_ca_cert_dir.as_str())
            } else {
                ("tls-ca-cert-file", config.tls_ca_cert_file.as_str())
            };
            let verifier = b.build().map_err(|e| file_err(ca.0, ca.1, e))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut server = builder
        .with_single_cert(certs, key)
        .map_err(|e| file_err("tls-cert-file", &config.tls_cert_file, e))?;
    server.ignore_client_order = config.tls_prefer_server_ciphers;
    // RESP clients speak no ALPN; none is offered or required.
    Ok(server)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protocols_are_redis_words_rustls_implements() {
        assert_eq!(parse_protocols(""), Ok((true, true)));
        assert_eq!(parse_protocols("TLSv1.2 TLSv1.3"), Ok((true, true)));
        assert_eq!(parse_protocols("tlsv1.3"), Ok((false, true)));
        assert_eq!(parse_protocols("TLSv1.2"), Ok((true, false)));
        assert!(
            parse_protocols("TLSv1.1")
                .unwrap_err()
                .contains("not supported")
        );
        assert!(
            parse_protocols("TLSv1 TLSv1.2")
                .unwrap_err()
                .contains("TLSv1 is")
        );
        assert!(
            parse_protocols("SSLv3")
                .unwrap_err()
                .contains("Invalid tls-protocols")
        );
    }

    #[test]
    fn suites_take_openssl_names_in_order() {
        assert_eq!(
            parse_suites(
                "ECDHE-RSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES256-GCM-SHA384",
                TLS12_SUITES,
                "tls-ciphers"
            ),
            Ok(vec![
                CipherSuite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
                CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384
            ])
        );
        assert_eq!(
            parse_suites("", TLS13_SUITES, "tls-ciphersuites").map(|v| v.len()),
            Ok(3)
        );
        let e = check_ciphers("HIGH:!aNULL").unwrap_err();
        assert!(e.contains("unsupported tls-ciphers 'HIGH'"), "{e}");
        let e = check_ciphers("AES128-SHA").unwrap_err();
        assert!(e.contains("ECDHE-RSA-AES128-GCM-SHA256"), "{e}");
        assert!(check_ciphersuites("TLS_AES_128_GCM_SHA256").is_ok());
        assert!(check_ciphersuites("TLS_AES_128_CCM_SHA256").is_err());
    }

    #[test]
    fn errors_name_the_parameter_or_file() {
        let mut c = Config::default();
        let e = server_config(&c).unwrap_err().to_string();
        assert!(e.contains("No tls-cert-file configured!"), "{e}");
        c.tls_cert_file = "/nonexistent/server.crt".into();
        c.tls_key_file = "/nonexistent/server.key".into();
        let e = server_config(&c).unwrap_err().to_string();
        assert!(e.contains("tls-ca-cert-file or tls-ca-cert-dir"), "{e}");
        c.tls_auth_clients = "no".into();
        let e = server_config(&c).unwrap_err().to_string();
        assert!(e.contains("tls-cert-file /nonexistent/server.crt"), "{e}");
        c.tls_key_file_pass = "secret".into();
        let e = server_config(&c).unwrap_err().to_string();
        assert!(
            e.contains("encrypted private keys are not supported"),
            "{e}"
        );
    }

    #[test]
    fn a_config_builds_from_generated_files_and_refuses_a_wrong_key() {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, text: &str| {
            let p = dir.path().join(name);
            std::fs::write(&p, text).unwrap();
            p.display().to_string()
        };
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca = ca_params.self_signed(&ca_key).unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["localhost".to_string()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let mut c = Config {
            tls_cert_file: write("s.crt", &cert.pem()),
            tls_key_file: write("s.key", &key.serialize_pem()),
            tls_ca_cert_file: write("ca.crt", &ca.pem()),
            ..Config::default()
        };
        let tls = ClientTls::load(&c).unwrap();
        c.tls_protocols = "TLSv1.3".into();
        c.tls_ciphersuites = "TLS_CHACHA20_POLY1305_SHA256".into();
        c.tls_prefer_server_ciphers = true;
        tls.reload(&c).unwrap();
        assert!(tls.current().ignore_client_order);
        // A key that is not the certificate's: refused, naming the certificate; the
        // configuration in force stays.
        c.tls_key_file = write("other.key", &ca_key.serialize_pem());
        let e = tls.reload(&c).unwrap_err().to_string();
        assert!(e.contains("tls-cert-file"), "{e}");
        assert!(tls.current().ignore_client_order);
        // A directory of CA files.
        let cadir = dir.path().join("cas");
        std::fs::create_dir(&cadir).unwrap();
        std::fs::write(cadir.join("1a2b3c4d.0"), ca.pem()).unwrap();
        std::fs::write(cadir.join("README"), "not a certificate").unwrap();
        c.tls_key_file = dir.path().join("s.key").display().to_string();
        c.tls_ca_cert_file.clear();
        c.tls_ca_cert_dir = cadir.display().to_string();
        tls.reload(&c).unwrap();
        let empty = dir.path().join("empty");
        std::fs::create_dir(&empty).unwrap();
        c.tls_ca_cert_dir = empty.display().to_string();
        let e = tls.reload(&c).unwrap_err().to_string();
        assert!(e.contains("no PEM CA certificate found"), "{e}");
    }
}
