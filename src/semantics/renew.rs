//! A holding's loss signal, and the renewal of a backend that extends each
//! holding on its own (Redis; etcd renews its session lease instead):
//! extend every period from the grant's send time; a holding the server
//! says is gone, or whose local deadline passes without an acknowledged
//! extend, is declared lost. A backend says only how one extend is sent
//! ([`Renew`]).

use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use crate::api::loss::LossCell;
use crate::util::backoff::jitter;
use crate::util::observe;
use crate::{Expiry, GuardRelease, Key, LockGuard, LossCause};

/// What a holding's guard is told of its loss: the signal, why, and the
/// local deadline.
#[derive(Clone)]
pub(crate) struct LossSignal {
    pub lost: CancellationToken,
    pub cause: LossCell,
    pub expiry: Expiry,
}

impl LossSignal {
    /// A signal for a holding valid until `deadline`.
    pub(crate) fn until(deadline: Instant) -> Self {
        LossSignal {
            lost: CancellationToken::new(),
            cause: LossCell::default(),
            expiry: Expiry::new(deadline),
        }
    }

    /// The guard of `held`, granted `token`, told of the loss by this
    /// signal.
    pub(crate) fn guard(&self, key: Key, token: u64, held: Box<dyn GuardRelease>) -> LockGuard {
        LockGuard::new(key, token, held)
            .with_loss_signal(self.lost.clone(), Some(self.expiry.clone()))
    }

    /// Whether the holding was declared lost or its deadline passed.
    pub(crate) fn was_lost(&self) -> bool {
        self.lost.is_cancelled() || self.expiry.has_passed()
    }

    /// Tells the holder: records why (the first cause wins), signals, and
    /// ends the deadline.
    fn declare(&self, cause: LossCause) {
        self.cause.record(cause);
        self.lost.cancel();
        self.expiry.expire();
    }
}

/// What one extend came to.
pub(crate) enum Extended {
    /// Acknowledged: the holding is ours for another TTL.
    Yes,
    /// The server says the holding is gone (expired, deleted, someone
    /// else's).
    Gone,
    /// No (or too few) answers: why, for the log.
    Unsure(String),
}

/// How a backend extends one holding.
pub(crate) trait Renew: Send + Sync + 'static {
    /// The backend, as logs name it.
    const BACKEND: &'static str;
    /// What [`Extended::Gone`] means, as logs say it.
    const GONE: &'static str;

    /// Sends one extend.
    fn extend(&self) -> impl Future<Output = Extended> + Send;

    /// The holding, as logs name it.
    fn subject(&self) -> String;
}

/// When a backend extends its holdings.
#[derive(Clone, Copy)]
pub(crate) struct Timing {
    /// How long a grant or an acknowledged extend is trusted here,
    /// counted from when its request was sent.
    pub trusted: Duration,
    /// How often to extend (a third of the TTL).
    pub period: Duration,
    /// The first pause of the retry after an unacknowledged extend.
    pub retry: Duration,
}

/// Extends the holding every period from `started` (when the grant was
/// sent) until the server says it is gone or the deadline passes without
/// an acknowledged extend (the server unreachable, or this process
/// paused); then declares it lost on `signal`.
pub(crate) async fn renew<R: Renew>(r: R, timing: Timing, started: Instant, signal: LossSignal) {
    let (cause, why) = tokio::select! {
        () = extend_loop(&r, timing, started, &signal.expiry) => (LossCause::KeyChanged, R::GONE),
        () = signal.expiry.passed() => (LossCause::Expired, "no extend acknowledged in time"),
    };
    observe::loss_cause(R::BACKEND, format_args!("{}", r.subject()), why);
    signal.declare(cause);
}

async fn extend_loop<R: Renew>(r: &R, timing: Timing, started: Instant, expiry: &Expiry) {
    let period = timing.period;
    // The first extend is due a period after the grant was sent (its
    // deadline counts from then), not after the guard was built.
    let mut next = started + period;
    loop {
        tokio::time::sleep_until(next.into()).await;
        let sent = Instant::now();
        let why = match r.extend().await {
            Extended::Gone => return,
            Extended::Yes if sent + timing.trusted > Instant::now() => {
                expiry.extend_to(sent + timing.trusted);
                next = sent + period;
                continue;
            }
            Extended::Yes => "the extend was acknowledged too late".to_owned(),
            Extended::Unsure(why) => why,
        };
        // Try again soon, until the deadline.
        observe::renewal_failed(R::BACKEND, format_args!("{}", r.subject()), &why);
        let first = timing.retry;
        next = Instant::now() + (first * 2 + jitter(first)).min(period);
    }
}
