//! Which database server the store's connections reach, and whether it may write there.
//!
//! `DATABASE_URL` may name several hosts, as libpq's do — `postgres://u@db1:5432,db2:5432/oracle`
//! — with `target_session_attrs=read-write` (or `primary`): connect to the first server that takes
//! writes. sqlx takes one host only, so the store keeps the list itself ([`Servers`]): the pool
//! connects to the host chosen last, and when calls fail (an outage, a read-only server) it
//! searches every host at once and moves the pool to one that takes writes (`search`).
//!
//! Every new connection is checked before it is used (`admit`, the pool's `after_connect`): the
//! server it reached (`inet_server_addr`, so through a proxy the server behind it), whether it is
//! in recovery, and its WAL timeline. With `read-write` a connection to a server in recovery or set
//! read-only is refused at connect, also through a proxy that routes some connections to a
//! standby; sqlx then connects again within the acquire timeout. And a writable server on a
//! **lower timeline** than one this replica already wrote on is refused whatever the attributes:
//! timelines grow by one at each promotion, so that server is an old primary still taking writes
//! beside a newer one — a split brain, in which whatever is written on one of them is lost. It is
//! counted (`oracle_store_timeline_regressions_total`) and logged as an error; a replica restarted
//! forgets the timelines it saw (a cluster restored from a backup starts lower, on purpose).

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sqlx::postgres::{PgConnectOptions, PgConnection, PgPool};
use sqlx::{ConnectOptions, Connection, Row};

use crate::store::StoreError;
use crate::telemetry::metric;

/// How long a search waits for one host to connect and answer.
const PROBE_TIMEOUT: Duration = Duration::from_millis(500);

/// What the store asks of a session (libpq's `target_session_attrs`, of the values that can
/// write).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionAttrs {
    /// The first server that accepts a connection (libpq's default).
    Any,
    /// The first server that takes writes: not in recovery, not set read-only.
    ReadWrite,
}

/// `DATABASE_URL` split into one URL per host, in order, with what the sessions must be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostList {
    /// `host:port` as written, and the URL that reaches that host alone.
    pub hosts: Vec<(String, String)>,
    pub attrs: SessionAttrs,
}

/// Splits a `postgres://` URL with one or several comma-separated hosts (`host`, `host:port`,
/// `[v6]:port`) into one URL per host, without `target_session_attrs` (which sqlx does not read),
/// keeping user, password, database and every other parameter.
pub fn host_list(url: &str) -> Result<HostList, String> {
    let (scheme, rest) = url
        .split_once("://")
        .ok_or_else(|| "DATABASE_URL must start with postgres:// or postgresql://".to_owned())?;
    if !matches!(scheme, "postgres" | "postgresql") {
        return Err(format!(
            "DATABASE_URL's scheme must be postgres or postgresql, not {scheme}"
        ));
    }
    let (authority, path) = match rest.find(['/', '?']) {
        Some(at) => rest.split_at(at),
        None => (rest, ""),
    };
    let (userinfo, hosts) = match authority.rsplit_once('@') {
        Some((user, hosts)) => (Some(user), hosts),
        None => (None, authority),
    };
    let (path, query) = path.split_once('?').unwrap_or((path, ""));
    let mut attrs = SessionAttrs::Any;
    let mut kept = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        match pair.split_once('=') {
            Some(("target_session_attrs", value)) => {
                attrs = match value {
                    "any" => SessionAttrs::Any,
                    "read-write" | "primary" => SessionAttrs::ReadWrite,
                    other => {
                        return Err(format!(
                            "target_session_attrs={other}: the oracle writes, so it takes `any`, \
                             `read-write` or `primary`"
                        ))
                    }
                }
            }
            _ => kept.push(pair),
        }
    }
    let query = if kept.is_empty() {
        String::new()
    } else {
        format!("?{}", kept.join("&"))
    };
    let user = userinfo.map(|u| format!("{u}@")).unwrap_or_default();
    let mut list = Vec::new();
    for host in hosts.split(',') {
        if host.is_empty() {
            return Err("DATABASE_URL names an empty host (two commas, or a trailing one)".into());
        }
        let port = match host.rsplit_once(':') {
            Some((name, port)) if !name.ends_with(':') && !port.contains(']') => Some(port),
            _ => None,
        };
        if let Some(port) = port {
            if port.parse::<u16>().is_err() {
                return Err(format!("DATABASE_URL's host `{host}` has an invalid port"));
            }
        }
        list.push((
            host.to_owned(),
            format!("{scheme}://{user}{host}{path}{query}"),
        ));
    }
    Ok(HostList { hosts: list, attrs })
}

