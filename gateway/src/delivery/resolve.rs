//! Name resolution, behind a trait so tests can answer without sending a DNS query.

use std::fmt;
use std::future::Future;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;

/// What a [`Resolve`] returns: every address the name stands for.
pub type ResolveFuture = Pin<Box<dyn Future<Output = io::Result<Vec<IpAddr>>> + Send>>;

/// Turns a host name into addresses. Called once per new connection; the connector then
/// connects only to addresses from that one answer.
pub trait Resolve: Send + Sync + fmt::Debug + 'static {
    fn resolve(&self, host: &str) -> ResolveFuture;
}

/// The operating system's resolver (`getaddrinfo` via `tokio::net::lookup_host`): DNS,
/// `/etc/hosts`, and whatever else the system is configured with.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemResolver;

impl Resolve for SystemResolver {
    fn resolve(&self, host: &str) -> ResolveFuture {
        let host = host.to_owned();
        Box::pin(async move {
            let addrs = tokio::net::lookup_host((host.as_str(), 0)).await?;
            Ok(addrs.map(|sa| sa.ip()).collect())
        })
    }
}
