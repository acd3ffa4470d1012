//! The provider registry: `register_locker_provider` and `get_locker`;
//! `register_elector_provider` and `get_elector`.

use std::fmt;
use std::sync::{Arc, RwLock};

use crate::{Elector, Error, Locker, Result};

/// Makes a locker: `provider(fair)`.
pub type LockerProvider = Arc<dyn Fn(bool) -> Arc<dyn Locker> + Send + Sync>;

/// Makes an elector: `provider()`.
pub type ElectorProvider = Arc<dyn Fn() -> Arc<dyn Elector> + Send + Sync>;

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
    /// The elector provider of the backend registered last, if it has one.
    electors: RwLock<Option<ElectorProvider>>,
}

impl Registry {
    /// An empty registry.
    #[must_use]
    pub const fn new() -> Self {
        Registry {
            provider: RwLock::new(None),
            electors: RwLock::new(None),
        }
    }

    /// Sets the provider, replacing any earlier one (and the elector
    /// provider of the backend registered before, if any).
    pub fn register<F>(&self, provider: F)
    where
        F: Fn(bool) -> Arc<dyn Locker> + Send + Sync + 'static,
    {
        *self.electors.write().unwrap_or_else(|e| e.into_inner()) = None;
        *self.provider.write().unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(provider));
    }

    /// Sets the elector provider of the backend just registered with
    /// [`Registry::register`] (register the locker provider first: it
    /// clears this one).
    pub fn register_elector<F>(&self, provider: F)
    where
        F: Fn() -> Arc<dyn Elector> + Send + Sync + 'static,
    {
        *self.electors.write().unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(provider));
    }

    /// A new elector from the elector provider.
    ///
    /// # Errors
    /// [`Error::NoProvider`] if no backend is registered;
    /// [`Error::Unsupported`] if the registered backend has no elections.
    pub fn get_elector(&self) -> Result<Arc<dyn Elector>> {
        let electors = self
            .electors
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        match electors {
            Some(provider) => Ok(provider()),
            None if self.provider.read().is_ok_and(|p| p.is_some()) => Err(Error::Unsupported(
                "the registered backend has no leader election; elections run on etcd \
                     (fairlock::etcd::register), Redis (fairlock::redis::register) and the \
                     in-memory backend"
                    .into(),
            )),
            None => Err(Error::NoProvider),
        }
    }

    /// Removes the provider (and the elector provider).
    pub fn clear(&self) {
        *self.electors.write().unwrap_or_else(|e| e.into_inner()) = None;
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

/// Registers the process-wide elector provider of the backend registered
/// last (register its locker provider first: [`register_locker_provider`]
/// clears this one). Backends with elections do it in their own
/// registration, e.g. [`crate::etcd::register`].
///
/// # Examples
/// ```
/// use std::sync::Arc;
/// let store = fairlock::memory::MemoryStore::new();
/// let lockers = store.clone();
/// fairlock::register_locker_provider(move |fair| Arc::new(lockers.locker(fair)) as Arc<dyn fairlock::Locker>);
/// fairlock::register_elector_provider(move || Arc::new(store.elector()) as Arc<dyn fairlock::Elector>);
/// assert!(fairlock::get_elector().is_ok());
/// ```
pub fn register_elector_provider<F>(provider: F)
where
    F: Fn() -> Arc<dyn Elector> + Send + Sync + 'static,
{
    GLOBAL.register_elector(provider);
}

/// A new elector from the process-wide registry: of etcd after
/// [`crate::etcd::register`] (its own session lease, sharing the
/// connection).
///
/// # Errors
/// [`Error::NoProvider`] when no backend has been registered;
/// [`Error::Unsupported`] when the registered backend has no elections
/// (Redis).
pub fn get_elector() -> Result<Arc<dyn Elector>> {
    GLOBAL.get_elector()
}
