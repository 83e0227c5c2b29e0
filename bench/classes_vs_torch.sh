#!/usr/bin/env bash
# Issue 29's selection-rule comparisons, side by side in one run (interleaved rounds), 2 threads:
#   WEIGHTED negatives: gpusampler (--classes weighted-neg) vs torch.multinomial(w, K,
#     replacement=False) per row, and vs gpusampler's uniform class path (binary-as-classes);
#   HARDEST negatives: gpusampler (--classes hardest-neg) vs SSD's two-sort selection in torch.
# B = 32 x N = 1e5, K = 1e4, D = 16 unless ROWS / N / K / DIM say otherwise; ROUNDS rounds
# (default 3). Both sides answer with the selection's labels and D float32 features (torch
# gathers them from its indices; DIM=0: labels only).
#   bash bench/classes_vs_torch.sh            (BUILD_DIR=build)
set -euo pipefail
cd "$(dirname "$0")/.."
build="${BUILD_DIR:-build}"
rows="${ROWS:-32}" n="${N:-100000}" k="${K:-10000}" dim="${DIM:-16}" rounds="${ROUNDS:-3}" threads=2
out=$(mktemp)
for round in $(seq 1 "$rounds"); do
  for mode in binary-as-classes weighted-neg hardest-neg; do
    "$build/bin/gpusampler-bench" --backend cpu --rows "$rows" --n "$n" --k "$k" --dim "$dim" \
      --label-dtype int64 --threads "$threads" --iters 5 --json --classes "$mode" | tail -1 \
      | /usr/bin/python3 -c "import json,sys; d=json.load(sys.stdin); print(json.dumps({'round': $round, 'what': 'gpusampler ' + d['classes'], 'median_ms': d['median_ms']}))" >>"$out"
  done
  /usr/bin/python3 bench/classes_torch_baselines.py --rows "$rows" --n "$n" --k "$k" \
    --threads "$threads" --iters 2 --dim "$dim" \
    | /usr/bin/python3 -c "import json,sys
for l in sys.stdin:
    d=json.loads(l); print(json.dumps({'round': $round, 'what': 'torch ' + d['baseline'], 'median_ms': d['median_ms']}))" >>"$out"
done
/usr/bin/python3 - "$out" <<'PY'
import json, statistics, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
by = {}
for r in recs:
    by.setdefault(r["what"], []).append(r["median_ms"])
med = {w: statistics.median(v) for w, v in by.items()}
for w, v in by.items():
    print(f"| {w} | {med[w]:.1f} | {', '.join(f'{x:.1f}' for x in v)} |")
u, wn, hn = med["gpusampler binary-as-classes"], med["gpusampler weighted-neg"], med["gpusampler hardest-neg"]
print(f"\nweighted-neg / uniform class path: {wn / u:.2f}x; torch.multinomial / weighted-neg: {med['torch weighted'] / wn:.1f}x")
print(f"hardest-neg / uniform class path: {hn / u:.2f}x; torch two-sort / hardest-neg: {med['torch hardest'] / hn:.1f}x")
PY
rm -f "$out"
