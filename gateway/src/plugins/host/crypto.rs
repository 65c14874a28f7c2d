//! The `crypto` import: HMACs and digests computed by the host, with signing keys the guest
//! holds only as handles. The key bytes stay in this process's memory, never the plugin's.
//!
//! Hashing is host work a plugin asks for, so it is budgeted like guest code: every byte hashed
//! in one call counts against [`crate::plugins::PluginLimits::hash_bytes_per_call`], and the
//! hashing itself runs in slices of [`HASH_SLICE_BYTES`] that yield to the runtime between
//! them, so a large `hmac` neither holds a runtime worker nor outlives the call's time limit.
//! The slices of all calls take turns through one host-wide gate: however many plugins hash at
//! once, hashing occupies at most one of the runtime's threads at a time.

use std::sync::Arc;

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256, Sha512};
use wasmtime::component::Resource;

use super::CallState;
use crate::delivery::signing::{WHSEC_PREFIX, signing_key};
use crate::model::Secret;
use crate::plugins::bindings::crypto::{HashAlgorithm, Host, HostSigningKey, KeyForm};

/// How many times one call may ask for the rotating keys. Each answer creates new handles in
/// the call's resource table; the cap keeps a looping guest from growing host memory.
const ROTATING_KEYS_CALLS_MAX: u32 = 8;

/// Bytes hashed between two yields to the runtime: about 0.1 ms of SHA-256.
pub(crate) const HASH_SLICE_BYTES: usize = 64 << 10;

/// An endpoint's signing key in both of its forms (the signer chooses; docs/writing-a-plugin.md): the secret's
/// UTF-8 bytes as written, and for a `whsec_` secret the base64-decoded rest.
#[derive(Clone)]
pub struct SigningKey {
    as_written: Vec<u8>,
    /// The Standard Webhooks form: the decoded rest of a `whsec_` secret, the secret as
    /// written otherwise; `None` for a `whsec_` secret whose rest does not decode.
    standard_webhooks: Option<Vec<u8>>,
}

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SigningKey(***)")
    }
}

/// An endpoint secret a signer cannot use: an empty one.
#[derive(Debug, thiserror::Error)]
#[error("the endpoint's secret is empty")]
pub struct BadSecret;

/// Raised inside a call that asked for the Standard Webhooks form of a `whsec_` secret whose
/// rest is not base64; the attempt fails with `bad_secret`.
#[derive(Debug, thiserror::Error)]
#[error("the plugin asked for the Standard Webhooks form of a `whsec_` secret whose rest is not base64")]
pub(crate) struct NoStandardWebhooksForm;

/// Raised inside a call that asked the host to hash more than its budget.
#[derive(Debug, thiserror::Error)]
#[error(
    "the plugin asked the host to hash {asked_bytes} bytes in one call, over the budget of {budget_bytes} bytes"
)]
pub(crate) struct HashBudgetExceeded {
    pub(crate) asked_bytes: u64,
    pub(crate) budget_bytes: u64,
}

impl SigningKey {
    pub fn from_secret(secret: &Secret) -> Result<Self, BadSecret> {
        let text = secret.expose();
        if text.is_empty() {
            return Err(BadSecret);
        }
        let standard_webhooks = if text.starts_with(WHSEC_PREFIX) {
            // `signing_key` falls back to the text as written when the rest does not decode.
            Some(signing_key(secret)).filter(|key| key.as_slice() != text.as_bytes())
        } else {
            Some(text.as_bytes().to_vec())
        };
        Ok(SigningKey {
            as_written: text.as_bytes().to_vec(),
            standard_webhooks,
        })
    }

    fn bytes(&self, form: KeyForm) -> wasmtime::Result<&[u8]> {
        match form {
            KeyForm::AsWritten => Ok(&self.as_written),
            KeyForm::StandardWebhooks => self
                .standard_webhooks
                .as_deref()
                .ok_or_else(|| wasmtime::Error::new(NoStandardWebhooksForm)),
        }
    }

    fn fingerprint(&self) -> String {
        hex::encode(&Sha256::digest(&self.as_written)[..4])
    }
}

/// A hash in progress, HMAC or plain, of either algorithm.
enum Hashing {
    HmacSha256(Hmac<Sha256>),
    HmacSha512(Hmac<Sha512>),
    Sha256(Sha256),
    Sha512(Sha512),
}

