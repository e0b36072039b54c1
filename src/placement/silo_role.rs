//! `silo_role`: random among the silos whose role is the grain's key (Orleans
//! `SiloRoleBasedPlacement`, §1.9), so `worker/gpu` goes to a silo with role `gpu`.

use crate::cluster::SiloRecord;

/// The candidates with role `role`.
pub fn candidates<'v>(compatible: &[&'v SiloRecord], role: &str) -> Vec<&'v SiloRecord> {
    compatible
        .iter()
        .copied()
        .filter(|silo| silo.profile.role.as_deref() == Some(role))
        .collect()
}