/// What a new connection found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    /// `address:port` of the server itself (behind a proxy), or the URL's host (a Unix socket).
    pub server: String,
    pub in_recovery: bool,
    pub read_only: bool,
    /// The WAL timeline a primary writes on (0 for a server in recovery).
    pub timeline: i64,
}

impl Session {
    /// One round trip, in the simple protocol (a statement without parameters: nothing prepared).
    async fn read(connection: &mut PgConnection, host: &str) -> Result<Self, sqlx::Error> {
        let row = sqlx::Executor::fetch_one(
            &mut *connection,
            "SELECT COALESCE(host(inet_server_addr()) || ':' || inet_server_port(), '') AS server,
                    pg_is_in_recovery() AS in_recovery,
                    current_setting('transaction_read_only') = 'on' AS read_only,
                    CASE WHEN pg_is_in_recovery() THEN 0
                         ELSE ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int8
                    END AS timeline",
        )
        .await?;
        let server: String = row.try_get("server")?;
        Ok(Self {
            server: if server.is_empty() {
                host.to_owned()
            } else {
                server
            },
            in_recovery: row.try_get("in_recovery")?,
            read_only: row.try_get("read_only")?,
            timeline: row.try_get("timeline")?,
        })
    }

    fn writable(&self) -> bool {
        !self.in_recovery && !self.read_only
    }
}

/// Why a session was refused at connect, in the words calls are answered with.
fn refusal(session: &Session, attrs: SessionAttrs, highest: i64) -> Option<StoreError> {
    if attrs == SessionAttrs::ReadWrite && !session.writable() {
        let what = if session.in_recovery {
            "is in recovery (a standby)"
        } else {
            "is read-only (default_transaction_read_only)"
        };
        return Some(StoreError::ReadOnly(format!(
            "{} {what}; target_session_attrs=read-write refuses it",
            session.server
        )));
    }
    if session.writable() && session.timeline < highest {
        return Some(StoreError::Unreachable(format!(
            "{} takes writes on timeline {}, behind timeline {highest} this replica wrote on: two \
             primaries (a split brain); refused",
            session.server, session.timeline
        )));
    }
    None
}

/// The hosts, the one the pool connects to now, and what connections found.
pub struct Servers {
    hosts: Vec<(String, PgConnectOptions)>,
    attrs: SessionAttrs,
    chosen: AtomicUsize,
    /// The highest timeline a writable session of this replica was on.
    highest_timeline: AtomicI64,
    /// The last connection refused at connect: when, and why.
    refused: Mutex<Option<(Instant, StoreError)>>,
    /// The last refusal logged, to log each (server, reason) once a while.
    logged: Mutex<Option<(Instant, String)>>,
    /// The last session admitted.
    admitted: Mutex<Option<Session>>,
    searching: AtomicBool,
}

impl std::fmt::Debug for Servers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Servers")
            .field(
                "hosts",
                &self.hosts.iter().map(|(h, _)| h).collect::<Vec<_>>(),
            )
            .field("attrs", &self.attrs)
            .field("chosen", &self.chosen)
            .finish_non_exhaustive()
    }
}

impl Servers {
    /// The servers of `list`, each URL read by `options` (which adds the store's own settings).
    pub fn new(
        list: HostList,
        options: impl Fn(&str) -> Result<PgConnectOptions, sqlx::Error>,
    ) -> Result<Self, sqlx::Error> {
        let hosts = list
            .hosts
            .iter()
            .map(|(host, url)| Ok((host.clone(), options(url)?)))
            .collect::<Result<Vec<_>, sqlx::Error>>()?;
        Ok(Self::from_hosts(hosts, list.attrs))
    }

    fn from_hosts(hosts: Vec<(String, PgConnectOptions)>, attrs: SessionAttrs) -> Self {
        Self {
            hosts,
            attrs,
            chosen: AtomicUsize::new(0),
            highest_timeline: AtomicI64::new(0),
            refused: Mutex::default(),
            logged: Mutex::default(),
            admitted: Mutex::default(),
            searching: AtomicBool::new(false),
        }
    }

    /// The server a pool made elsewhere connects to (a test's), taken as it is: one host, no
    /// attributes.
    pub fn of_pool(pool: &PgPool) -> Self {
        let options = pool.connect_options();
        let host = format!("{}:{}", options.get_host(), options.get_port());
        Self::from_hosts(vec![(host, (*options).clone())], SessionAttrs::Any)
    }