impl Hashing {
    fn hmac(key: &[u8], algorithm: HashAlgorithm) -> Self {
        match algorithm {
            HashAlgorithm::Sha256 => {
                Hashing::HmacSha256(Hmac::new_from_slice(key).expect("HMAC takes any key length"))
            }
            HashAlgorithm::Sha512 => {
                Hashing::HmacSha512(Hmac::new_from_slice(key).expect("HMAC takes any key length"))
            }
        }
    }

    fn digest(algorithm: HashAlgorithm) -> Self {
        match algorithm {
            HashAlgorithm::Sha256 => Hashing::Sha256(Sha256::new()),
            HashAlgorithm::Sha512 => Hashing::Sha512(Sha512::new()),
        }
    }

    fn update(&mut self, data: &[u8]) {
        match self {
            Hashing::HmacSha256(mac) => mac.update(data),
            Hashing::HmacSha512(mac) => mac.update(data),
            Hashing::Sha256(hash) => hash.update(data),
            Hashing::Sha512(hash) => hash.update(data),
        }
    }

    fn finish(self) -> Vec<u8> {
        match self {
            Hashing::HmacSha256(mac) => mac.finalize().into_bytes().to_vec(),
            Hashing::HmacSha512(mac) => mac.finalize().into_bytes().to_vec(),
            Hashing::Sha256(hash) => hash.finalize().to_vec(),
            Hashing::Sha512(hash) => hash.finalize().to_vec(),
        }
    }

    /// Hashes `data` in slices, each on a turn of `gate`, yielding to the runtime between them.
    async fn run(mut self, data: Vec<u8>, gate: Arc<tokio::sync::Semaphore>) -> wasmtime::Result<Vec<u8>> {
        let mut slices = data.chunks(HASH_SLICE_BYTES).peekable();
        while let Some(slice) = slices.next() {
            {
                let _turn = gate.acquire().await?;
                self.update(slice);
            }
            if slices.peek().is_some() {
                // Tokio's yield defers its wake, so the call's wall clock counts the time this
                // waits for the runtime: hashing is the plugin's work, however busy the host.
                tokio::task::yield_now().await;
            }
        }
        Ok(self.finish())
    }
}

/// The keys of the call an instance is running: the first is handed to `sign`, the rest are
/// the rotating keys. Empty between calls.
#[derive(Default)]
pub(crate) struct CallKeys {
    keys: Vec<SigningKey>,
    rotating_keys_calls: u32,
    /// Bytes hashed for the running call so far, by `hmac` and `digest` together.
    hashed_bytes: u64,
    /// Resource-table slots of the key handles given out during this call; the host deletes
    /// them when the call ends.
    handed_out: Vec<u32>,
}

impl CallKeys {
    pub(crate) fn begin_call(&mut self, keys: Vec<SigningKey>) {
        self.keys = keys;
        self.rotating_keys_calls = 0;
        self.hashed_bytes = 0;
        self.handed_out.clear();
    }

    /// Forgets the call's keys and yields the table slots of the handles it was given.
    pub(crate) fn end_call(&mut self) -> impl Iterator<Item = u32> + '_ {
        self.keys.clear();
        self.rotating_keys_calls = 0;
        self.handed_out.drain(..)
    }
}

impl CallState {
    /// Puts the call's primary key (the newest secret's) into the resource table, for `sign`'s
    /// `key` argument. `None` when the endpoint has no secret.
    pub(crate) fn hand_over_primary_key(&mut self) -> Option<wasmtime::Result<Resource<SigningKey>>> {
        let primary = self.keys.keys.first()?.clone();
        Some(self.push_key(primary))
    }

    /// Counts `bytes` more hashed for this call, or refuses them when that would pass the
    /// call's budget.
    fn charge_hashing(&mut self, bytes: usize) -> wasmtime::Result<()> {
        let asked_bytes = self.keys.hashed_bytes.saturating_add(bytes as u64);
        if asked_bytes > self.hash_bytes_per_call {
            return Err(wasmtime::Error::new(HashBudgetExceeded {
                asked_bytes,
                budget_bytes: self.hash_bytes_per_call,
            }));
        }
        self.keys.hashed_bytes = asked_bytes;
        Ok(())
    }

    fn push_key(&mut self, key: SigningKey) -> wasmtime::Result<Resource<SigningKey>> {
        let handle = self.table().push(key)?;
        self.keys.handed_out.push(handle.rep());
        Ok(handle)
    }
}

