//! Test support: a master, its replica and three sentinels watching it
//! (`redis-server --sentinel` with a generated config, quorum 2), real
//! processes on free loopback ports under the wrapper of
//! `redis_server.rs` (killed and removed when the tests end).
#![allow(dead_code)]

use std::ffi::OsString;
use std::sync::OnceLock;
use std::time::Duration;

use futures_util::StreamExt;

use super::redis_server::{RedisServer, Spec};

/// The name the sentinels monitor the master under.
pub const MASTER: &str = "mymaster";

/// Passwords of the deployment, if any.
#[derive(Clone, Copy, Default)]
pub struct Auth {
    /// `requirepass` of the master and the replica.
    pub data: Option<&'static str>,
    /// `requirepass` of the sentinels.
    pub sentinels: Option<&'static str>,
}

/// A running master, replica and three sentinels.
pub struct RedisSentinel {
    pub master: RedisServer,
    pub replica: RedisServer,
    pub sentinels: Vec<RedisServer>,
    pub auth: Auth,
}

fn args(list: &[&str]) -> Vec<OsString> {
    list.iter().map(OsString::from).collect()
}

impl RedisSentinel {
    /// Starts the deployment and returns once the replica is in sync and
    /// every sentinel knows the replica and the two other sentinels.
    pub fn start(auth: Auth) -> RedisSentinel {
        let mut data_args = Vec::new();
        if let Some(pw) = auth.data {
            data_args = args(&["--requirepass", pw, "--masterauth", pw]);
        }
        let master = RedisServer::start_spec(&Spec {
            extra: data_args.clone(),
            ..Spec::default()
        });
        let mut replica_args = data_args.clone();
        replica_args.extend(args(&[
            "--replicaof",
            "127.0.0.1",
            &master.port.to_string(),
            // Lets a test delete a key on the replica alone.
            "--replica-read-only",
            "no",
        ]));
        let replica = RedisServer::start_spec(&Spec {
            extra: replica_args,
            ..Spec::default()
        });
        let master_port = master.port;
        let sentinels = (0..3)
            .map(|_| {
                RedisServer::start_spec(&Spec {
                    first: Some(Box::new(move |dir, _port| {
                        let mut conf = format!(
                            "sentinel monitor {MASTER} 127.0.0.1 {master_port} 2\n\
                             sentinel down-after-milliseconds {MASTER} 1000\n\
                             sentinel failover-timeout {MASTER} 5000\n"
                        );
                        if let Some(pw) = auth.data {
                            conf.push_str(&format!("sentinel auth-pass {MASTER} {pw}\n"));
                        }
                        if let Some(pw) = auth.sentinels {
                            conf.push_str(&format!(
                                "requirepass {pw}\nsentinel sentinel-pass {pw}\n"
                            ));
                        }
                        let path = dir.join("sentinel.conf");
                        std::fs::write(&path, conf).expect("sentinel.conf");
                        vec![path.into_os_string()]
                    })),
                    extra: args(&["--sentinel"]),
                    ready: "+monitor master",
                    ..Spec::default()
                })
            })
            .collect();
        let deployment = RedisSentinel {
            master,
            replica,
            sentinels,
            auth,
        };
        super::redis_server::block_on(deployment.wait_ready());
        deployment
    }

    async fn wait_ready(&self) {
        let replica = self.data_url(self.replica.port);
        poll(|| async {
            let info: String = query(&replica, redis::cmd("INFO").arg("replication")).await?;
            Some(info.contains("master_link_status:up"))
        })
        .await;
        super::redis_server::replicated(&self.data_url(self.master.port)).await;
        for s in &self.sentinels {
            let url = self.sentinel_url(s.port);
            poll(|| async {
                let fields: Vec<String> =
                    query(&url, redis::cmd("SENTINEL").arg("MASTER").arg(MASTER)).await?;
                let field = |name: &str| {
                    let at = fields.iter().position(|f| f == name)?;
                    fields.get(at + 1).cloned()
                };
                Some(
                    field("num-other-sentinels").as_deref() == Some("2")
                        && field("num-slaves").as_deref() == Some("1"),
                )
            })
            .await;
        }
    }

    /// A `redis://` URL of the data node at `port`, with its password.
    pub fn data_url(&self, port: u16) -> String {
        match self.auth.data {
            Some(pw) => format!("redis://:{pw}@127.0.0.1:{port}"),
            None => format!("redis://127.0.0.1:{port}"),
        }
    }

    /// A `redis://` URL of the sentinel at `port`, with its password.
    pub fn sentinel_url(&self, port: u16) -> String {
        match self.auth.sentinels {
            Some(pw) => format!("redis://:{pw}@127.0.0.1:{port}"),
            None => format!("redis://127.0.0.1:{port}"),
        }
    }

    /// `redis+sentinel://127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3/mymaster`,
    /// without credentials.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .sentinels
            .iter()
            .map(|s| format!("127.0.0.1:{}", s.port))
            .collect();
        format!("redis+sentinel://{}/{MASTER}", hosts.join(","))
    }

    /// A subscription to the first sentinel's `+switch-master` events.
    pub async fn switches(&self) -> redis::aio::PubSubStream {
        let url = self.sentinel_url(self.sentinels[0].port);
        let mut pubsub = redis::Client::open(url.as_str())
            .expect("sentinel url")
            .get_async_pubsub()
            .await
            .expect("sentinel pubsub");
        pubsub
            .subscribe("+switch-master")
            .await
            .expect("subscribe +switch-master");
        pubsub.into_on_message()
    }
}

/// Waits for the next `+switch-master` event; returns the new master's
/// port.
pub async fn next_switch(events: &mut redis::aio::PubSubStream) -> u16 {
    let msg = tokio::time::timeout(Duration::from_secs(120), events.next())
        .await
        .expect("no failover within 120 s")
        .expect("sentinel events ended");
    let text: String = msg.get_payload().expect("payload");
    // "<name> <old ip> <old port> <new ip> <new port>"
    text.split_whitespace()
        .nth(4)
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("odd +switch-master message {text:?}"))
}

/// One deployment per test binary, without passwords, started on first use.
pub fn shared() -> &'static RedisSentinel {
    static SHARED: OnceLock<RedisSentinel> = OnceLock::new();
    SHARED.get_or_init(|| RedisSentinel::start(Auth::default()))
}

async fn query<T: redis::FromRedisValue>(url: &str, cmd: &mut redis::Cmd) -> Option<T> {
    let mut c = redis::Client::open(url)
        .ok()?
        .get_multiplexed_async_connection()
        .await
        .ok()?;
    cmd.query_async(&mut c).await.ok()
}

/// Re-reads a state every 20 ms until `done` says it holds (replication
/// and sentinel discovery announce themselves by no event a client can
/// subscribe to). Guards against a hang only.
async fn poll<F, Fut>(mut done: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<bool>>,
{
    let wait = async {
        while done().await != Some(true) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(120), wait)
        .await
        .expect("the sentinel deployment never got ready");
}
