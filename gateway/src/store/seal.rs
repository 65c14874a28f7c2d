//! Secrets at rest: every value the store keeps that can hold a secret is sealed with
//! XChaCha20-Poly1305 before it is written and opened after it is read, so that the database
//! file alone — a copy, a backup, a `pg_dump` — reveals none of them. The rows the store hands
//! out stay plaintext: a decrypted secret lives where the gateway needs it to send.
//!
//! What is sealed (see [`Column`]): an API endpoint's `spec` as a whole (its signing secrets,
//! Ed25519 private key, header values, `auth` credentials, client key, credentials in a broker
//! URL — and its URL), the secret being rotated out, and the stored answers of idempotent
//! requests (a rotated Svix secret, a portal token).
//!
//! A sealed value is text: `sealed:v1:<key id>:<base64url of nonce ‖ ciphertext ‖ tag>`. The
//! version lets a later format live beside this one; the key id (the first 4 bytes of a hash of
//! the key, which says nothing about the key) names the key that opens it, so that values
//! sealed under a previous key are found and opened during a rotation. The column is the
//! associated data: a value copied into another column does not open.
//!
//! Why XChaCha20-Poly1305 (RustCrypto's `chacha20poly1305`) and not `ring`, which is in the
//! tree already: ring's AEADs take 96-bit nonces, which may be drawn at random only for about
//! 2^32 values per key before a repeat becomes a real risk, and every idempotent request seals
//! its answer — a busy gateway would get there within weeks. A 192-bit nonce can be drawn at
//! random for as many values as a key will ever seal, with no counter to keep across restarts
//! and nodes.

use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use ring::rand::{SecureRandom, SystemRandom};

use bytes::Bytes;

use super::{ApiEndpointRow, IdempotencyRecord, StoreError, StoreResult};

/// What every sealed value starts with.
const PREFIX: &str = "sealed:v1:";
const NONCE_LEN: usize = 24;
const TAG_LEN: usize = 16;

/// The known text the database's check value seals: a key that opens it is the database's.
const CHECK_TEXT: &str = "hookgate storage key check";

/// A storage encryption key: 32 random bytes, written as base64 (`storage.encryption_key`, the
/// key file). Its `Debug` shows only its id.
#[derive(Clone, PartialEq, Eq)]
pub struct EncryptionKey([u8; 32]);

impl EncryptionKey {
    /// A fresh random key from the operating system's generator.
    pub fn generate() -> EncryptionKey {
        let mut bytes = [0u8; 32];
        SystemRandom::new()
            .fill(&mut bytes)
            .expect("the operating system's random generator works");
        EncryptionKey(bytes)
    }

    /// Reads the base64 form (standard alphabet, padded or not; spaces around it ignored).
    pub fn from_base64(text: &str) -> Result<EncryptionKey, KeyFormatError> {
        let text = text.trim();
        let decoded = STANDARD
            .decode(text)
            .or_else(|_| base64::engine::general_purpose::STANDARD_NO_PAD.decode(text))
            .map_err(|_| KeyFormatError::NotBase64)?;
        let bytes: [u8; 32] = decoded
            .try_into()
            .map_err(|d: Vec<u8>| KeyFormatError::WrongLength(d.len()))?;
        Ok(EncryptionKey(bytes))
    }

    /// The form `from_base64` reads, as the key file holds it.
    pub fn to_base64(&self) -> String {
        STANDARD.encode(self.0)
    }

    /// The key's id: the first 4 bytes of SHA-256 over a label and the key. It names the key in
    /// sealed values and messages; 32 bits of a hash of a 256-bit random key say nothing of it.
    pub fn id(&self) -> KeyId {
        let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
        ctx.update(b"hookgate storage key id\0");
        ctx.update(&self.0);
        let digest = ctx.finish();
        let mut id = [0u8; 4];
        id.copy_from_slice(&digest.as_ref()[..4]);
        KeyId(id)
    }

