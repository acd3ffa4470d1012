//! Judging a run: each grant against the order in which etcd saw the
//! requests arrive (never against the planned schedule, which the
//! processes only approximately keep).

use super::arrivals::Arrivals;
use super::record::{AnyError, Request};

/// One granted request, judged.
#[derive(Clone, Debug)]
pub struct Judged {
    pub request: Request,
    /// The revision at which etcd saw it ask.
    pub arrival_rev: i64,
    /// Its place in the arrival order, from 0.
    pub arrival: usize,
    /// How many earlier arrivals were still waiting when it was granted.
    pub ahead_of: usize,
}

/// One mode's run.
pub struct ModeRun {
    pub mode: String,
    /// The grants in grant (fencing token) order.
    pub grants: Vec<Judged>,
    /// How many requests the run made.
    pub requests: usize,
}

impl ModeRun {
    /// Judges the grants of `requests` by their arrivals.
    ///
    /// # Errors
    /// A grant whose arrival etcd did not show.
    pub fn judge(
        mode: &str,
        mut requests: Vec<Request>,
        arrivals: &Arrivals,
        expected: usize,
    ) -> Result<ModeRun, AnyError> {
        requests.sort_by_key(|r| r.token);
        let revs = requests
            .iter()
            .map(|r| {
                arrivals.of(r.token).ok_or_else(|| {
                    format!(
                        "{mode} mode: etcd showed no request for fencing token {}",
                        r.token
                    )
                })
            })
            .collect::<Result<Vec<i64>, _>>()?;
        let mut by_arrival: Vec<usize> = (0..requests.len()).collect();
        by_arrival.sort_by_key(|&i| revs[i]);
        let mut arrival = vec![0; requests.len()];
        for (place, &i) in by_arrival.iter().enumerate() {
            arrival[i] = place;
        }
        let mut served = vec![false; requests.len()];
        let grants = requests
            .into_iter()
            .zip(revs)
            .zip(arrival)
            .map(|((request, arrival_rev), arrival)| {
                let ahead_of = served[..arrival].iter().filter(|s| !**s).count();
                served[arrival] = true;
                Judged {
                    request,
                    arrival_rev,
                    arrival,
                    ahead_of,
                }
            })
            .collect();
        Ok(ModeRun {
            mode: mode.to_owned(),
            grants,
            requests: expected,
        })
    }

    /// How many grants came while an earlier arrival still waited.
    pub fn out_of_order(&self) -> usize {
        self.grants.iter().filter(|g| g.ahead_of > 0).count()
    }

    pub fn longest_wait_ms(&self) -> u64 {
        self.grants
            .iter()
            .map(|g| g.request.wait_ms())
            .max()
            .unwrap_or(0)
    }

    pub fn mean_wait_ms(&self) -> u64 {
        let total: u64 = self.grants.iter().map(|g| g.request.wait_ms()).sum();
        total / u64::try_from(self.grants.len().max(1)).unwrap_or(1)
    }

    /// Fair mode kept its promise: every request granted, in arrival order.
    pub fn is_fair(&self) -> bool {
        self.out_of_order() == 0 && self.grants.len() == self.requests
    }

    /// The verdict line.
    pub fn verdict(&self) -> String {
        let (n, k) = (self.grants.len(), self.out_of_order());
        if self.mode != "fair" {
            return format!(
                "verdict: unfair mode granted {k} of {n} requests out of arrival order"
            );
        }
        if self.grants.len() != self.requests {
            return format!(
                "verdict: FAIL: fair mode granted {n} of {} requests",
                self.requests
            );
        }
        if k == 0 {
            format!("verdict: fair mode granted all {n} requests in strict arrival order")
        } else {
            format!("verdict: FAIL: fair mode granted {k} of {n} requests out of arrival order")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Requests granted with tokens 10, 20, ... that etcd saw arrive at
    /// the given revisions.
    fn run(mode: &str, arrival_revs: &[i64]) -> ModeRun {
        let requests: Vec<Request> = (0..arrival_revs.len() as u64)
            .map(|i| Request {
                process: i,
                request: 0,
                asked_ms: 0,
                granted_ms: 5 * i,
                released_ms: 5 * i + 1,
                token: 10 * (i + 1),
            })
            .collect();
        let by_token = requests
            .iter()
            .zip(arrival_revs)
            .map(|(r, rev)| (r.token, *rev))
            .collect();
        ModeRun::judge(
            mode,
            requests,
            &Arrivals::from_map(by_token),
            arrival_revs.len(),
        )
        .expect("judged")
    }

    #[test]
    fn grants_in_arrival_order_are_fair() {
        let r = run("fair", &[3, 4, 7, 9]);
        assert_eq!(r.out_of_order(), 0);
        assert!(r.is_fair());
        assert_eq!(
            r.verdict(),
            "verdict: fair mode granted all 4 requests in strict arrival order"
        );
        assert_eq!((r.longest_wait_ms(), r.mean_wait_ms()), (15, 7));
    }

    #[test]
    fn a_grant_ahead_of_earlier_arrivals_is_out_of_order() {
        // The third grant arrived first: the first two went ahead of it;
        // the last went ahead of the one before it.
        let r = run("unfair", &[5, 6, 2, 9, 8]);
        let ahead: Vec<usize> = r.grants.iter().map(|g| g.ahead_of).collect();
        assert_eq!(ahead, [1, 1, 0, 1, 0]);
        assert_eq!(
            r.verdict(),
            "verdict: unfair mode granted 3 of 5 requests out of arrival order"
        );
        let fair = run("fair", &[5, 6, 2, 9, 8]);
        assert!(!fair.is_fair());
        assert!(
            fair.verdict()
                .starts_with("verdict: FAIL: fair mode granted 3 of 5")
        );
    }

    #[test]
    fn a_missing_grant_fails_fair_mode() {
        let mut r = run("fair", &[1, 2]);
        r.requests = 3;
        assert!(!r.is_fair());
        assert_eq!(
            r.verdict(),
            "verdict: FAIL: fair mode granted 2 of 3 requests"
        );
    }
}
