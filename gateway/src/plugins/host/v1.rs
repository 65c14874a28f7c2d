//! The imports of the first version of the contract (`wit/v1/plugin.wit`): the same `log`,
//! `config` and `crypto` as the current version's, under the old version's names, so that
//! components built against it keep linking. Each answers exactly what the current import
//! answers.

use wasmtime::component::Resource;

use super::CallState;
use super::crypto::SigningKey;
use crate::plugins::bindings::{self, v1};

impl v1::types::Host for CallState {}

impl v1::log::Host for CallState {
    fn log(&mut self, level: v1::log::Level, msg: String) -> wasmtime::Result<()> {
        let level = match level {
            v1::log::Level::Debug => bindings::log::Level::Debug,
            v1::log::Level::Info => bindings::log::Level::Info,
            v1::log::Level::Warn => bindings::log::Level::Warn,
            v1::log::Level::Error => bindings::log::Level::Error,
        };
        bindings::log::Host::log(self, level, msg)
    }
}

impl v1::config::Host for CallState {
    fn get(&mut self, key: String) -> wasmtime::Result<Option<String>> {
        bindings::config::Host::get(self, key)
    }

    fn keys(&mut self) -> wasmtime::Result<Vec<String>> {
        bindings::config::Host::keys(self)
    }
}

fn key_form(form: v1::crypto::KeyForm) -> bindings::crypto::KeyForm {
    match form {
        v1::crypto::KeyForm::AsWritten => bindings::crypto::KeyForm::AsWritten,
        v1::crypto::KeyForm::StandardWebhooks => bindings::crypto::KeyForm::StandardWebhooks,
    }
}

fn algorithm(algorithm: v1::crypto::HashAlgorithm) -> bindings::crypto::HashAlgorithm {
    match algorithm {
        v1::crypto::HashAlgorithm::Sha256 => bindings::crypto::HashAlgorithm::Sha256,
        v1::crypto::HashAlgorithm::Sha512 => bindings::crypto::HashAlgorithm::Sha512,
    }
}

impl v1::crypto::HostSigningKey for CallState {
    fn fingerprint(&mut self, key: Resource<SigningKey>) -> wasmtime::Result<String> {
        bindings::crypto::HostSigningKey::fingerprint(self, key)
    }

    fn drop(&mut self, key: Resource<SigningKey>) -> wasmtime::Result<()> {
        bindings::crypto::HostSigningKey::drop(self, key)
    }
}

impl v1::crypto::Host for CallState {
    async fn hmac(
        &mut self,
        key: Resource<SigningKey>,
        form: v1::crypto::KeyForm,
        hash: v1::crypto::HashAlgorithm,
        data: Vec<u8>,
    ) -> wasmtime::Result<Vec<u8>> {
        bindings::crypto::Host::hmac(self, key, key_form(form), algorithm(hash), data).await
    }

    async fn digest(&mut self, hash: v1::crypto::HashAlgorithm, data: Vec<u8>) -> wasmtime::Result<Vec<u8>> {
        bindings::crypto::Host::digest(self, algorithm(hash), data).await
    }

    fn rotating_keys(&mut self) -> wasmtime::Result<Vec<Resource<SigningKey>>> {
        bindings::crypto::Host::rotating_keys(self)
    }
}
