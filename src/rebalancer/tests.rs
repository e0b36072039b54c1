//! The state machine over an injected clock: Orleans' worked trace (reference 4.4) in compat mode,
//! the oracle's planner on a skewed cluster, completion, stagnation, suspension and the zero-memory
//! skip.

use super::*;
use crate::clock::Millis;

const MIB: f64 = 1_048_576.0;

fn cluster(counts: &[u64], memory: Option<f64>) -> Vec<SiloLoad> {
    counts
        .iter()
        .enumerate()
        .map(|(i, &n)| SiloLoad {
            silo: format!("S{}", i + 1),
            activations: n,
            memory,
        })
        .collect()
}

fn compat() -> RebalancerOptions {
    RebalancerOptions {
        orleans_compat: true,
        ..RebalancerOptions::default()
    }
}

/// One cycle of the trace: entropy, deviation, moves (from, to, δ), counts after.
type TraceRow = (
    f64,
    f64,
    &'static [(&'static str, &'static str, u64)],
    [u64; 4],
);

#[test]
fn compat_mode_reproduces_the_orleans_trace() {
    // Reference 4.4: 300/30/180/100 activations, 100 MiB each, δ applied in full every cycle.
    let expected: [TraceRow; 7] = [
        (
            1.153754,
            0.167742,
            &[("S1", "S2", 8), ("S3", "S4", 2)],
            [292, 38, 178, 102],
        ),
        (
            1.184041,
            0.145895,
            &[("S1", "S2", 15), ("S3", "S4", 4)],
            [277, 53, 174, 106],
        ),
        (
            1.232675,
            0.110813,
            &[("S1", "S2", 19), ("S3", "S4", 6)],
            [258, 72, 168, 112],
        ),
        (
            1.282506,
            0.074868,
            &[("S1", "S2", 21), ("S3", "S4", 6)],
            [237, 93, 162, 118],
        ),
        (
            1.323962,
            0.044964,
            &[("S1", "S2", 20), ("S3", "S4", 6)],
            [217, 113, 156, 124],
        ),
        (
            1.352598,
            0.024307,
            &[("S1", "S2", 17), ("S3", "S4", 5)],
            [200, 130, 151, 129],
        ),
        (
            1.369249,
            0.012296,
            &[("S1", "S4", 13), ("S3", "S2", 4)],
            [187, 134, 147, 142],
        ),
    ];
    let options = compat();
    let mut loads = cluster(&[300, 30, 180, 100], Some(100.0 * MIB));
    let mut rebalancer = Rebalancer::new(0, &options);
    for (i, (entropy, deviation, moves, after)) in expected.iter().enumerate() {
        let now = i as Millis * 15_000;
        let report = rebalancer.run_cycle(now, &options, &loads, 4);
        assert_eq!(report.cycle, i as u32 + 1);
        assert_eq!(report.outcome, CycleOutcome::Migrated);
        assert!(
            (report.entropy - entropy).abs() < 1e-6,
            "cycle {}: H {}",
            i + 1,
            report.entropy
        );
        assert!(
            (report.deviation - deviation).abs() < 1e-6,
            "cycle {}",
            i + 1
        );
        assert!((report.max_entropy - 4f64.ln()).abs() < 1e-12);
        let planned: Vec<(&str, &str, u64)> = report
            .moves
            .iter()
            .map(|m| (m.from.as_str(), m.to.as_str(), m.count))
            .collect();
        assert_eq!(&planned, moves, "cycle {}", i + 1);
        plan::apply_moves(&mut loads, &report.moves);
        let counts: Vec<u64> = loads.iter().map(|l| l.activations).collect();
        assert_eq!(counts, after, "cycle {}", i + 1);
    }
    assert_eq!(rebalancer.sessions_started, 1);
    assert_eq!(
        rebalancer.tallies["S1"].dispersed,
        8 + 15 + 19 + 21 + 20 + 17 + 13
    );
    assert_eq!(
        rebalancer.tallies["S2"].acquired,
        8 + 15 + 19 + 21 + 20 + 17 + 4
    );
}

#[test]
fn the_oracles_planner_balances_a_skewed_cluster_in_one_cycle_with_the_fewest_moves() {
    let options = RebalancerOptions::default();
    let mut loads = cluster(&[3000, 300, 1800, 1000], None);
    let mut rebalancer = Rebalancer::new(0, &options);
    let first = rebalancer.run_cycle(0, &options, &loads, 4);
    assert_eq!(first.outcome, CycleOutcome::Migrated);
    // Ideal 1525 each: the minimum is (3000 − 1525) + (1800 − 1525) = 1750 moves.
    assert_eq!(first.moves.iter().map(|m| m.count).sum::<u64>(), 1_750);
    plan::apply_moves(&mut loads, &first.moves);
    assert!(loads.iter().all(|l| l.activations == 1_525));
    let second = rebalancer.run_cycle(15_000, &options, &loads, 4);
    assert_eq!(second.outcome, CycleOutcome::Completed);
    assert!(second.deviation < second.allowed_deviation);
    assert!(rebalancer.session.is_none());
}

