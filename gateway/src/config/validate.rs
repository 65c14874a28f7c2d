//! The checks every section of the config file shares: each one records a problem (with the
//! key's path and line) instead of stopping, so that one run lists everything to fix.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::CertificateDer;

use super::Problem;
use super::defaults::limits::{MAX_CA_FILE_BYTES, MAX_NAME_LEN, Span};
use super::raw::RawBinding;
use crate::model::PluginBinding;
use crate::policy::Policy;

/// [`valid_name`] in words, for every message that refuses a name.
pub const NAME_RULE: &str =
    "1-128 characters of a-z, A-Z, 0-9, `-`, `_`, `.`, starting with a letter or digit";

/// The one rule of every name — topics, endpoints (from the file or the API), tenants,
/// channels — stated by [`NAME_RULE`]: they travel in URLs and metric labels, and a first
/// letter or digit keeps out `.` and `..`, which a URL's path resolves away.
pub fn valid_name(name: &str) -> bool {
    name.len() <= MAX_NAME_LEN
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

pub(super) struct Validator<'a> {
    pub(super) label: &'a str,
    pub(super) line_of: &'a dyn Fn(&str) -> usize,
    pub(super) problems: Vec<Problem>,
    /// How many of the problems are addresses the SSRF rules block (the API's
    /// `blocked_address`).
    pub(super) blocked_addresses: usize,
}

impl<'a> Validator<'a> {
    pub(super) fn new(label: &'a str, line_of: &'a dyn Fn(&str) -> usize) -> Self {
        Validator {
            label,
            line_of,
            problems: Vec::new(),
            blocked_addresses: 0,
        }
    }
}

impl Validator<'_> {
    pub(super) fn problem(&mut self, path: &str, reason: String) {
        self.problems.push(Problem {
            file: self.label.to_owned(),
            line: (self.line_of)(path),
            path: path.to_owned(),
            reason,
        });
    }

    pub(super) fn parse<T, E: std::fmt::Display>(
        &mut self,
        path: &str,
        text: &str,
        f: impl FnOnce(&str) -> Result<T, E>,
    ) -> Option<T> {
        match f(text) {
            Ok(v) => Some(v),
            Err(reason) => {
                self.problem(path, reason.to_string());
                None
            }
        }
    }

    /// A duration such as `30s` or `2d`, within `span`; `default` when the key is absent or
    /// wrong. A value out of its span is one plain sentence with the default as the example.
    pub(super) fn duration(
        &mut self,
        path: &str,
        text: Option<&str>,
        default: Duration,
        span: Span,
    ) -> Duration {
        let Some(text) = text else { return default };
        let Some(value) = self.parse(path, text, crate::policy::parse_duration) else {
            return default;
        };
        let example = crate::policy::humanize_duration(default);
        if value < span.min {
            let least = crate::policy::humanize_duration(span.min);
            let reason = match span.min_because {
                Some(because) => {
                    format!("`{text}` is too short: at least {least}, {because} (e.g. {example})")
                }
                None => format!("`{text}` is too short: at least {least} (e.g. {example})"),
            };
            self.problem(path, reason);
            return default;
        }
        if value > span.max {
            let most = crate::policy::humanize_duration(span.max);
            self.problem(
                path,
                format!("`{text}` is too long: at most {most} (e.g. {example})"),
            );
            return default;
        }
        value
    }

    pub(super) fn size(&mut self, path: &str, text: Option<&str>, default: usize) -> usize {
        match text {
            None => default,
            Some(t) => self.parse(path, t, parse_size).unwrap_or(default),
        }
    }

    pub(super) fn positive(&mut self, path: &str, value: Option<u32>) -> Option<u32> {
        match value {
            Some(0) => {
                self.problem(path, "must be at least 1".into());
                None
            }
            other => other,
        }
    }

    /// Topic and endpoint names appear in URLs and metrics labels: keep them plain.
    pub(super) fn name(&mut self, path: &str, name: &str) {
        if !valid_name(name) {
            self.problem(path, format!("`{name}` must be {NAME_RULE}"));
        }
    }

    pub(super) fn policy_exists(&mut self, path: &str, name: &str, policies: &BTreeMap<String, Arc<Policy>>) {
        if !policies.contains_key(name) {
            let known: Vec<&str> = policies.keys().map(String::as_str).collect();
            self.problem(
                path,
                format!("unknown policy `{name}` (known: {})", known.join(", ")),
            );
        }
    }

    pub(super) fn binding(&mut self, path: &str, raw: Option<RawBinding>) -> Option<PluginBinding> {
        let raw = raw?;
        if raw.plugin.trim().is_empty() {
            self.problem(&format!("{path}.plugin"), "a plugin name may not be empty".into());
            return None;
        }
        let config = raw
            .config
            .into_iter()
            .map(|(k, v)| {
                let text = match v {
                    serde_json::Value::String(s) => s,
                    other => other.to_string(),
                };
                (k, text)
            })
            .collect();
        Some(PluginBinding {
            plugin: PluginBinding::normalize_name(&raw.plugin).into_owned(),
            config,
        })
    }
}