    fn cipher(&self) -> XChaCha20Poly1305 {
        XChaCha20Poly1305::new(&self.0.into())
    }
}

impl fmt::Debug for EncryptionKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "EncryptionKey({})", self.id())
    }
}

/// Why a text is not a storage key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyFormatError {
    #[error("is not base64 (make one with `hookgate keygen storage`)")]
    NotBase64,
    #[error("is {0} bytes once decoded; a key is 32 bytes (make one with `hookgate keygen storage`)")]
    WrongLength(usize),
}

/// A key's id as sealed values and messages show it: 8 hex digits.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct KeyId([u8; 4]);

impl fmt::Display for KeyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&hex::encode(self.0))
    }
}

impl fmt::Debug for KeyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// Where a sealed value lives, bound into it as associated data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Column {
    /// `api_endpoints.spec`: the whole endpoint, its secrets included.
    EndpointSpec,
    /// `api_endpoints.retiring_secret`.
    RetiringSecret,
    /// `idempotency.response`: an answer replayed for a retried request.
    IdempotencyAnswer,
    /// The database's check value.
    Check,
}

impl Column {
    fn label(self) -> &'static [u8] {
        match self {
            Column::EndpointSpec => b"api_endpoints.spec",
            Column::RetiringSecret => b"api_endpoints.retiring_secret",
            Column::IdempotencyAnswer => b"idempotency.response",
            Column::Check => b"encryption.check_value",
        }
    }
}

/// Why a stored value did not open.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SealError {
    #[error("it is not sealed (a plaintext value in a database that holds encrypted ones)")]
    NotSealed,
    #[error("it is sealed under key {0}, which is not among this gateway's keys")]
    UnknownKey(KeyId),
    #[error("it does not open under key {0}: it was changed or damaged")]
    Damaged(KeyId),
}

/// The keys a store seals and opens with: the current one seals; it and the previous ones
/// (`storage.previous_encryption_keys`, during a rotation) open.
#[derive(Clone)]
pub struct Sealer {
    current: EncryptionKey,
    previous: Vec<EncryptionKey>,
}