    /// At start-up with several hosts: the first found to take writes (libpq connects to the first
    /// in order that does; here they are asked at once). Without one, the first host stays chosen
    /// and connecting fails with its error.
    pub async fn choose_at_start(&self) {
        if self.hosts.len() > 1 {
            if let Some(index) = self.search().await {
                self.chosen.store(index, Ordering::Relaxed);
            }
        }
    }

    /// `error` from connecting, with which host it was and why connections were refused there.
    pub fn explain(&self, error: sqlx::Error) -> StoreError {
        let host = &self.hosts[self.chosen.load(Ordering::Relaxed)].0;
        let lately = Instant::now().checked_sub(Duration::from_secs(60));
        match lately.and_then(|since| self.refused_since(since)) {
            Some(refusal) => refusal,
            None => at_host(StoreError::from(error), host),
        }
    }

    /// The options of the host the pool should connect to now.
    pub fn chosen(&self) -> PgConnectOptions {
        self.hosts[self.chosen.load(Ordering::Relaxed)].1.clone()
    }

    /// The last session admitted: the server, its recovery state and its timeline.
    pub fn admitted(&self) -> Option<Session> {
        lock(&self.admitted).clone()
    }

    /// Checks a new connection of the pool (its `after_connect`): admitted, or refused with a
    /// reason the caller's call will be answered with if it finds no other connection in time.
    pub async fn admit(&self, connection: &mut PgConnection) -> Result<(), sqlx::Error> {
        let host = &self.hosts[self.chosen.load(Ordering::Relaxed)].0;
        let session = Session::read(connection, host).await?;
        let highest = self.highest_timeline.load(Ordering::Relaxed);
        match refusal(&session, self.attrs, highest) {
            None => {
                if session.writable() {
                    self.highest_timeline
                        .fetch_max(session.timeline, Ordering::Relaxed);
                }
                metric::store_server(&session.server, session.timeline, false);
                *lock(&self.admitted) = Some(session);
                Ok(())
            }
            Some(error) => {
                let regressed = matches!(error, StoreError::Unreachable(_));
                if regressed {
                    metric::store_server(&session.server, session.timeline, true);
                }
                self.log_refusal(&error, regressed);
                let detail = error.to_string();
                *lock(&self.refused) = Some((Instant::now(), error));
                Err(sqlx::Error::Protocol(detail))
            }
        }
    }

    /// A refusal at connect since `since`: what a call that timed out waiting for a connection
    /// really met.
    pub fn refused_since(&self, since: Instant) -> Option<StoreError> {
        lock(&self.refused)
            .as_ref()
            .filter(|(at, _)| *at >= since)
            .map(|(_, error)| error.clone())
    }

    fn log_refusal(&self, error: &StoreError, regressed: bool) {
        let text = error.to_string();
        let mut logged = lock(&self.logged);
        let again = logged
            .as_ref()
            .is_none_or(|(at, last)| *last != text || at.elapsed() > Duration::from_secs(10));
        if !again {
            return;
        }
        *logged = Some((Instant::now(), text));
        if regressed {
            tracing::error!(%error, "a connection reached an older primary than this replica wrote on: check the HA manager (two members take writes)");
        } else {
            tracing::warn!(%error, "a connection reached a server that cannot take writes; connecting again");
        }
    }

    /// When calls fail and there are several hosts, looks for one that takes writes (at most one
    /// search at a time), and points `pool` at it.
    pub fn search_in_background(self: &Arc<Self>, pool: &PgPool) {
        if self.hosts.len() < 2 || self.searching.swap(true, Ordering::AcqRel) {
            return;
        }
        let (servers, pool) = (self.clone(), pool.clone());
        tokio::spawn(async move {
            if let Some(index) = servers.search().await {
                if servers.chosen.swap(index, Ordering::AcqRel) != index {
                    tracing::warn!(
                        server = %servers.hosts[index].0,
                        "the store's connections go to another host of DATABASE_URL: it takes writes"
                    );
                    pool.set_connect_options(servers.hosts[index].1.clone());
                }
            }
            servers.searching.store(false, Ordering::Release);
        });
    }

    /// Every host at once: the first to answer that it takes writes and is not behind (libpq asks
    /// them in order; at once, a host that does not answer costs no more than its probe's
    /// timeout).
    async fn search(&self) -> Option<usize> {
        let highest = self.highest_timeline.load(Ordering::Relaxed);
        let attrs = SessionAttrs::ReadWrite;
        let mut probes: futures_util::stream::FuturesUnordered<_> = self
            .hosts
            .iter()
            .enumerate()
            .map(|(index, (host, options))| async move {
                let probed = tokio::time::timeout(PROBE_TIMEOUT, async {
                    let mut connection = options.connect().await?;
                    let session = Session::read(&mut connection, host).await;
                    let _ = connection.close().await;
                    session
                })
                .await;
                (index, probed)
            })
            .collect();
        use futures_util::StreamExt;
        while let Some((index, probed)) = probes.next().await {
            if let Ok(Ok(session)) = probed {
                if refusal(&session, attrs, highest).is_none() {
                    return Some(index);
                }
            }
        }
        None
    }
}

