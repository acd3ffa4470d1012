//! The provider registry: `register_locker_provider` and `get_locker`.

use std::fmt;
use std::sync::{Arc, RwLock};

use crate::{Error, Locker, Result};

/// Makes a locker: `provider(fair)`.
pub type LockerProvider = Arc<dyn Fn(bool) -> Arc<dyn Locker> + Send + Sync>;

/// A slot holding at most one provider.
///
/// The global functions [`register_locker_provider`] and [`get_locker`] use
/// one process-wide `Registry`; tests and libraries that want isolation can
/// keep their own.
///
/// # Examples
/// ```
/// use std::sync::Arc;
/// use fairlock::{memory::MemoryStore, provider::Registry};
///
/// let registry = Registry::new();
/// assert!(registry.get_locker(true).is_err());
/// let store = MemoryStore::new();
/// registry.register(move |fair| Arc::new(store.locker(fair)) as Arc<dyn fairlock::Locker>);
/// assert!(registry.get_locker(true).unwrap().is_fair());
/// ```
#[derive(Default)]
pub struct Registry {
    provider: RwLock<Option<LockerProvider>>,
}

impl Registry {
    /// An empty registry.
    #[must_use]
    pub const fn new() -> Self {
        Registry {
            provider: RwLock::new(None),
        }
    }

    /// Sets the provider, replacing any earlier one.
    pub fn register<F>(&self, provider: F)
    where
        F: Fn(bool) -> Arc<dyn Locker> + Send + Sync + 'static,
    {
        *self.provider.write().unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(provider));
    }

    /// Removes the provider.
    pub fn clear(&self) {
        *self.provider.write().unwrap_or_else(|e| e.into_inner()) = None;
    }

    /// A new locker from the provider.
    ///
    /// # Errors
    /// [`Error::NoProvider`] if none is registered.
    pub fn get_locker(&self, fair: bool) -> Result<Arc<dyn Locker>> {
        let provider = self
            .provider
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .ok_or(Error::NoProvider)?;
        Ok(provider(fair))
    }
}

impl fmt::Debug for Registry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let set = self
            .provider
            .read()
            .map(|p| p.is_some())
            .unwrap_or_default();
        f.debug_struct("Registry")
            .field("provider", &if set { "set" } else { "none" })
            .finish()
    }
}

static GLOBAL: Registry = Registry::new();

/// Registers the process-wide locker provider, replacing any earlier one.
///
/// `provider(fair)` must return a new, independent locker on each call.
/// Backends offer ready-made registration, e.g. [`crate::etcd::register`].
///
/// # Examples
/// ```
/// use std::sync::Arc;
/// let store = fairlock::memory::MemoryStore::new();
/// fairlock::register_locker_provider(move |fair| Arc::new(store.locker(fair)) as Arc<dyn fairlock::Locker>);
/// let locker = fairlock::get_locker(false).unwrap();
/// assert!(!locker.is_fair());
/// ```
pub fn register_locker_provider<F>(provider: F)
where
    F: Fn(bool) -> Arc<dyn Locker> + Send + Sync + 'static,
{
    GLOBAL.register(provider);
}

/// A new locker from the process-wide provider: fair (arrival order) or
/// unfair (whoever asks when the lock is free).
///
/// # Errors
/// [`Error::NoProvider`] when no provider has been registered.
pub fn get_locker(fair: bool) -> Result<Arc<dyn Locker>> {
    GLOBAL.get_locker(fair)
}
