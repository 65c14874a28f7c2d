#!/usr/bin/env python3
"""Draws a soak run's samples.tsv as an SVG: RSS, queue depth and lag p99 over time, with a
dashed line where the load stopped (the optional third argument, in seconds).

    python3 examples/soak/chart.py target/soak-…/samples.tsv docs/soak.svg 600
"""
import sys

PANELS = [
    ("rss_mib", "gateway RSS (MiB)", "#2b6cb0"),
    ("queue_depth", "queue depth (deliveries waiting)", "#2f855a"),
    ("lag_p99_ms", "attempt lateness p99 per 10 s window (ms)", "#c05621"),
]
WIDTH, PANEL_H, LEFT, RIGHT, TOP, GAP = 760, 150, 70, 20, 40, 50


def read(path):
    with open(path) as f:
        header = f.readline().split()
        rows = [dict(zip(header, line.split())) for line in f if line.strip()]
    return rows


def number(value):
    try:
        return float(value)
    except ValueError:
        return None


def nice_max(v):
    if v <= 0:
        return 1.0
    step = 10 ** (len(str(int(v))) - 1)
    return (int(v / step) + 1) * step


def panel(rows, key, title, color, top, t_max, load_end):
    points = [(number(r["t_s"]), number(r[key])) for r in rows]
    points = [(t, v) for t, v in points if t is not None and v is not None]
    v_max = nice_max(max((v for _, v in points), default=0))
    plot_w = WIDTH - LEFT - RIGHT
    x = lambda t: LEFT + plot_w * t / t_max
    y = lambda v: top + PANEL_H - PANEL_H * v / v_max
    out = [f'<text x="{LEFT}" y="{top - 8}" font-weight="bold">{title}</text>']
    out.append(f'<rect x="{LEFT}" y="{top}" width="{plot_w}" height="{PANEL_H}" fill="none" stroke="#ccc"/>')
    for frac in (0, 0.5, 1):
        v = v_max * frac
        out.append(f'<text x="{LEFT - 6}" y="{y(v) + 4:.1f}" text-anchor="end" fill="#555">{v:g}</text>')
        out.append(f'<line x1="{LEFT}" x2="{LEFT + plot_w}" y1="{y(v):.1f}" y2="{y(v):.1f}" stroke="#eee"/>')
    if load_end is not None:
        out.append(
            f'<line x1="{x(load_end):.1f}" x2="{x(load_end):.1f}" y1="{top}" y2="{top + PANEL_H}" '
            f'stroke="#888" stroke-dasharray="4 3"/>'
        )
        out.append(f'<text x="{x(load_end) + 4:.1f}" y="{top + 12}" fill="#888">load stops</text>')
    path = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in points)
    out.append(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="1.8"/>')
    return out


def main():
    rows = read(sys.argv[1])
    load_end = float(sys.argv[3]) if len(sys.argv) > 3 else None
    t_max = nice_max(max(number(r["t_s"]) for r in rows))
    height = TOP + len(PANELS) * (PANEL_H + GAP) + 10
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
        f'font-family="sans-serif" font-size="12">',
        f'<rect width="{WIDTH}" height="{height}" fill="white"/>',
    ]
    for i, (key, title, color) in enumerate(PANELS):
        top = TOP + i * (PANEL_H + GAP)
        out += panel(rows, key, title, color, top, t_max, load_end)
        bottom = top + PANEL_H
        for frac in (0, 0.25, 0.5, 0.75, 1):
            t = t_max * frac
            xx = LEFT + (WIDTH - LEFT - RIGHT) * frac
            out.append(f'<text x="{xx:.1f}" y="{bottom + 15}" text-anchor="middle" fill="#555">{t:g} s</text>')
    out.append("</svg>")
    with open(sys.argv[2], "w") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