impl HostSigningKey for CallState {
    fn fingerprint(&mut self, key: Resource<SigningKey>) -> wasmtime::Result<String> {
        Ok(self.table().get(&key)?.fingerprint())
    }

    fn drop(&mut self, key: Resource<SigningKey>) -> wasmtime::Result<()> {
        self.table().delete(key)?;
        Ok(())
    }
}

impl Host for CallState {
    async fn hmac(
        &mut self,
        key: Resource<SigningKey>,
        form: KeyForm,
        algorithm: HashAlgorithm,
        data: Vec<u8>,
    ) -> wasmtime::Result<Vec<u8>> {
        self.charge_hashing(data.len())?;
        let hashing = Hashing::hmac(self.table().get(&key)?.bytes(form)?, algorithm);
        hashing.run(data, Arc::clone(&self.hashing)).await
    }

    async fn digest(&mut self, algorithm: HashAlgorithm, data: Vec<u8>) -> wasmtime::Result<Vec<u8>> {
        self.charge_hashing(data.len())?;
        Hashing::digest(algorithm)
            .run(data, Arc::clone(&self.hashing))
            .await
    }

    fn rotating_keys(&mut self) -> wasmtime::Result<Vec<Resource<SigningKey>>> {
        self.keys.rotating_keys_calls += 1;
        if self.keys.rotating_keys_calls > ROTATING_KEYS_CALLS_MAX {
            wasmtime::bail!(
                "crypto.rotating-keys called more than {ROTATING_KEYS_CALLS_MAX} times in one call"
            );
        }
        let rest: Vec<SigningKey> = self.keys.keys.iter().skip(1).cloned().collect();
        let mut handles = Vec::with_capacity(rest.len());
        for key in rest {
            handles.push(self.push_key(key)?);
        }
        Ok(handles)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gate() -> Arc<tokio::sync::Semaphore> {
        Arc::new(tokio::sync::Semaphore::new(1))
    }

    fn hmac_hex(key: &SigningKey, form: KeyForm, data: &[u8]) -> String {
        let hashing = Hashing::hmac(key.bytes(form).unwrap(), HashAlgorithm::Sha256);
        let one_slice = futures_util::FutureExt::now_or_never(hashing.run(data.to_vec(), gate()));
        hex::encode(one_slice.expect("one slice is hashed at once").unwrap())
    }

    #[test]
    fn plain_secrets_sign_with_their_utf8_bytes_in_both_forms() {
        let key = SigningKey::from_secret(&Secret::new("It's a Secret to Everybody")).unwrap();
        for form in [KeyForm::AsWritten, KeyForm::StandardWebhooks] {
            assert_eq!(
                hmac_hex(&key, form, b"Hello, World!"),
                "757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
            );
        }
    }

    #[test]
    fn whsec_secrets_offer_the_text_as_written_and_the_decoded_rest() {
        let key = SigningKey::from_secret(&Secret::new("whsec_aGVsbG8=")).unwrap();
        assert_eq!(key.bytes(KeyForm::AsWritten).unwrap(), b"whsec_aGVsbG8=");
        assert_eq!(key.bytes(KeyForm::StandardWebhooks).unwrap(), b"hello");
        let undecodable = SigningKey::from_secret(&Secret::new("whsec_not base64!")).unwrap();
        assert_eq!(
            undecodable.bytes(KeyForm::AsWritten).unwrap(),
            b"whsec_not base64!"
        );
        assert!(undecodable.bytes(KeyForm::StandardWebhooks).is_err());
        assert!(SigningKey::from_secret(&Secret::new("")).is_err());
    }

    #[test]
    fn hashing_in_slices_gives_the_one_shot_answer() {
        let data = vec![7u8; HASH_SLICE_BYTES * 3 + 5];
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let digest = runtime.block_on(Hashing::digest(HashAlgorithm::Sha512).run(data.clone(), gate()));
        assert_eq!(digest.unwrap(), Sha512::digest(&data).to_vec());
        let key = SigningKey::from_secret(&Secret::new("k")).unwrap();
        let hashing = Hashing::hmac(key.bytes(KeyForm::AsWritten).unwrap(), HashAlgorithm::Sha256);
        let mut mac = Hmac::<Sha256>::new_from_slice(b"k").unwrap();
        mac.update(&data);
        assert_eq!(
            runtime.block_on(hashing.run(data, gate())).unwrap(),
            mac.finalize().into_bytes().to_vec()
        );
    }
}
