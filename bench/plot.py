"""Draws bench/run.sh's figures as one SVG (standard library only): requests/s and p99 per
scenario, and requests/s and p99 over concurrency.

    python3 bench/plot.py bench/results/<time> > plot.svg
"""

import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from report import SCENARIOS, read, read_sweep  # noqa: E402

W, H, PAD = 460, 300, 56
COLOURS = {"floor": "#888888", "existing": "#1f77b4", "new": "#d62728"}


def esc(text):
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def bars(x0, y0, title, labels, values, unit, goal=None):
    top = max(values + ([goal] if goal else [])) * 1.15 or 1
    out = [f'<text x="{x0 + W / 2}" y="{y0 + 18}" text-anchor="middle" font-weight="bold">{esc(title)}</text>']
    step = (W - PAD - 40) / len(values)
    for i, (label, value) in enumerate(zip(labels, values)):
        h = (H - 2 * PAD) * value / top
        x = x0 + PAD + i * step
        y = y0 + H - PAD - h
        out.append(f'<rect x="{x + 4:.1f}" y="{y:.1f}" width="{step - 8:.1f}" height="{h:.1f}" fill="#1f77b4"/>')
        out.append(f'<text x="{x + step / 2:.1f}" y="{y - 4:.1f}" text-anchor="middle" font-size="10">{value:,.0f}{unit}</text>'
                   if value >= 10 else
                   f'<text x="{x + step / 2:.1f}" y="{y - 4:.1f}" text-anchor="middle" font-size="10">{value:.1f}{unit}</text>')
        out.append(f'<text transform="translate({x + step / 2:.1f},{y0 + H - PAD + 12}) rotate(30)" font-size="10">{esc(label)}</text>')
    out.append(f'<line x1="{x0 + PAD}" y1="{y0 + H - PAD}" x2="{x0 + W - 10}" y2="{y0 + H - PAD}" stroke="black"/>')
    if goal:
        y = y0 + H - PAD - (H - 2 * PAD) * goal / top
        out.append(f'<line x1="{x0 + PAD}" y1="{y:.1f}" x2="{x0 + W - 10}" y2="{y:.1f}" stroke="#d62728" stroke-dasharray="4 3"/>')
        out.append(f'<text x="{x0 + W - 10}" y="{y - 3:.1f}" text-anchor="end" font-size="10" fill="#d62728">goal {goal:g}{unit}</text>')
    return out


def lines(x0, y0, title, series, index, unit, goal=None):
    conns = sorted({c for per in series.values() for c in per})
    top = max([float(per[c][index]) for per in series.values() for c in per] + ([goal] if goal else [])) * 1.15 or 1
    lo, hi = math.log2(conns[0]), math.log2(conns[-1]) if len(conns) > 1 else math.log2(conns[0]) + 1

    def px(c):
        return x0 + PAD + (W - PAD - 20) * (math.log2(c) - lo) / ((hi - lo) or 1)

    def py(v):
        return y0 + H - PAD - (H - 2 * PAD) * v / top

    out = [f'<text x="{x0 + W / 2}" y="{y0 + 18}" text-anchor="middle" font-weight="bold">{esc(title)}</text>',
           f'<line x1="{x0 + PAD}" y1="{y0 + H - PAD}" x2="{x0 + W - 10}" y2="{y0 + H - PAD}" stroke="black"/>',
           f'<line x1="{x0 + PAD}" y1="{y0 + PAD}" x2="{x0 + PAD}" y2="{y0 + H - PAD}" stroke="black"/>',
           f'<text x="{x0 + W / 2}" y="{y0 + H - PAD + 30}" text-anchor="middle" font-size="11">connections</text>']
    for c in conns:
        out.append(f'<text x="{px(c):.1f}" y="{y0 + H - PAD + 14}" text-anchor="middle" font-size="10">{c}</text>')
    for k in range(5):
        v = top / 1.15 * k / 4
        out.append(f'<text x="{x0 + PAD - 4}" y="{py(v) + 3:.1f}" text-anchor="end" font-size="10">{v:,.0f}{unit}</text>'
                   if top > 20 else
                   f'<text x="{x0 + PAD - 4}" y="{py(v) + 3:.1f}" text-anchor="end" font-size="10">{v:.1f}{unit}</text>')
    if goal:
        out.append(f'<line x1="{x0 + PAD}" y1="{py(goal):.1f}" x2="{x0 + W - 20}" y2="{py(goal):.1f}" stroke="#d62728" stroke-dasharray="4 3"/>')
        out.append(f'<text x="{x0 + PAD + 4}" y="{py(goal) - 3:.1f}" font-size="10" fill="#d62728">goal {goal:g}{unit}</text>')
    for n, (name, per) in enumerate(series.items()):
        colour = COLOURS.get(name, "#2ca02c")
        points = " ".join(f"{px(c):.1f},{py(float(per[c][index])):.1f}" for c in sorted(per))
        out.append(f'<polyline points="{points}" fill="none" stroke="{colour}" stroke-width="2"/>')
        out.append(f'<text x="{x0 + W - 90}" y="{y0 + 36 + 14 * n}" fill="{colour}" font-size="11">{esc(name)}</text>')
    return out


def main():
    out = Path(sys.argv[1])
    rows = read(out / "results.txt")
    names = [n for n in SCENARIOS if n in rows and n != "pgbench"]
    parts = bars(0, 0, "requests/s per scenario (64 connections)", names + (["pgbench"] if "pgbench" in rows else []),
                 [float(rows[n][0]) for n in names] + ([float(rows["pgbench"][0])] if "pgbench" in rows else []), "")
    parts += bars(W, 0, "p99 ms per scenario (64 connections)", names, [float(rows[n][2]) for n in names], " ms",
                  goal=5)
    sweep = read_sweep(out / "sweep.txt")
    height = H
    if sweep:
        parts += lines(0, H, "requests/s over concurrency", sweep, 0, "")
        parts += lines(W, H, "p99 ms over concurrency", sweep, 2, " ms", goal=5)
        height = 2 * H
    print(f'<svg xmlns="http://www.w3.org/2000/svg" width="{2 * W}" height="{height}" '
          f'font-family="sans-serif" font-size="12"><rect width="100%" height="100%" fill="white"/>')
    print("\n".join(parts))
    print("</svg>")


if __name__ == "__main__":
    main()
