//! Which replica runs a cluster's background work (its sweep, drains, rebalancer and
//! repartitioner): rendezvous hashing of the cluster's name over the live replicas.
//!
//! Every replica scores each (cluster, replica) pair with the same hash and the highest score
//! owns the cluster. Replicas that see the same live set agree without talking to each other;
//! clusters spread evenly; and when a replica joins or leaves, only the clusters it wins or
//! held move (about 1/R of them), the rest stay where they are. The cluster lease still decides
//! who acts: ownership says who *asks* for it, so two replicas that briefly disagree on the live
//! set contend for a lease instead of both working.

use xxhash_rust::xxh3::xxh3_64;

/// The score of `replica` for `cluster`: the same on every replica, for every build.
fn score(cluster: &str, replica: &str) -> u64 {
    let mut key = Vec::with_capacity(cluster.len() + 1 + replica.len());
    key.extend_from_slice(cluster.as_bytes());
    // A separator that cannot occur in a cluster name, so that ("ab", "c") and ("a", "bc") differ.
    key.push(b'/');
    key.extend_from_slice(replica.as_bytes());
    xxh3_64(&key)
}

/// The replica among `replicas` that owns `cluster` (`None` when there is none). Ties (a 64-bit
/// collision) go to the smaller replica id, so the answer never depends on the list's order.
pub fn owner<'a>(cluster: &str, replicas: &'a [String]) -> Option<&'a str> {
    replicas
        .iter()
        .map(|replica| (score(cluster, replica), std::cmp::Reverse(replica)))
        .max()
        .map(|(_, std::cmp::Reverse(replica))| replica.as_str())
}

/// Whether `me` owns `cluster` among `replicas`.
pub fn owns(me: &str, cluster: &str, replicas: &[String]) -> bool {
    owner(cluster, replicas) == Some(me)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn replicas(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| (*n).to_owned()).collect()
    }

    fn clusters(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("cluster-{i}")).collect()
    }

    #[test]
    fn three_replicas_share_three_thousand_clusters_evenly() {
        let live = replicas(&["oracle-a", "oracle-b", "oracle-c"]);
        for replica in &live {
            let owned = clusters(3_000)
                .iter()
                .filter(|c| owns(replica, c, &live))
                .count();
            assert!((900..=1_100).contains(&owned), "{replica} owns {owned}");
        }
    }

    #[test]
    fn no_replica_no_owner() {
        assert_eq!(owner("demo", &[]), None);
    }

    proptest! {
        #[test]
        fn every_cluster_has_one_owner_whatever_the_order_of_the_list(
            names in prop::collection::btree_set("[a-z]{1,8}", 1..6),
            cluster in "[a-z0-9-]{1,20}",
        ) {
            let live: Vec<String> = names.into_iter().collect();
            let mut reversed = live.clone();
            reversed.reverse();
            let owner = owner(&cluster, &live).unwrap().to_owned();
            prop_assert!(live.contains(&owner));
            prop_assert_eq!(super::owner(&cluster, &reversed), Some(owner.as_str()));
            let owning = live.iter().filter(|r| owns(r, &cluster, &live)).count();
            prop_assert_eq!(owning, 1);
        }

        #[test]
        fn a_replica_that_joins_takes_clusters_only_for_itself(
            names in prop::collection::btree_set("[a-z]{1,8}", 1..6),
            joining in "[A-Z]{1,8}",
        ) {
            let before: Vec<String> = names.into_iter().collect();
            let mut after = before.clone();
            after.push(joining.clone());
            for cluster in clusters(200) {
                let was = owner(&cluster, &before).unwrap();
                let now = owner(&cluster, &after).unwrap();
                prop_assert!(now == was || now == joining, "{cluster} moved from {was} to {now}");
            }
        }

        #[test]
        fn a_replica_that_leaves_gives_up_only_its_own_clusters(
            names in prop::collection::btree_set("[a-z]{1,8}", 2..6),
            leaving in 0usize..6,
        ) {
            let before: Vec<String> = names.into_iter().collect();
            let gone = before[leaving % before.len()].clone();
            let after: Vec<String> = before.iter().filter(|r| **r != gone).cloned().collect();
            for cluster in clusters(200) {
                let was = owner(&cluster, &before).unwrap();
                if was != gone {
                    prop_assert_eq!(owner(&cluster, &after), Some(was));
                }
            }
        }
    }
}
