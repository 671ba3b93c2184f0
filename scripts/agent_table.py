#!/usr/bin/env python3
"""Aggregates scripts/agent-study.sh's runs (results/agents-raw/<run>/) into the
markdown table of results/agents/README.md: per fleet, rule and admission,
mean and range over seeds of output tokens/min (over the variant's span),
session completion time p50/p95 (trees.csv, complete trees), parent TTFB
p50/p95, usage-cached share, and calls not sent (manifest agent_traces: for a
trace, calls of trees cut by a failure; for synthesized sessions also the calls
of trees the 30-minute window cut). Run names: [WORKLOAD_]FLEET-VARIANT-sSEED,
workload trace when none. --csv=FILE also writes the means, one row per
(workload, fleet, variant), as printed (the doc-figure test reads it)."""
import csv, json, statistics, sys, collections, os

args = [a for a in sys.argv[1:] if not a.startswith("--csv=")]
raw = args[0] if args else "results/agents-raw"
csv_out = next((a[len("--csv="):] for a in sys.argv[1:] if a.startswith("--csv=")), None)

def q(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(p * len(v)))] if v else float("nan")

rows = collections.defaultdict(list)
for name in sorted(os.listdir(raw)):
    d = os.path.join(raw, name)
    if not os.path.isfile(os.path.join(d, "manifest.json")):
        continue
    fleet, rest = name.split("-", 1)
    wl = "trace"
    if "_" in fleet:
        wl, fleet = fleet.split("_", 1)
    cfg, seed = rest.rsplit("-s", 1)
    m = json.load(open(os.path.join(d, "manifest.json")))
    rs = [json.loads(l) for l in open(os.path.join(d, "turns.jsonl"))]
    ok = [r for r in rs if r["status"] == 200 and not r.get("err")]
    span = (max(r["done_ns"] for r in rs) - min(r["sent_ns"] for r in rs)) / 1e9
    trees = [t for t in csv.DictReader(open(os.path.join(d, "trees.csv"))) if t["complete"] == "true"]
    dur = [float(t["duration_s"]) for t in trees]
    par = [(r["first_token_ns"] - r["sent_ns"]) / 1e9 for r in ok if not r["trace"]["agent"].get("agent")]
    cached = 100 * sum(r["cached_tokens"] for r in ok) / max(1, sum(r["prompt_tokens"] for r in ok))
    a = m["agent_traces"][0]
    rows[(wl, fleet, cfg)].append([60 * sum(r["output_tokens"] for r in ok) / span, q(dur, .5), q(dur, .95),
                               q(par, .5), q(par, .95), cached, a["not_sent"], len(rs) - len(ok)])

cols = ["out tok/min", "session p50 (s)", "session p95 (s)", "parent TTFB p50 (s)", "parent TTFB p95 (s)",
        "usage cached %", "calls not sent", "calls failed"]
print("| workload | fleet | variant | " + " | ".join(cols) + " |")
print("|" + "---|" * (len(cols) + 3))
for (wl, fleet, cfg), v in sorted(rows.items()):
    cells = []
    for i in range(len(cols)):
        xs = [r[i] for r in v]
        fmt = "{:.0f}" if i in (0, 1, 2, 6, 7) else "{:.2f}" if i in (3, 4) else "{:.1f}"
        cells.append(fmt.format(statistics.mean(xs)) + " (" + fmt.format(min(xs)) + "-" + fmt.format(max(xs)) + ")")
    print(f"| {wl} | {fleet} | {cfg} | " + " | ".join(cells) + " |")

if csv_out:
    with open(csv_out, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["workload", "fleet", "variant", "seeds"] + cols)
        for (wl, fleet, cfg), v in sorted(rows.items()):
            means = []
            for i in range(len(cols)):
                fmt = "{:.0f}" if i in (0, 1, 2, 6, 7) else "{:.2f}" if i in (3, 4) else "{:.1f}"
                means.append(fmt.format(statistics.mean(r[i] for r in v)))
            w.writerow([wl, fleet, cfg, len(v)] + means)
