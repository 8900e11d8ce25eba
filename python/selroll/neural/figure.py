"""An SVG of a pre-training run: the training loss by step and the greedy held-out success of each
evaluation (python3 -m selroll.neural figure WORK_DIR OUT.svg; standard library only)."""
import json
import sys


def svg(progress, title):
    w, h, ml, mr, mt, mb = 720, 360, 60, 60, 40, 50
    pw, ph = w - ml - mr, h - mt - mb
    losses = progress.get("losses", [])
    evals = progress.get("evals", [])
    max_step = max([l[0] for l in losses] + [e["step"] for e in evals] + [1])
    max_loss = max([l[1] for l in losses] + [0.5])
    def x(s):
        return ml + pw * s / max_step
    def yl(v):
        return mt + ph * (1 - v / max_loss)
    def ys(v):
        return mt + ph * (1 - v)
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">' % (w, h),
           '<rect width="100%" height="100%" fill="white"/>',
           '<text x="%d" y="22" font-size="14">%s</text>' % (ml, title),
           '<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#888"/>' % (ml, mt, pw, ph)]
    for i in range(5):
        v = max_loss * i / 4
        out.append('<text x="%d" y="%.1f" text-anchor="end" fill="#1f77b4">%.2f</text>' % (ml - 5, yl(v) + 4, v))
        out.append('<text x="%d" y="%.1f" fill="#d62728">%d%%</text>' % (w - mr + 5, ys(i / 4) + 4, 25 * i))
    for i in range(6):
        s = max_step * i / 5
        out.append('<text x="%.1f" y="%d" text-anchor="middle">%d</text>' % (x(s), h - mb + 16, s))
    out.append('<text x="%d" y="%d" text-anchor="middle">optimizer step</text>' % (ml + pw / 2, h - 12))
    if losses:
        pts = " ".join("%.1f,%.1f" % (x(s), yl(v)) for s, v, _ in losses)
        out.append('<polyline points="%s" fill="none" stroke="#1f77b4" stroke-width="1.5"/>' % pts)
    if evals:
        pts = " ".join("%.1f,%.1f" % (x(e["step"]), ys(e["success"])) for e in evals)
        out.append('<polyline points="%s" fill="none" stroke="#d62728" stroke-width="1.5"/>' % pts)
        for e in evals:
            out.append('<circle cx="%.1f" cy="%.1f" r="3" fill="#d62728"/>' % (x(e["step"]), ys(e["success"])))
    out.append('<text x="%d" y="%d" fill="#1f77b4">training loss (completion tokens)</text>' % (ml + 10, mt + 16))
    out.append('<text x="%d" y="%d" fill="#d62728">greedy success, 48 valid_unseen tasks</text>' % (ml + 10, mt + 32))
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main(argv):
    if len(argv) != 2:
        sys.stderr.write("usage: python3 -m selroll.neural figure WORK_DIR OUT.svg\n")
        return 2
    prog = json.load(open(argv[0] + "/progress.json"))
    with open(argv[1], "w") as f:
        f.write(svg(prog, "selroll.neural pre-training (behaviour cloning with exploration noise)"))
    return 0
