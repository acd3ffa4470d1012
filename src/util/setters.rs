//! `setters!` and `getters!`: the plain builder setters and getters of the
//! backends' configurations (`EtcdConfig`, `RedisConfig`), written once.
//! Each entry keeps its own doc comment.

/// Builder setters that store their argument in one field:
/// `with_ttl(ttl: Duration) => ttl = ttl;` writes
/// `#[must_use] pub fn with_ttl(mut self, ttl: Duration) -> Self`.
macro_rules! setters {
    ($($(#[$doc:meta])* $name:ident($arg:ident: $ty:ty) => $field:ident = $value:expr;)*) => {$(
        $(#[$doc])*
        #[must_use]
        pub fn $name(mut self, $arg: $ty) -> Self {
            self.$field = $value;
            self
        }
    )*};
}

/// Getters that copy a field out: `ttl: Duration;` writes
/// `#[must_use] pub fn ttl(&self) -> Duration`.
macro_rules! getters {
    ($($(#[$doc:meta])* $field:ident: $ty:ty;)*) => {$(
        $(#[$doc])*
        #[must_use]
        pub fn $field(&self) -> $ty {
            self.$field
        }
    )*};
}

pub(crate) use {getters, setters};
