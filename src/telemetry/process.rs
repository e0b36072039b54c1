//! The process's own figures, in Prometheus' standard `process_*` names: CPU time, memory, open
//! files, threads and start time, read from `/proc/self` at each scrape. What an on-call engineer
//! asks first of a replica that misbehaves (is it leaking memory, out of file descriptors, spinning?),
//! which the metrics crate does not collect.
//!
//! Rendered as text and appended to the registry's, because CPU seconds are fractional and a
//! counter of the metrics crate holds whole numbers. On a system without `/proc` nothing is written.

use std::fmt::Write;

/// Clock ticks per second in `/proc/self/stat`: `USER_HZ`, 100 on every Linux ABI the oracle runs
/// on (it is fixed by the kernel's user-space interface, whatever the kernel's own tick).
const TICKS_PER_SECOND: f64 = 100.0;

/// The process metrics in the Prometheus text format (empty where `/proc` cannot be read).
pub fn render() -> String {
    let mut out = String::new();
    let stat = std::fs::read_to_string("/proc/self/stat").ok();
    let status = std::fs::read_to_string("/proc/self/status").ok();
    if let Some(seconds) = stat.as_deref().and_then(cpu_seconds) {
        family(
            &mut out,
            "process_cpu_seconds_total",
            "counter",
            "Total user and system CPU time spent, in seconds",
            seconds,
        );
    }
    let kib = |field| status.as_deref().and_then(|s| status_field(s, field));
    if let Some(rss) = kib("VmRSS:") {
        family(
            &mut out,
            "process_resident_memory_bytes",
            "gauge",
            "Resident memory size in bytes",
            rss * 1024.0,
        );
    }
    if let Some(size) = kib("VmSize:") {
        family(
            &mut out,
            "process_virtual_memory_bytes",
            "gauge",
            "Virtual memory size in bytes",
            size * 1024.0,
        );
    }
    if let Some(threads) = status.as_deref().and_then(|s| status_field(s, "Threads:")) {
        family(
            &mut out,
            "process_threads",
            "gauge",
            "Number of OS threads in the process",
            threads,
        );
    }
    if let Ok(entries) = std::fs::read_dir("/proc/self/fd") {
        let open = entries.count() as f64;
        family(
            &mut out,
            "process_open_fds",
            "gauge",
            "Number of open file descriptors",
            open,
        );
    }
    if let Some(max) = std::fs::read_to_string("/proc/self/limits")
        .ok()
        .as_deref()
        .and_then(max_open_files)
    {
        family(
            &mut out,
            "process_max_fds",
            "gauge",
            "Maximum number of open file descriptors (the soft limit)",
            max,
        );
    }
    let boot = std::fs::read_to_string("/proc/stat")
        .ok()
        .as_deref()
        .and_then(|s| status_field(s, "btime"));
    if let (Some(boot), Some(started)) = (boot, stat.as_deref().and_then(start_ticks)) {
        let start = boot + started / TICKS_PER_SECOND;
        family(
            &mut out,
            "process_start_time_seconds",
            "gauge",
            "Start time of the process since the Unix epoch, in seconds",
            start,
        );
    }
    out
}

fn family(out: &mut String, name: &str, kind: &str, help: &str, value: f64) {
    let _ = write!(
        out,
        "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}\n"
    );
}

/// The fields of `/proc/self/stat` after the command name (which may hold spaces and parentheses,
/// so it is skipped up to its last `)`): index 0 is the state, the kernel's field 3.
fn stat_fields(stat: &str) -> Vec<&str> {
    stat.rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default()
}

/// utime + stime (the kernel's fields 14 and 15), in seconds.
fn cpu_seconds(stat: &str) -> Option<f64> {
    let fields = stat_fields(stat);
    let user: f64 = fields.get(11)?.parse().ok()?;
    let system: f64 = fields.get(12)?.parse().ok()?;
    Some((user + system) / TICKS_PER_SECOND)
}

/// starttime (the kernel's field 22): ticks after boot.
fn start_ticks(stat: &str) -> Option<f64> {
    stat_fields(stat).get(19)?.parse().ok()
}

/// The number after `name` on its line (`VmRSS:  1234 kB`, `btime 1700000000`).
fn status_field(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix(name))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
}

/// The soft limit of `Max open files` in `/proc/self/limits`.
fn max_open_files(limits: &str) -> Option<f64> {
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line.trim_start_matches("Max open files")
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_are_read_from_the_kernels_formats() {
        // A command name with a space and a parenthesis, as a process may be named.
        let stat = "4242 (placement (o) x) S 1 4242 4242 0 -1 4194560 2000 0 0 0 250 50 0 0 20 0 \
                    9 0 123456 1000000 2500 18446744073709551615";
        assert_eq!(cpu_seconds(stat), Some(3.0));
        assert_eq!(start_ticks(stat), Some(123_456.0));
        let status = "Name:\tplacement\nVmSize:\t  20480 kB\nVmRSS:\t   4096 kB\nThreads:\t7\n";
        assert_eq!(status_field(status, "VmRSS:"), Some(4096.0));
        assert_eq!(status_field(status, "Threads:"), Some(7.0));
        let limits = "Limit                     Soft Limit           Hard Limit           Units\n\
                      Max open files            1024                 524288               files\n";
        assert_eq!(max_open_files(limits), Some(1024.0));
    }

    #[test]
    fn this_process_renders_every_family_once() {
        let text = render();
        for name in [
            "process_cpu_seconds_total",
            "process_resident_memory_bytes",
            "process_virtual_memory_bytes",
            "process_threads",
            "process_open_fds",
            "process_max_fds",
            "process_start_time_seconds",
        ] {
            assert_eq!(
                text.matches(&format!("# TYPE {name} ")).count(),
                1,
                "{name} in:\n{text}"
            );
        }
        let rss: f64 = text
            .lines()
            .find_map(|l| l.strip_prefix("process_resident_memory_bytes "))
            .unwrap()
            .parse()
            .unwrap();
        assert!(
            rss > 1_000_000.0,
            "a running test process holds over a megabyte: {rss}"
        );
    }
}