impl fmt::Debug for Sealer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sealer")
            .field("current", &self.current.id())
            .field(
                "previous",
                &self.previous.iter().map(EncryptionKey::id).collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl Sealer {
    pub fn new(current: EncryptionKey, previous: Vec<EncryptionKey>) -> Sealer {
        Sealer { current, previous }
    }

    /// The id of the key new values are sealed under.
    pub fn current_id(&self) -> KeyId {
        self.current.id()
    }

    /// Every key's id, the current one first.
    pub fn key_ids(&self) -> Vec<KeyId> {
        std::iter::once(&self.current)
            .chain(&self.previous)
            .map(EncryptionKey::id)
            .collect()
    }

    /// `plaintext` sealed under the current key, with a fresh random nonce.
    pub fn seal(&self, column: Column, plaintext: &str) -> String {
        self.seal_bytes(column, plaintext.as_bytes())
    }

    /// Bytes sealed like [`Sealer::seal`]; the sealed form is text all the same.
    pub fn seal_bytes(&self, column: Column, plaintext: &[u8]) -> String {
        let mut nonce = [0u8; NONCE_LEN];
        SystemRandom::new()
            .fill(&mut nonce)
            .expect("the operating system's random generator works");
        let sealed = self
            .current
            .cipher()
            .encrypt(
                &XNonce::from(nonce),
                Payload {
                    msg: plaintext,
                    aad: column.label(),
                },
            )
            .expect("XChaCha20-Poly1305 seals any length a database row holds");
        let mut body = Vec::with_capacity(NONCE_LEN + sealed.len());
        body.extend_from_slice(&nonce);
        body.extend_from_slice(&sealed);
        format!("{PREFIX}{}:{}", self.current.id(), URL_SAFE_NO_PAD.encode(body))
    }

    /// The plaintext of a value [`Sealer::seal`] made, under whichever of the keys sealed it.
    pub fn open(&self, column: Column, stored: &str) -> Result<String, SealError> {
        let bytes = self.open_bytes(column, stored.as_bytes())?;
        // Only `seal` of a `&str` makes what opens here; anything else was not written by us.
        String::from_utf8(bytes).map_err(|_| SealError::Damaged(self.current.id()))
    }

    /// The plaintext bytes of a value [`Sealer::seal_bytes`] made.
    pub fn open_bytes(&self, column: Column, stored: &[u8]) -> Result<Vec<u8>, SealError> {
        let (id, body) = parse(stored).ok_or(SealError::NotSealed)?;
        let key = std::iter::once(&self.current)
            .chain(&self.previous)
            .find(|k| k.id() == id)
            .ok_or(SealError::UnknownKey(id))?;
        if body.len() < NONCE_LEN + TAG_LEN {
            return Err(SealError::Damaged(id));
        }
        let (nonce, sealed) = body.split_at(NONCE_LEN);
        let nonce: [u8; NONCE_LEN] = nonce.try_into().expect("split at the nonce's length");
        key.cipher()
            .decrypt(
                &XNonce::from(nonce),
                Payload {
                    msg: sealed,
                    aad: column.label(),
                },
            )
            .map_err(|_| SealError::Damaged(id))
    }

    /// Whether `stored` is sealed under the current key (a rekey leaves such values alone).
    pub fn is_current(&self, stored: &[u8]) -> bool {
        parse(stored).is_some_and(|(id, _)| id == self.current.id())
    }

    /// A new check value: the known text sealed under the current key.
    pub fn check_value(&self) -> String {
        self.seal(Column::Check, CHECK_TEXT)
    }

    /// Whether one of the keys opens the database's check value; the error says which key the
    /// database expects.
    pub fn verify_check(&self, check: &str) -> Result<(), CheckMismatch> {
        match self.open(Column::Check, check) {
            Ok(text) if text == CHECK_TEXT => Ok(()),
            Ok(_) | Err(_) => Err(CheckMismatch {
                expected: sealed_key_id(check),
                given: self.key_ids(),
            }),
        }
    }
}

impl Sealer {
    /// [`Sealer::open`] for a store read: the error names the row.
    pub(crate) fn open_row(&self, column: Column, stored: &str, row: &str) -> StoreResult<String> {
        self.open(column, stored)
            .map_err(|e| StoreError::Internal(format!("cannot decrypt {row}: {e}")))
    }

    /// [`Sealer::open_bytes`] for a store read: the error names the row.
    pub(crate) fn open_row_bytes(&self, column: Column, stored: &[u8], row: &str) -> StoreResult<Vec<u8>> {
        self.open_bytes(column, stored)
            .map_err(|e| StoreError::Internal(format!("cannot decrypt {row}: {e}")))
    }

    /// An endpoint row as the table keeps it: its spec and retiring secret sealed.
    pub(crate) fn seal_endpoint(&self, row: ApiEndpointRow) -> ApiEndpointRow {
        ApiEndpointRow {
            spec: self.seal(Column::EndpointSpec, &row.spec),
            retiring: row
                .retiring
                .map(|(secret, until)| (self.seal(Column::RetiringSecret, &secret), until)),
            ..row
        }
    }

    /// The most endpoint rows [`Sealer::open_endpoints`] opens on the calling thread alone.
    pub(crate) const OPENED_ON_ONE_CORE: usize = 1_000;

    /// Endpoint rows as read from the table, opened; a large page of them on every core (a
    /// start reads a million, and opening one costs microseconds).
    /// Blocks for the whole page: an async caller hands a page of more than
    /// [`Sealer::OPENED_ON_ONE_CORE`] rows to a blocking thread first.
    pub(crate) fn open_endpoints(&self, rows: Vec<ApiEndpointRow>) -> StoreResult<Vec<ApiEndpointRow>> {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        if rows.len() <= Self::OPENED_ON_ONE_CORE || cores == 1 {
            return rows.into_iter().map(|row| self.open_endpoint(row)).collect();
        }
        let chunk = rows.len().div_ceil(cores);
        let mut rows = rows.into_iter();
        let parts: Vec<Vec<ApiEndpointRow>> =
            (0..cores).map(|_| rows.by_ref().take(chunk).collect()).collect();
        std::thread::scope(|scope| {
            let opened: Vec<_> = parts
                .into_iter()
                .map(|part| {
                    scope.spawn(move || {
                        part.into_iter()
                            .map(|row| self.open_endpoint(row))
                            .collect::<StoreResult<Vec<_>>>()
                    })
                })
                .collect();
            let mut all = Vec::new();
            for part in opened {
                all.extend(part.join().expect("opening rows does not panic")?);
            }
            Ok(all)
        })
    }

    /// An endpoint row as read from the table, opened.
    pub(crate) fn open_endpoint(&self, row: ApiEndpointRow) -> StoreResult<ApiEndpointRow> {
        let what = format!("endpoint `{}`", row.name);
        let retiring = match row.retiring {
            Some((secret, until)) => Some((self.open_row(Column::RetiringSecret, &secret, &what)?, until)),
            None => None,
        };
        Ok(ApiEndpointRow {
            spec: self.open_row(Column::EndpointSpec, &row.spec, &what)?,
            retiring,
            ..row
        })
    }

    /// An idempotency record as the table keeps it: its answer sealed.
    pub(crate) fn seal_idempotency(&self, record: &IdempotencyRecord) -> IdempotencyRecord {
        IdempotencyRecord {
            response: Bytes::from(self.seal_bytes(Column::IdempotencyAnswer, &record.response)),
            ..record.clone()
        }
    }

    /// An idempotency record as read from the table, opened.
    pub(crate) fn open_idempotency(&self, record: IdempotencyRecord) -> StoreResult<IdempotencyRecord> {
        let what = format!("the answer kept for idempotency key `{}`", record.key);
        let answer = self.open_row_bytes(Column::IdempotencyAnswer, &record.response, &what)?;
        Ok(IdempotencyRecord {
            response: Bytes::from(answer),
            ..record
        })
    }

    /// For a rekey: `stored` sealed again under the current key, or None when it already is.
    pub(crate) fn resealed(&self, column: Column, stored: &[u8], row: &str) -> StoreResult<Option<String>> {
        if self.is_current(stored) {
            return Ok(None);
        }
        let plaintext = self.open_row_bytes(column, stored, row)?;
        Ok(Some(self.seal_bytes(column, &plaintext)))
    }
}

/// None of a gateway's keys opens the database's check value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckMismatch {
    /// The key the check value is sealed under (None: the check value is damaged).
    pub expected: Option<KeyId>,
    /// The gateway's keys, the current one first.
    pub given: Vec<KeyId>,
}

