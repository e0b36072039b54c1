//! Each side-by-side run goes in a network namespace of its own whose only interface is loopback.
//!
//! rio-rs names a server by the machine's first non-loopback address (`Server::try_local_addr`,
//! from netwatch's `LocalAddresses`), so on a machine with a network interface its servers
//! listen on and are dialled at that address, and a test's traffic leaves loopback. In a namespace
//! with loopback alone there is no such address and rio-rs falls back to the listener's own
//! (127.0.0.1): everything a run starts — its Postgres server, the oracle, the rio-rs servers and
//! the clients — talks over that namespace's loopback. (`scripts/loopback-guard.sh`, around the
//! whole suite, fails a run whose processes send anything off loopback.)
//!
//! A test re-runs itself, alone, in the namespace: as root with `unshare --net`, otherwise in a
//! user namespace mapped to the caller (`unshare --map-current-user --keep-caps --net`), where
//! its Postgres runs as the caller.

use std::process::Command;

/// Set in the re-run inside the namespace.
const INSIDE: &str = "PLACEMENT_ORACLE_TEST_NETNS";

/// Whether this process is the re-run inside the test's namespace.
pub fn inside() -> bool {
    std::env::var_os(INSIDE).is_some()
}

/// Runs the test `name` of this binary again in a network namespace of its own with only loopback
/// up, and panics unless it passes. Call it first in the test, and run the body only when
/// [`inside`].
pub fn run_inside(name: &str) {
    let binary = std::env::current_exe().expect("the test binary's path");
    let mut command = Command::new("unshare");
    if !super::postgres_server::running_as_root() {
        command.args(["--map-current-user", "--keep-caps"]);
    }
    let status = command
        .args([
            "--net",
            "--",
            "sh",
            "-c",
            r#"ip link set lo up && exec "$@""#,
            "sh",
        ])
        .arg(&binary)
        .args([name, "--exact", "--nocapture", "--test-threads", "1"])
        .env(INSIDE, "1")
        .status()
        .unwrap_or_else(|e| {
            panic!("cannot run unshare (util-linux) and ip (iproute2) for {name}: {e}")
        });
    assert!(
        status.success(),
        "{name}, in a network namespace of its own: {status} (its output is above)"
    );
}