/// Why a size such as `256KiB` was refused; each names the text as written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(super) enum SizeError {
    #[error("`{0}` is not a size such as 256KiB")]
    NotASize(String),
    #[error("unknown size unit `{0}` (use B, KiB, MiB, GiB, KB, MB, GB)")]
    UnknownUnit(String),
    #[error("`{0}` is out of range")]
    OutOfRange(String),
}

/// `256KiB`, `1MiB`, `1000`, `64KB`: a byte count.
pub(super) fn parse_size(text: &str) -> Result<usize, SizeError> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, unit) = t.split_at(split);
    let n: usize = digits.parse().map_err(|_| SizeError::NotASize(text.to_owned()))?;
    let factor: usize = match unit.trim() {
        "" | "B" => 1,
        "KiB" | "K" => 1 << 10,
        "MiB" | "M" => 1 << 20,
        "GiB" | "G" => 1 << 30,
        "KB" | "kB" => 1000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        other => return Err(SizeError::UnknownUnit(other.to_owned())),
    };
    n.checked_mul(factor)
        .filter(|n| *n > 0)
        .ok_or_else(|| SizeError::OutOfRange(text.to_owned()))
}

/// Why a PEM file (a CA bundle, a client certificate or key) was refused. The caller names
/// the file.
#[derive(Debug, thiserror::Error)]
pub(super) enum PemFileError {
    #[error("{0}")]
    Read(#[from] std::io::Error),
    #[error("not a regular file")]
    NotAFile,
    #[error("larger than {} KiB", MAX_CA_FILE_BYTES / 1024)]
    TooLarge,
    #[error("not a PEM certificate file ({0})")]
    NotPem(rustls::pki_types::pem::Error),
    #[error("holds no `BEGIN CERTIFICATE` block")]
    NoCertificate,
    /// `number` counts from 1, as a reader of the file would.
    #[error("certificate {number} is not a usable CA certificate: {source}")]
    UnusableCa { number: usize, source: rustls::Error },
}

/// The certificates of a PEM file, each checked to be usable as a trust anchor.
pub(super) fn read_ca_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, PemFileError> {
    use rustls::pki_types::pem::PemObject as _;
    let pem = read_pem_file(path)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(PemFileError::NotPem)?;
    if certs.is_empty() {
        return Err(PemFileError::NoCertificate);
    }
    let mut check = rustls::RootCertStore::empty();
    for (n, cert) in certs.iter().enumerate() {
        check
            .add(cert.clone())
            .map_err(|source| PemFileError::UnusableCa {
                number: n + 1,
                source,
            })?;
    }
    Ok(certs)
}

/// A small PEM file's bytes. Only a regular file, read no further than the limit: never block
/// on a FIFO, and never read a device or a `/proc` file (which report a size of 0) without end.
pub(super) fn read_pem_file(path: &Path) -> Result<Vec<u8>, PemFileError> {
    use std::io::Read as _;
    let meta = std::fs::metadata(path)?;
    if !meta.is_file() {
        return Err(PemFileError::NotAFile);
    }
    let mut pem = Vec::new();
    std::fs::File::open(path).and_then(|file| file.take(MAX_CA_FILE_BYTES + 1).read_to_end(&mut pem))?;
    if pem.len() as u64 > MAX_CA_FILE_BYTES {
        return Err(PemFileError::TooLarge);
    }
    Ok(pem)
}