impl fmt::Display for CheckMismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let given: Vec<String> = self.given.iter().map(KeyId::to_string).collect();
        match self.expected {
            Some(id) => write!(f, "its secrets are encrypted under key {id}, ")?,
            None => write!(f, "its key check value is damaged, ")?,
        }
        write!(f, "and this gateway's keys are {}", given.join(", "))
    }
}

/// The key id a sealed value names, if it is one.
pub(crate) fn sealed_key_id(stored: &str) -> Option<KeyId> {
    parse(stored.as_bytes()).map(|(id, _)| id)
}

/// `sealed:v1:<8 hex>:<base64url>` → the key id and the decoded body.
fn parse(stored: &[u8]) -> Option<(KeyId, Vec<u8>)> {
    let rest = stored.strip_prefix(PREFIX.as_bytes())?;
    let (id, body) = (rest.get(..8)?, rest.get(8..)?);
    let body = body.strip_prefix(b":")?;
    let mut key_id = [0u8; 4];
    hex::decode_to_slice(id, &mut key_id).ok()?;
    let body = URL_SAFE_NO_PAD.decode(body).ok()?;
    Some((KeyId(key_id), body))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sealer() -> Sealer {
        Sealer::new(EncryptionKey::generate(), Vec::new())
    }

    #[test]
    fn a_sealed_value_opens_to_its_plaintext_and_shows_none_of_it() {
        let s = sealer();
        let sealed = s.seal(Column::EndpointSpec, r#"{"secret":"whsec_c2VjcmV0"}"#);
        assert!(
            sealed.starts_with(&format!("sealed:v1:{}:", s.current_id())),
            "{sealed}"
        );
        assert!(!sealed.contains("whsec"), "{sealed}");
        assert_eq!(
            s.open(Column::EndpointSpec, &sealed).unwrap(),
            r#"{"secret":"whsec_c2VjcmV0"}"#
        );
    }

    #[test]
    fn the_same_plaintext_seals_differently_each_time() {
        let s = sealer();
        assert_ne!(
            s.seal(Column::RetiringSecret, "x"),
            s.seal(Column::RetiringSecret, "x")
        );
    }

    #[test]
    fn a_value_opens_only_in_its_own_column() {
        let s = sealer();
        let sealed = s.seal(Column::RetiringSecret, "whsec_old");
        assert_eq!(
            s.open(Column::EndpointSpec, &sealed),
            Err(SealError::Damaged(s.current_id()))
        );
    }

    #[test]
    fn a_changed_value_does_not_open() {
        let s = sealer();
        let mut sealed = s.seal(Column::EndpointSpec, "{}").into_bytes();
        let last = sealed.len() - 1;
        sealed[last] = if sealed[last] == b'A' { b'B' } else { b'A' };
        assert!(matches!(
            s.open_bytes(Column::EndpointSpec, &sealed),
            Err(SealError::Damaged(_))
        ));
    }

    #[test]
    fn plaintext_and_unknown_keys_are_told_apart() {
        let s = sealer();
        assert_eq!(s.open(Column::EndpointSpec, "{}"), Err(SealError::NotSealed));
        let other = sealer();
        let sealed = other.seal(Column::EndpointSpec, "{}");
        assert_eq!(
            s.open(Column::EndpointSpec, &sealed),
            Err(SealError::UnknownKey(other.current_id()))
        );
    }

    #[test]
    fn a_previous_key_still_opens_and_the_current_one_seals() {
        let old = EncryptionKey::generate();
        let sealed = Sealer::new(old.clone(), Vec::new()).seal(Column::EndpointSpec, "{}");
        let rotated = Sealer::new(EncryptionKey::generate(), vec![old]);
        assert_eq!(rotated.open(Column::EndpointSpec, &sealed).unwrap(), "{}");
        assert!(!rotated.is_current(sealed.as_bytes()));
        let resealed = rotated.seal(Column::EndpointSpec, "{}");
        assert!(rotated.is_current(resealed.as_bytes()));
    }

    #[test]
    fn the_check_value_tells_the_right_key_from_a_wrong_one() {
        let s = sealer();
        let check = s.check_value();
        assert_eq!(s.verify_check(&check), Ok(()));
        let wrong = sealer();
        let mismatch = wrong.verify_check(&check).unwrap_err();
        assert_eq!(mismatch.expected, Some(s.current_id()));
        let text = mismatch.to_string();
        assert!(text.contains(&s.current_id().to_string()), "{text}");
        assert!(text.contains(&wrong.current_id().to_string()), "{text}");
    }

    #[test]
    fn keys_read_back_from_base64_and_bad_ones_say_why() {
        let key = EncryptionKey::generate();
        assert_eq!(
            EncryptionKey::from_base64(&format!(" {}\n", key.to_base64())).unwrap(),
            key
        );
        assert_eq!(
            EncryptionKey::from_base64("c2hvcnQ="),
            Err(KeyFormatError::WrongLength(5))
        );
        assert_eq!(
            EncryptionKey::from_base64("not base64!"),
            Err(KeyFormatError::NotBase64)
        );
        assert!(!format!("{key:?}").contains(&key.to_base64()));
    }
}
