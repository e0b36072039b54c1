//! The columns the batched heartbeat statements bind, one entry per silo: a silo record's
//! ([`RecordColumns`], shared by the write and the insert of joining silos), and a write's, with
//! what each record was folded under ([`HeartbeatColumns`]).

use sqlx::postgres::PgArguments;
use sqlx::query::Query;
use sqlx::Postgres;

use super::PendingWrite;
use crate::clock::Millis;
use crate::cluster::{ClusterName, SiloId, SiloRecord};
use crate::store::postgres::membership::profile_text;
use crate::store::StoreError;

/// A silo record's columns as the batched statements bind them, one entry per silo.
#[derive(Default)]
pub(super) struct RecordColumns<'a> {
    clusters: Vec<&'a str>,
    silos: Vec<&'a str>,
    addresses: Vec<&'a str>,
    statuses: Vec<&'static str>,
    last_heartbeats: Vec<Millis>,
    counts: Vec<i64>,
    profiles: Vec<String>,
    pub(super) protected_until: Vec<Millis>,
}

impl<'a> RecordColumns<'a> {
    pub(super) fn push(
        &mut self,
        cluster: &'a ClusterName,
        record: &'a SiloRecord,
    ) -> Result<(), StoreError> {
        self.clusters.push(cluster.as_str());
        self.silos.push(record.id.as_str());
        self.addresses.push(&record.profile.address);
        self.statuses.push(record.status.as_str());
        self.last_heartbeats.push(record.last_heartbeat_ms);
        self.counts.push(record.heartbeat_count);
        self.profiles.push(profile_text(&record.profile)?);
        self.protected_until.push(record.protected_until_ms);
        Ok(())
    }

    /// Binds `$1`–`$7`: cluster, silo, address, status, stamp, count and profile (the protection
    /// is bound where each statement takes it).
    pub(super) fn bind<'q>(
        &'q self,
        query: Query<'q, Postgres, PgArguments>,
    ) -> Query<'q, Postgres, PgArguments> {
        query
            .bind(&self.clusters)
            .bind(&self.silos)
            .bind(&self.addresses)
            .bind(&self.statuses)
            .bind(&self.last_heartbeats)
            .bind(&self.counts)
            .bind(&self.profiles)
    }
}

/// The columns of a batched heartbeat write, one entry per silo.
#[derive(Default)]
pub(super) struct HeartbeatColumns<'a> {
    pub(super) records: RecordColumns<'a>,
    previous_counts: Vec<i64>,
    ttls: Vec<Millis>,
    earliest: Vec<Millis>,
    latest: Vec<Millis>,
    /// Each record's place (from 1) among the keys the statement also reads; empty when it reads
    /// none.
    pub(super) positions: Vec<i64>,
}

impl<'a> HeartbeatColumns<'a> {
    /// Binds `$1`–`$14` of [`HEARTBEAT_WRITE`](super::HEARTBEAT_WRITE): these columns, the test clock's instant, what
    /// each record was folded under, and its place among the keys read.
    pub(super) fn bind<'q>(
        &'q self,
        query: Query<'q, Postgres, PgArguments>,
        now: Option<Millis>,
    ) -> Query<'q, Postgres, PgArguments> {
        self.records
            .bind(query)
            .bind(&self.previous_counts)
            .bind(&self.records.protected_until)
            .bind(now)
            .bind(&self.ttls)
            .bind(&self.earliest)
            .bind(&self.latest)
            .bind(&self.positions)
    }

    /// The columns of `writes`, which must be in (cluster, silo) order: the statement locks the
    /// rows in the order it is given them (see [`in_lock_order`](super::in_lock_order)).
    pub(super) fn of(
        silos: &'a [(ClusterName, SiloId)],
        writes: &'a [PendingWrite],
    ) -> Result<Self, StoreError> {
        let mut columns = Self::default();
        for write in writes.iter() {
            let (earliest, latest) = write.under.window();
            columns.records.push(&silos[write.first].0, &write.record)?;
            columns.previous_counts.push(write.previous_count);
            columns.ttls.push(write.under.silo_ttl_ms);
            columns.earliest.push(earliest);
            columns.latest.push(latest);
        }
        Ok(columns)
    }
}
