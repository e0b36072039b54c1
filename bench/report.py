"""Turns bench/run.sh's raw figures into its table: each scenario beside the figure it is judged
against (the floor, pgbench's single-row insert, or the same scenario on the small directory), and
the CPU time each request cost the oracle and the Postgres server.

    python3 bench/report.py bench/results/<time>    # prints Markdown
"""

import sys
from pathlib import Path

# scenario: (what it is, the figure it is divided by)
SCENARIOS = {
    "floor": ("floor (`GET /healthz`)", None),
    "heartbeats": ("heartbeats, 1,000 silos, every load field", "floor"),
    "existing": ("placement, known grain (20k directory)", "floor"),
    "new": ("placement, new grain", "pgbench"),
    "new-fresh": ("placement, new grain, fresh database (no statistics)", "pgbench"),
    "racing": ("placement, new grain, four callers racing", "pgbench"),
    "existing-10M": ("placement, known grain, 10M-row directory", "existing"),
    "uniform-10M": ("placement, known grain drawn from all 10M rows", "existing"),
    "pgbench": ("pgbench single-row `INSERT … ON CONFLICT DO NOTHING`, fresh table", None),
}


def read(path):
    rows = {}
    if path.exists():
        for line in path.read_text().split("\n"):
            fields = line.split()
            if len(fields) >= 6:
                # Results written before the CPU columns have none.
                rows[fields[0]] = (fields[1:] + ["-", "-"])[:7]
    return rows


def number(text):
    try:
        return float(text)
    except ValueError:
        return None


def main():
    out = Path(sys.argv[1])
    rows = read(out / "results.txt")
    rate = {name: number(r[0]) for name, r in rows.items()}
    print("| scenario | requests/s | ratio | p50 ms | p99 ms | non-2xx | oracle CPU µs/request | Postgres CPU µs/request |")
    print("|---|---:|---|---:|---:|---:|---:|---:|")
    for name, (what, base) in SCENARIOS.items():
        if name not in rows:
            continue
        rps, p50, p99, errors, _, oracle_cpu, db_cpu = rows[name]
        ratio = ""
        if base and rate.get(base) and rate.get(name) is not None:
            ratio = f"{rate[name] / rate[base]:.2f} of {base}"
        if name == "pgbench":
            p50, p99 = f"{float(p50):.2f} (mean)", "–"
        else:
            p50, p99 = f"{float(p50):.2f}", f"{float(p99):.2f}"
        print(f"| {what} | {float(rps):,.0f} | {ratio} | {p50} | {p99} | {errors} | {oracle_cpu} | {db_cpu} |")
    sweep = read_sweep(out / "sweep.txt")
    if sweep:
        print()
        print("Over concurrency (requests/s, p99 ms):")
        print()
        conns = sorted({c for per in sweep.values() for c in per})
        print("| scenario | " + " | ".join(f"{c} conns" for c in conns) + " |")
        print("|---|" + "---:|" * len(conns))
        for name, per in sweep.items():
            cells = [f"{float(per[c][0]):,.0f} / {float(per[c][2]):.1f}" if c in per else "" for c in conns]
            print(f"| {name} | " + " | ".join(cells) + " |")


def read_sweep(path):
    sweep = {}
    if path.exists():
        for line in path.read_text().split("\n"):
            fields = line.split()
            if len(fields) >= 6:
                sweep.setdefault(fields[0], {})[int(fields[5])] = fields[1:]
    return sweep


if __name__ == "__main__":
    main()