/// `error` with the host it came from, where it says something of the database.
fn at_host(error: StoreError, host: &str) -> StoreError {
    match error {
        StoreError::Unreachable(detail) => StoreError::Unreachable(format!("{host}: {detail}")),
        StoreError::TimedOut(detail) => StoreError::TimedOut(format!("{host}: {detail}")),
        StoreError::Failed(detail) => StoreError::Failed(format!("{host}: {detail}")),
        other => other,
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hosts(list: &HostList) -> Vec<(&str, &str)> {
        list.hosts
            .iter()
            .map(|(h, u)| (h.as_str(), u.as_str()))
            .collect()
    }

    #[test]
    fn a_host_list_becomes_one_url_per_host_with_everything_else_kept() {
        let list = host_list(
            "postgres://oracle:s3cret@127.0.0.1:6001,db2,[::1]:6003/oracle?sslmode=require&target_session_attrs=read-write&application_name=po",
        )
        .unwrap();
        assert_eq!(list.attrs, SessionAttrs::ReadWrite);
        assert_eq!(
            hosts(&list),
            [
                ("127.0.0.1:6001", "postgres://oracle:s3cret@127.0.0.1:6001/oracle?sslmode=require&application_name=po"),
                ("db2", "postgres://oracle:s3cret@db2/oracle?sslmode=require&application_name=po"),
                ("[::1]:6003", "postgres://oracle:s3cret@[::1]:6003/oracle?sslmode=require&application_name=po"),
            ]
        );
    }

    #[test]
    fn one_host_without_attributes_is_the_url_as_it_was() {
        let url = "postgresql://postgres@127.0.0.1:5432/oracle";
        let list = host_list(url).unwrap();
        assert_eq!(list.attrs, SessionAttrs::Any);
        assert_eq!(hosts(&list), [("127.0.0.1:5432", url)]);
        assert_eq!(
            host_list("postgres://h/db?target_session_attrs=primary")
                .unwrap()
                .attrs,
            SessionAttrs::ReadWrite
        );
    }

    #[test]
    fn what_cannot_reach_a_writable_server_is_refused_with_the_reason() {
        for (url, says) in [
            ("mysql://h/db", "scheme"),
            ("h:5432/db", "postgres://"),
            ("postgres://u@h1,,h2/db", "empty host"),
            ("postgres://u@h1:5432,h2:54x/db", "invalid port"),
            (
                "postgres://u@h1/db?target_session_attrs=standby",
                "the oracle writes",
            ),
            (
                "postgres://u@h1/db?target_session_attrs=read-only",
                "the oracle writes",
            ),
        ] {
            let error = host_list(url).unwrap_err();
            assert!(error.contains(says), "{url}: {error}");
        }
    }

    fn session(in_recovery: bool, read_only: bool, timeline: i64) -> Session {
        Session {
            server: "10.0.0.2:5432".into(),
            in_recovery,
            read_only,
            timeline,
        }
    }

    #[test]
    fn read_write_refuses_a_standby_and_a_read_only_primary_and_any_takes_them() {
        let standby = session(true, true, 0);
        let read_only = session(false, true, 3);
        for s in [&standby, &read_only] {
            assert!(matches!(
                refusal(s, SessionAttrs::ReadWrite, 0),
                Some(StoreError::ReadOnly(_))
            ));
            assert!(refusal(s, SessionAttrs::Any, 0).is_none());
        }
        assert!(refusal(&session(false, false, 3), SessionAttrs::ReadWrite, 3).is_none());
    }

    #[test]
    fn a_primary_on_an_older_timeline_than_one_written_on_is_refused_whatever_the_attributes() {
        let old_primary = session(false, false, 3);
        for attrs in [SessionAttrs::Any, SessionAttrs::ReadWrite] {
            let refused = refusal(&old_primary, attrs, 4).expect("refused");
            assert!(
                refused.to_string().contains("behind timeline 4"),
                "{refused}"
            );
            assert!(
                refusal(&old_primary, attrs, 3).is_none(),
                "the same timeline"
            );
        }
        // A standby's timeline is not compared (it cannot take the writes anyway).
        assert!(refusal(&session(true, true, 0), SessionAttrs::Any, 4).is_none());
    }
}
