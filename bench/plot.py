#!/usr/bin/python3
"""PNG plots of recorded benchmark results, for docs/benchmarks.md.

    /usr/bin/python3 bench/plot.py depth RUNS_TSV OUT.png   # bench/vs-ik runs.tsv: decode tok/s against context depth
    /usr/bin/python3 bench/plot.py ttft RESULTS_JSONL OUT.png  # bench/long-prefill-ttft.js per-run lines: short TTFT over the long prefill
    /usr/bin/python3 bench/plot.py prefill ROUNDS_TSV OUT.png  # bench/prefill-vs-model.sh rounds: tok/s against prompt length

Needs matplotlib: Debian's /usr/bin/python3 with python3-matplotlib. A tool for the docs, not a dependency
of latte's build or tests.
"""
import json
import statistics
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ENGINE_TITLES = {"latte": "latte", "ik": "ik_llama.cpp", "llama": "llama.cpp"}
DEPTH_TESTS = {"tg128": 0, "d8192": 8192, "d32768": 32768}


def plot_depth(runs_tsv, out):
    """Median tok/s per engine at each depth (tg128 is depth 0), every round as a dot."""
    samples = {}  # engine -> depth -> [tok/s]
    for line in open(runs_tsv):
        if not line.strip() or line.startswith("#"):  # notes on which run the rounds below come from
            continue
        _, test, *cells = line.rstrip("\n").split("\t")
        if test not in DEPTH_TESTS:
            continue
        for cell in cells:
            engine, value = cell.split("=", 1)
            if value != "none":
                samples.setdefault(engine, {}).setdefault(DEPTH_TESTS[test], []).append(float(value))
    labelled = {ENGINE_TITLES.get(engine, engine): by_depth for engine, by_depth in samples.items()}
    depths = sorted({d for by_depth in samples.values() for d in by_depth})
    plot_medians(labelled, out, xticks=depths, xlabel="context depth (tokens)",
                 ylabel="decode tok/s (median line, rounds as dots)",
                 title="bf16 decode after a context, 2 threads, same weights")


def plot_ttft(results_jsonl, out):
    """Each short request's TTFT against when it was sent: 2 s after the long prompt, then
    0.5 s after the previous one's first token (the script's schedule)."""
    fig, ax = plt.subplots(figsize=(7.2, 5.6))
    for line in open(results_jsonl):
        run = json.loads(line)
        if "beside_ttft_s" not in run:
            continue
        sent, t = [], 2.0
        for ttft in run["beside_ttft_s"]:
            sent.append(t)
            t += ttft + 0.5
        name = "default" if run["config"] == "shared" else run["config"]
        ax.plot(sent, run["beside_ttft_s"], marker=".", linewidth=1,
                label=f"{name}, round {run['round']} (long TTFT {run['long_ttft_s']:.0f} s)")
    ax.set_yscale("log")
    ticks = [0.2, 0.5, 1, 2, 5]
    ax.set_yticks(ticks, [f"{t:g}" for t in ticks])
    ax.set_xlabel("seconds after the long prompt was sent")
    ax.set_ylabel("short request TTFT (s, log scale)")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=1)
    ax.set_title("40-token requests beside a 16,384-token prefill")
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def plot_prefill(rounds_tsv, out):
    """Median prefill tok/s per prompt length for bench model, bench engine and serve
    (columns run, n, round, model, engine, serve; '#' lines are comments), rounds as dots."""
    rows = [line.rstrip("\n").split("\t") for line in open(rounds_tsv) if line.strip() and not line.startswith("#")]
    header, rows = rows[0], rows[1:]
    series = {}  # side -> n -> [tok/s]
    for i, side in enumerate(header[3:]):
        for r in rows:
            series.setdefault(side, {}).setdefault(int(r[1]), []).append(float(r[3 + i]))
    plot_medians(series, out, xticks=sorted({int(r[1]) for r in rows}), xlabel="prompt tokens",
                 ylabel="prefill tok/s (median line, rounds as dots)",
                 title="One prompt: bench model, bench engine, latte serve", log2_x=True)


def plot_medians(series, out, xticks, xlabel, ylabel, title, log2_x=False):
    """series: label -> x -> [samples]; one line through each x's median, each sample a dot."""
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for label, by_x in series.items():
        xs = sorted(by_x)
        ax.plot(xs, [statistics.median(by_x[x]) for x in xs], marker="o", label=label)
        for x in xs:
            ax.scatter([x] * len(by_x[x]), by_x[x], s=10, alpha=0.4, color=ax.lines[-1].get_color())
    if log2_x:
        ax.set_xscale("log", base=2)
    ax.set_xticks(xticks, [str(x) for x in xticks])
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend()
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(out, dpi=110)


PLOTS = {"depth": plot_depth, "ttft": plot_ttft, "prefill": plot_prefill}


def main(argv):
    if len(argv) != 4 or argv[1] not in PLOTS:
        sys.exit(__doc__)
    PLOTS[argv[1]](argv[2], argv[3])


if __name__ == "__main__":
    main(sys.argv)
