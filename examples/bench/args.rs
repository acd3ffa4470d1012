//! The bench's command line: which rows to run, and against what.

use std::time::Duration;

/// What the command line asked for.
pub struct Opts {
    pub endpoints: Option<String>,
    pub quick: bool,
    pub json: bool,
    pub go: bool,
    pub redis: bool,
    pub redis_only: bool,
    pub redis_cycle: bool,
    /// `--redis-deployments`: the cluster and sentinel rows only.
    pub redis_deployments: bool,
    pub soak_only: bool,
    pub shared_only: bool,
    /// `--multi-only`: the several-keys rows only.
    pub multi_only: bool,
    /// `--multi-deadlock`: the deadlock demonstration only.
    pub multi_deadlock: bool,
    pub soak_secs: Option<u64>,
    /// Which fairlock modes the soak runs.
    pub soak_modes: Vec<bool>,
    /// `--trace`: the uncontended cycle without and with a subscriber.
    pub trace: bool,
    /// `--latency-ms D`: the etcd rows on a 3-member cluster with D ms on
    /// every link.
    pub latency: Option<Duration>,
    pub rss_child: Option<(String, usize)>,
    /// `--scale`: the scale curves only.
    pub scale: bool,
    /// `--curve queue|held|sessions [N,..]`: one scale curve, at these
    /// sizes.
    pub curve: Option<(String, Vec<usize>)>,
    /// `--svg-dir D`: where `--scale` draws.
    pub svg_dir: std::path::PathBuf,
    /// `--scale-child MODE ENDPOINT PREFIX N`: one process of a curve.
    pub scale_child: Option<(String, String, String, usize)>,
}

impl Opts {
    /// The soak's length (0: none) and the fairlock modes it runs.
    pub fn soak(&self) -> (u64, &[bool]) {
        let secs = self.soak_secs.unwrap_or(if self.quick { 60 } else { 600 });
        (secs, &self.soak_modes)
    }
}

pub fn parse() -> Result<Opts, String> {
    let mut o = Opts {
        endpoints: None,
        quick: false,
        json: false,
        go: true,
        redis: true,
        redis_only: false,
        redis_cycle: false,
        redis_deployments: false,
        soak_only: false,
        shared_only: false,
        multi_only: false,
        multi_deadlock: false,
        soak_secs: None,
        soak_modes: vec![true, false],
        trace: false,
        latency: None,
        rss_child: None,
        scale: false,
        svg_dir: "target/scale".into(),
        curve: None,
        scale_child: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--endpoints" => o.endpoints = Some(args.next().ok_or("--endpoints needs a value")?),
            "--quick" => o.quick = true,
            "--json" => o.json = true,
            "--no-go" => o.go = false,
            "--no-redis" => o.redis = false,
            "--trace" => o.trace = true,
            "--redis-only" => o.redis_only = true,
            "--redis-cycle" => o.redis_cycle = true,
            "--redis-deployments" => o.redis_deployments = true,
            "--soak-only" => o.soak_only = true,
            "--shared-only" => o.shared_only = true,
            "--multi-only" => o.multi_only = true,
            "--multi-deadlock" => o.multi_deadlock = true,
            "--scale" => o.scale = true,
            "--curve" => {
                let name = args.next().ok_or("--curve needs queue, held or sessions")?;
                let sizes = args.next().unwrap_or_default();
                let sizes = sizes.split(',').filter_map(|n| n.parse().ok()).collect();
                o.scale = true;
                o.curve = Some((name, sizes));
            }
            "--svg-dir" => o.svg_dir = args.next().ok_or("--svg-dir needs a directory")?.into(),
            "--scale-child" => {
                let mut next = || args.next().ok_or("--scale-child MODE ENDPOINT PREFIX N");
                let (mode, ep, prefix) = (next()?, next()?, next()?);
                let n = next()?.parse().map_err(|_| "--scale-child: N is a count")?;
                o.scale_child = Some((mode, ep, prefix, n));
            }
            "--latency-ms" => {
                let v = args
                    .next()
                    .ok_or("--latency-ms needs a delay in milliseconds")?;
                let ms: f64 = v
                    .parse()
                    .ok()
                    .filter(|ms: &f64| ms.is_finite() && *ms >= 0.0 && *ms <= 1000.0)
                    .ok_or(format!("--latency-ms {v:?}: give milliseconds, 0 to 1000"))?;
                o.latency = Some(Duration::from_secs_f64(ms / 1000.0));
                // Round trips are the point: no Redis, soak or memory rows.
                o.redis = false;
                o.soak_secs = Some(0);
            }
            "--soak-mode" => {
                o.soak_modes = match args.next().as_deref() {
                    Some("fair") => vec![true],
                    Some("unfair") => vec![false],
                    Some("both") => vec![true, false],
                    other => {
                        return Err(format!("--soak-mode {other:?}: use fair, unfair or both"));
                    }
                };
            }
            "--soak-secs" => {
                let v = args.next().ok_or("--soak-secs needs a number of seconds")?;
                o.soak_secs = Some(
                    v.parse()
                        .map_err(|_| format!("--soak-secs {v:?}: not a number"))?,
                );
            }
            "--rss-child" => {
                let what = args.next().ok_or("--rss-child needs held|waiting")?;
                let n = args
                    .next()
                    .and_then(|n| n.parse().ok())
                    .ok_or("--rss-child needs a count")?;
                o.rss_child = Some((what, n));
            }
            "-h" | "--help" => {
                return Err("usage: bench [--endpoints E] [--quick] [--json] [--no-go] \
                            [--no-redis] [--redis-only] [--redis-cycle] [--redis-deployments] \
                            [--shared-only] [--multi-only] [--multi-deadlock] \
                            [--scale [--svg-dir D]] [--curve queue|held|sessions N,.. [--redis-only]] \
                            [--soak-only] [--soak-secs N] \
                            [--soak-mode fair|unfair|both] [--trace] [--latency-ms D]"
                    .into());
            }
            other => return Err(format!("unknown argument {other:?}; see --help")),
        }
    }
    Ok(o)
}
