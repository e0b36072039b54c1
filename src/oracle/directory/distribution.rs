//! How a cluster's grains are spread over its silos, and where the open migrations are taking
//! them: what an operator's page draws. Three store reads whatever the number of silos: the
//! membership, one count of directory entries per silo and one of open migrations per pair.

use std::collections::{BTreeMap, HashMap};

use super::{Directory, OracleError};
use crate::cluster::ClusterName;
use crate::telemetry::metric;

/// A silo's share of the directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SiloShare {
    pub silo: String,
    /// Directory entries naming the silo.
    pub activations: u64,
    /// Open migrations taking grains away from it, and bringing grains to it.
    pub migrating_out: u64,
    pub migrating_in: u64,
}

/// Open migrations from one silo to another.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Flow {
    pub from: String,
    pub to: String,
    pub count: u64,
}

/// The directory's spread over the silos.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Distribution {
    /// Every directory entry of the cluster.
    pub activations: u64,
    /// Every silo that is a member (not dead) or still named by an entry or a migration, by id.
    pub silos: Vec<SiloShare>,
    /// By source, then target.
    pub flows: Vec<Flow>,
}

impl Distribution {
    /// Puts the counts together: `members` are listed even when nothing names them yet (a silo
    /// that just joined holds no grains, and that is what an operator wants to see).
    pub fn from_counts<'a>(
        members: impl IntoIterator<Item = &'a str>,
        activations: HashMap<String, u64>,
        open: Vec<(String, String, u64)>,
    ) -> Self {
        fn share<'m>(silos: &'m mut BTreeMap<String, SiloShare>, silo: &str) -> &'m mut SiloShare {
            silos.entry(silo.to_owned()).or_insert_with(|| SiloShare {
                silo: silo.to_owned(),
                activations: 0,
                migrating_out: 0,
                migrating_in: 0,
            })
        }
        let mut silos = BTreeMap::new();
        for silo in members {
            share(&mut silos, silo);
        }
        let mut total = 0;
        for (silo, count) in &activations {
            share(&mut silos, silo).activations = *count;
            total += count;
        }
        let mut flows: Vec<Flow> = open
            .into_iter()
            .map(|(from, to, count)| Flow { from, to, count })
            .collect();
        for flow in &flows {
            share(&mut silos, &flow.from).migrating_out += flow.count;
            share(&mut silos, &flow.to).migrating_in += flow.count;
        }
        flows.sort_by(|a, b| (&a.from, &a.to).cmp(&(&b.from, &b.to)));
        Self {
            activations: total,
            silos: silos.into_values().collect(),
            flows,
        }
    }
}

impl Directory {
    /// The cluster's directory spread over its silos, with the migrations under way.
    pub async fn distribution(&self, cluster: &ClusterName) -> Result<Distribution, OracleError> {
        let membership = self.views.read(cluster).await?;
        let activations = self
            .store
            .activation_counts(cluster)
            .await
            .inspect_err(|_| metric::store_error("activation_counts"))?;
        let open = self
            .store
            .open_migration_counts(cluster)
            .await
            .inspect_err(|_| metric::store_error("open_migration_counts"))?;
        let members = membership.silos.iter().map(|silo| silo.id.as_str());
        Ok(Distribution::from_counts(members, activations, open))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_without_grains_are_listed_and_flows_count_on_both_ends() {
        let counts = HashMap::from([("a".to_owned(), 7), ("gone".to_owned(), 2)]);
        let open = vec![
            ("a".to_owned(), "c".to_owned(), 3),
            ("a".to_owned(), "b".to_owned(), 1),
        ];
        let distribution = Distribution::from_counts(["c", "a", "b"], counts, open);
        assert_eq!(distribution.activations, 9);
        let shares: Vec<(&str, u64, u64, u64)> = distribution
            .silos
            .iter()
            .map(|s| {
                (
                    s.silo.as_str(),
                    s.activations,
                    s.migrating_out,
                    s.migrating_in,
                )
            })
            .collect();
        assert_eq!(
            shares,
            [
                ("a", 7, 4, 0),
                ("b", 0, 0, 1),
                ("c", 0, 0, 3),
                ("gone", 2, 0, 0)
            ]
        );
        let flows: Vec<(&str, &str)> = distribution
            .flows
            .iter()
            .map(|f| (f.from.as_str(), f.to.as_str()))
            .collect();
        assert_eq!(flows, [("a", "b"), ("a", "c")]);
    }
}
