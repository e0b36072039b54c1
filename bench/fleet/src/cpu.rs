//! CPU time of the oracle's process and of every Postgres process on this machine, from /proc:
//! read before and after the measured window, divided by the requests served in it.

/// Clock ticks a second in /proc's figures (`USER_HZ`, 100 on every Linux ABI in use).
const TICKS_PER_SECOND: f64 = 100.0;

/// user + system seconds of process `pid`, if it is there.
pub fn process_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let user: f64 = fields.get(11)?.parse().ok()?;
    let system: f64 = fields.get(12)?.parse().ok()?;
    Some((user + system) / TICKS_PER_SECOND)
}

/// user + system seconds of every process named `name` (Postgres' backends come and go; each
/// is counted while it lives, so take the figure over a window in which the connections stay).
pub fn seconds_of_all_named(name: &str) -> f64 {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0.0;
    };
    entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|comm| comm.trim() == name)
        })
        .filter_map(process_seconds)
        .sum()
}

/// CPU seconds of the oracle, of Postgres and of this generator now.
#[derive(Debug, Clone, Copy, Default)]
pub struct Sample {
    pub oracle: f64,
    pub postgres: f64,
    pub generator: f64,
}

impl Sample {
    pub fn take(oracle_pid: Option<u32>) -> Self {
        Self {
            oracle: oracle_pid.and_then(process_seconds).unwrap_or(0.0),
            postgres: seconds_of_all_named("postgres"),
            generator: process_seconds(std::process::id()).unwrap_or(0.0),
        }
    }
}
