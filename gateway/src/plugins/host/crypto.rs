//! The `crypto` import: HMACs and digests computed by the host, with signing keys the guest
//! holds only as handles. The key bytes stay in this process's memory, never the plugin's.

use base64::Engine as _;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256, Sha512};
use wasmtime::component::Resource;

use super::CallState;
use crate::model::Secret;
use crate::plugins::bindings::crypto::{HashAlgorithm, Host, HostSigningKey};

/// How many times one call may ask for the rotating keys. Each answer creates new handles in
/// the call's resource table; the cap keeps a looping guest from growing host memory.
const ROTATING_KEYS_CALLS_MAX: u32 = 8;

/// An endpoint's signing key, derived from its secret (docs/writing-a-plugin.md): the secret's
/// UTF-8 bytes, except a `whsec_` secret, whose key is the base64-decoded rest.
#[derive(Clone)]
pub struct SigningKey {
    bytes: Vec<u8>,
}

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SigningKey(***)")
    }
}

/// A `whsec_` secret whose rest is not base64.
#[derive(Debug, thiserror::Error)]
#[error("a `whsec_` secret must be followed by base64 (the Standard Webhooks convention)")]
pub struct BadSecret;

impl SigningKey {
    pub fn from_secret(secret: &Secret) -> Result<Self, BadSecret> {
        let s = secret.expose();
        let bytes = match s.strip_prefix("whsec_") {
            Some(rest) => base64::engine::general_purpose::STANDARD
                .decode(rest)
                .map_err(|_| BadSecret)?,
            None => s.as_bytes().to_vec(),
        };
        Ok(SigningKey { bytes })
    }

    fn hmac(&self, algorithm: HashAlgorithm, data: &[u8]) -> Vec<u8> {
        match algorithm {
            HashAlgorithm::Sha256 => {
                let mut mac = Hmac::<Sha256>::new_from_slice(&self.bytes).expect("HMAC takes any key length");
                mac.update(data);
                mac.finalize().into_bytes().to_vec()
            }
            HashAlgorithm::Sha512 => {
                let mut mac = Hmac::<Sha512>::new_from_slice(&self.bytes).expect("HMAC takes any key length");
                mac.update(data);
                mac.finalize().into_bytes().to_vec()
            }
        }
    }

    fn fingerprint(&self) -> String {
        hex::encode(&Sha256::digest(&self.bytes)[..4])
    }
}

/// The keys of the call an instance is running: the first is handed to `sign`, the rest are
/// the rotating keys. Empty between calls.
#[derive(Default)]
pub(crate) struct CallKeys {
    keys: Vec<SigningKey>,
    rotating_keys_calls: u32,
    /// Resource-table slots of the key handles given out during this call; the host deletes
    /// them when the call ends.
    handed_out: Vec<u32>,
}

impl CallKeys {
    pub(crate) fn begin_call(&mut self, keys: Vec<SigningKey>) {
        self.keys = keys;
        self.rotating_keys_calls = 0;
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
    fn hmac(
        &mut self,
        key: Resource<SigningKey>,
        algorithm: HashAlgorithm,
        data: Vec<u8>,
    ) -> wasmtime::Result<Vec<u8>> {
        Ok(self.table().get(&key)?.hmac(algorithm, &data))
    }

    fn digest(&mut self, algorithm: HashAlgorithm, data: Vec<u8>) -> wasmtime::Result<Vec<u8>> {
        Ok(match algorithm {
            HashAlgorithm::Sha256 => Sha256::digest(&data).to_vec(),
            HashAlgorithm::Sha512 => Sha512::digest(&data).to_vec(),
        })
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

    #[test]
    fn plain_secrets_sign_with_their_utf8_bytes() {
        let key = SigningKey::from_secret(&Secret::new("It's a Secret to Everybody")).unwrap();
        assert_eq!(
            hex::encode(key.hmac(HashAlgorithm::Sha256, b"Hello, World!")),
            "757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
        );
    }

    #[test]
    fn whsec_secrets_sign_with_the_decoded_rest() {
        let key = SigningKey::from_secret(&Secret::new("whsec_aGVsbG8=")).unwrap();
        assert_eq!(key.bytes, b"hello");
        assert!(SigningKey::from_secret(&Secret::new("whsec_not base64!")).is_err());
    }
}