#[test]
fn a_limited_planner_needs_more_cycles_and_each_narrows_the_gap() {
    let options = RebalancerOptions {
        activation_migration_count_limit: 700,
        ..RebalancerOptions::default()
    };
    let mut loads = cluster(&[3000, 300, 1800, 1000], None);
    let mut rebalancer = Rebalancer::new(0, &options);
    let mut cycles = 0;
    let mut deviation = f64::MAX;
    loop {
        let report = rebalancer.run_cycle(cycles * 15_000, &options, &loads, 4);
        cycles += 1;
        if report.outcome == CycleOutcome::Completed {
            break;
        }
        assert_eq!(report.outcome, CycleOutcome::Migrated);
        assert!(
            report.deviation < deviation,
            "every cycle lowers the deviation"
        );
        deviation = report.deviation;
        assert!(report.moves.iter().map(|m| m.count).sum::<u64>() <= 700);
        plan::apply_moves(&mut loads, &report.moves);
    }
    // 1750 moves at 700 per cycle: three cycles of moves, then the one that finds it balanced.
    assert_eq!(cycles, 4);
}

#[test]
fn a_completed_session_rests_one_period_and_the_trigger_starts_the_next() {
    let options = RebalancerOptions::default();
    let balanced = cluster(&[100, 100], Some(MIB));
    let mut rebalancer = Rebalancer::new(0, &options);
    // Nothing before the due time.
    assert!(rebalancer
        .tick(59_999, &options, || (balanced.clone(), 2))
        .is_none());
    let first = rebalancer
        .tick(60_000, &options, || (balanced.clone(), 2))
        .unwrap();
    assert_eq!((first.session, first.outcome), (1, CycleOutcome::Completed));
    assert_eq!(rebalancer.suspension_left(60_000), Some(15_000));
    // The trigger looks every 7.5 s; the rest lasts 15 s.
    assert!(rebalancer
        .tick(67_500, &options, || (balanced.clone(), 2))
        .is_none());
    assert!(rebalancer
        .tick(74_999, &options, || (balanced.clone(), 2))
        .is_none());
    let next = rebalancer
        .tick(75_000, &options, || (balanced.clone(), 2))
        .unwrap();
    assert_eq!(next.session, 2);
}

#[test]
fn a_session_stops_on_the_fourth_stagnant_check_and_backs_off() {
    // Compat moves that are never carried out leave the entropy where it was.
    let options = compat();
    let loads = cluster(&[300, 30, 180, 100], Some(100.0 * MIB));
    let mut rebalancer = Rebalancer::new(0, &options);
    let outcomes: Vec<CycleOutcome> = (0..5)
        .map(|i| {
            rebalancer
                .run_cycle(i * 15_000, &options, &loads, 4)
                .outcome
        })
        .collect();
    assert_eq!(
        outcomes,
        [
            CycleOutcome::Migrated,
            CycleOutcome::Stagnant,
            CycleOutcome::Stagnant,
            CycleOutcome::Stagnant,
            CycleOutcome::Stopped
        ]
    );
    assert!(rebalancer.session.is_none());
    assert_eq!(rebalancer.failed_sessions, 1);
    assert_eq!(rebalancer.suspension_left(60_000), Some(15_000));
}

#[test]
fn the_latest_suspension_wins_and_resume_starts_a_session() {
    let options = RebalancerOptions::default();
    let loads = cluster(&[300, 30], Some(MIB));
    let mut rebalancer = Rebalancer::new(0, &options);
    rebalancer.suspend(0, Some(10_000));
    rebalancer.suspend(0, Some(2_000));
    assert_eq!(rebalancer.suspension_left(0), Some(2_000));
    rebalancer.suspend(0, None);
    assert_eq!(rebalancer.suspension_left(1_000_000_000), Some(Millis::MAX));
    assert!(rebalancer
        .tick(1_000_000_000, &options, || (loads.clone(), 2))
        .is_none());
    rebalancer.start_session(1_000_000_000);
    assert_eq!(rebalancer.suspension_left(1_000_000_000), None);
    let report = rebalancer
        .tick(1_000_000_000, &options, || (loads.clone(), 2))
        .unwrap();
    assert_eq!(report.outcome, CycleOutcome::Migrated);
}

#[test]
fn compat_skips_a_cycle_when_a_silo_reports_no_memory_and_so_does_a_lone_silo() {
    let options = compat();
    let mut loads = cluster(&[300, 30, 180], Some(MIB));
    loads[1].memory = None;
    let mut rebalancer = Rebalancer::new(0, &options);
    let report = rebalancer.run_cycle(0, &options, &loads, 3);
    assert_eq!((report.outcome, report.cycle), (CycleOutcome::Skipped, 0));
    // The oracle's planner balances by counts alone then.
    let report = rebalancer.run_cycle(0, &RebalancerOptions::default(), &loads, 3);
    assert_eq!(report.outcome, CycleOutcome::Migrated);
    let lone = cluster(&[300], Some(MIB));
    let mut rebalancer = Rebalancer::new(0, &options);
    assert_eq!(
        rebalancer.run_cycle(0, &options, &lone, 1).outcome,
        CycleOutcome::Skipped
    );
}

#[test]
fn reports_are_bounded_and_the_state_round_trips_as_json() {
    let options = compat();
    let loads = cluster(&[300, 30, 180, 100], Some(100.0 * MIB));
    let mut rebalancer = Rebalancer::new(0, &options);
    for i in 0..(KEPT as Millis + 5) {
        rebalancer.run_cycle(i * 15_000, &options, &loads, 4);
    }
    assert_eq!(rebalancer.reports.len(), KEPT);
    let stored = serde_json::to_value(&rebalancer).unwrap();
    let restored: Rebalancer = serde_json::from_value(stored).unwrap();
    assert_eq!(restored, rebalancer);
}

const KEPT: usize = session::KEPT_REPORTS;
