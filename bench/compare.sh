#!/usr/bin/env bash
# Side-by-side benchmark: gpusampler-bench vs. the PyTorch baselines
# (bench/pytorch_baselines.py), same rows B, elements N, K = N/10, D = 16,
# int64 labels and the same thread count.  Prints a Markdown report on stdout;
# progress goes to stderr.
#
# usage: bench/compare.sh [--backend cpu|cuda|cuda-sim] [--threads T] [--raw FILE]
#                         [--sizes "B:N B:N ..."] [--iters-scale X] [--compile-python PY]
# env:   THREADS      thread count (default: nproc)
#        SIZES        cells as "B:N" pairs, space or comma separated
#                     (default: B=1 x N=1e3..1e7 and B=32 x N=1e3..1e6)
#        QUICK=1      smoke test: N in {1e3, 1e4} at B=1 and B=32
#        CLASSES=1    (cpu; or --classes) also time the class path (SPEC section 7) per cell:
#                     binary-as-classes (lowering off) vs binary, 8 and 64 classes, WEIGHTED
#                     negatives vs uniform (gpusampler-bench --classes), in a second table
#        ITERS_SCALE  multiply the per-cell iteration counts (default 1)
#        GPUSAMPLER_BENCH  path of the bench binary (default build/bin/gpusampler-bench)
#        PYTHON       interpreter with torch (default /usr/bin/python3)
#        COMPILE_PYTHON  interpreter with torch >= 2 for the torch.compile column (default:
#                     PYTHON when its torch is >= 2; else the column prints n/a). One line:
#                     python3 -m venv /tmp/torch2 && /tmp/torch2/bin/pip install torch numpy
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
cmdline="$(printf '%q ' "$0" "$@")"
cmdline="${cmdline% }"
for v in QUICK CLASSES SIZES THREADS ITERS_SCALE GPUSAMPLER_BENCH PYTHON COMPILE_PYTHON; do
  if [[ -n "${!v:-}" ]]; then cmdline="$v=$(printf '%q' "${!v}") $cmdline"; fi
done

die() { echo "compare.sh: error: $*" >&2; exit 1; }
usage() { sed -n '2,20p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }

backend=cpu
threads="${THREADS:-}"
raw=""
sizes="${SIZES:-}"
iters_scale="${ITERS_SCALE:-1}"
compile_py="${COMPILE_PYTHON:-}"
classes="${CLASSES:-0}"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --backend) [[ $# -ge 2 ]] || die "--backend needs a value"; backend="$2"; shift 2 ;;
    --backend=*) backend="${1#*=}"; shift ;;
    --threads) [[ $# -ge 2 ]] || die "--threads needs a value"; threads="$2"; shift 2 ;;
    --threads=*) threads="${1#*=}"; shift ;;
    --raw) [[ $# -ge 2 ]] || die "--raw needs a file name"; raw="$2"; shift 2 ;;
    --raw=*) raw="${1#*=}"; shift ;;
    --sizes) [[ $# -ge 2 ]] || die "--sizes needs a value"; sizes="$2"; shift 2 ;;
    --sizes=*) sizes="${1#*=}"; shift ;;
    --iters-scale) [[ $# -ge 2 ]] || die "--iters-scale needs a value"; iters_scale="$2"; shift 2 ;;
    --iters-scale=*) iters_scale="${1#*=}"; shift ;;
    --compile-python) [[ $# -ge 2 ]] || die "--compile-python needs a value"; compile_py="$2"; shift 2 ;;
    --compile-python=*) compile_py="${1#*=}"; shift ;;
    --classes) classes=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done

# cuda-sim: the CUDA pipeline on the host (its times are not a GPU's; it rehearses the
# GPU proof without a GPU, bench/gpu/prove.sh REHEARSE=1).
case "$backend" in cpu|cuda|cuda-sim) ;; *) die "--backend must be cpu, cuda or cuda-sim, got '$backend'" ;; esac
[[ -n "$threads" ]] || threads="$(nproc)"
[[ "$threads" =~ ^[1-9][0-9]*$ ]] || die "thread count must be a positive integer, got '$threads'"
[[ "$iters_scale" =~ ^[0-9]*\.?[0-9]+$ ]] || die "ITERS_SCALE must be a positive number, got '$iters_scale'"

if [[ -z "$sizes" ]]; then
  if [[ "${QUICK:-0}" == 1 ]]; then
    sizes="1:1000 1:10000 32:1000 32:10000"
  else
    sizes="1:1000 1:10000 1:100000 1:1000000 1:10000000 32:1000 32:10000 32:100000 32:1000000"
  fi
fi
sizes="${sizes//,/ }"

bench="${GPUSAMPLER_BENCH:-$root/build/bin/gpusampler-bench}"
py="${PYTHON:-/usr/bin/python3}"
baselines="$here/pytorch_baselines.py"
if [[ ! -x "$bench" ]]; then
  die "gpusampler bench binary not found or not executable: $bench
  build it first (e.g. cmake --preset <preset> && cmake --build build --target gpusampler-bench),
  or point GPUSAMPLER_BENCH at it."
fi
[[ -x "$py" ]] || die "python interpreter not found: $py (set PYTHON)"
torch_version="$("$py" -c 'import torch; print(torch.__version__)' 2>/dev/null)" \
  || die "$py cannot import torch (set PYTHON to an interpreter with torch)"
[[ -f "$baselines" ]] || die "missing $baselines"

# torch.compile column: PYTHON's torch when it is >= 2, else COMPILE_PYTHON's (run apart,
# --sampler topk_compiled), else n/a.
torch_major() { "$1" -c 'import torch; print(int(torch.__version__.split(".")[0]))' 2>/dev/null || echo 0; }
compile_note=""
if [[ -n "$compile_py" ]]; then
  [[ -x "$compile_py" ]] || die "COMPILE_PYTHON is not an executable interpreter: $compile_py"
  (( $(torch_major "$compile_py") >= 2 )) \
    || die "COMPILE_PYTHON=$compile_py has no torch >= 2 (torch.compile needs it)"
  compile_version="$("$compile_py" -c 'import torch; print(torch.__version__)')"
  if [[ "$compile_py" == "$py" ]]; then compile_py=""; fi
elif (( $(torch_major "$py") >= 2 )); then
  compile_version="$torch_version"
else
  compile_note="torch.compile column: n/a, $py has torch $torch_version (< 2); set COMPILE_PYTHON to an interpreter with torch >= 2 (see --help)."
fi

# PyTorch device: CUDA only when gpusampler runs on CUDA and torch sees a GPU.
pt_device=cpu
pt_note=""
if [[ "$backend" == cuda ]]; then
  if "$py" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    pt_device=cuda
  else
    pt_note="torch.cuda.is_available() is False: PyTorch baselines ran on the CPU, gpusampler on CUDA."
  fi
fi

# Iterations per cell: about 3e7 / (B*N), clamped to [3, 200], times ITERS_SCALE,
# so the slowest baseline (topk, ~80 ns/element on 2 cores) stays around a few
# seconds per cell.
cell_iters() {
  awk -v e="$1" -v s="$iters_scale" 'BEGIN {
    it = int(3e7 / e); if (it > 200) it = 200; it = int(it * s); if (it < 3) it = 3; print it }'
}

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
gs_json="$tmp/gpusampler.jsonl"
pt_json="$tmp/pytorch.jsonl"
cls_json="$tmp/classes.jsonl"
: >"$cls_json"
: >"$gs_json"
: >"$pt_json"

for cell in $sizes; do
  [[ "$cell" =~ ^([1-9][0-9]*):([1-9][0-9]*)$ ]] || die "bad size '$cell' (want B:N, e.g. 32:10000)"
  b="${BASH_REMATCH[1]}"
  n="${BASH_REMATCH[2]}"
  k=$(( n / 10 )); (( k >= 1 )) || k=1
  iters="$(cell_iters $(( b * n )))"
  warmup=$(( iters / 10 )); (( warmup >= 1 )) || warmup=1; (( warmup <= 10 )) || warmup=10
  echo "compare.sh: rows=$b n=$n k=$k iters=$iters threads=$threads" >&2

  gs_cmd=("$bench" --backend "$backend" --rows "$b" --n "$n" --k "$k" --dim 16
          --label-dtype int64 --threads "$threads" --iters "$iters" --json)
  # The floor (labels read once, N/4 + K Philox calls, the K-row gather) is a CPU measure.
  [[ "$backend" != cpu ]] || gs_cmd+=(--floor)
  if ! out="$("${gs_cmd[@]}")"; then
    die "gpusampler-bench failed for rows=$b n=$n: $(printf '%q ' "${gs_cmd[@]}")"
  fi
  lines="$(printf '%s\n' "$out" | grep '^[[:space:]]*{' || true)"
  [[ -n "$lines" ]] || die "gpusampler-bench printed no JSON line for rows=$b n=$n"
  printf '%s\n' "$lines" >>"$gs_json"
  if [[ "$classes" == 1 && "$backend" == cpu ]]; then
    for mode in binary binary-as-classes 8 64 weighted-neg; do
      cls_cmd=("$bench" --backend cpu --rows "$b" --n "$n" --k "$k" --dim 16 --label-dtype int64
               --threads "$threads" --iters "$iters" --json --classes "$mode")
      out="$("${cls_cmd[@]}")" || die "gpusampler-bench failed: $(printf '%q ' "${cls_cmd[@]}")"
      printf '%s\n' "$out" | grep '^[[:space:]]*{' >>"$cls_json" || true
    done
  fi

  pt_cmd=("$py" "$baselines" --sampler all --device "$pt_device" --rows "$b" --n "$n" --k "$k"
          --dim 16 --threads "$threads" --iters "$iters" --warmup "$warmup" --seed 0 --json)
  if ! out="$("${pt_cmd[@]}")"; then
    die "pytorch baselines failed for rows=$b n=$n: $(printf '%q ' "${pt_cmd[@]}")"
  fi
  printf '%s\n' "$out" | grep '^[[:space:]]*{' >>"$pt_json" \
    || die "pytorch baselines printed no JSON line for rows=$b n=$n"

  if [[ -n "$compile_py" ]]; then
    # PYTHON's own record for the compiled sampler says "skipped"; this one replaces it.
    pc_cmd=("$compile_py" "$baselines" --sampler topk_compiled --device "$pt_device" --rows "$b"
            --n "$n" --k "$k" --dim 16 --threads "$threads" --iters "$iters" --warmup "$warmup"
            --seed 0 --json)
    if ! out="$("${pc_cmd[@]}")"; then
      die "torch.compile baseline failed for rows=$b n=$n: $(printf '%q ' "${pc_cmd[@]}")"
    fi
    printf '%s\n' "$out" | grep '^[[:space:]]*{' >>"$pt_json" \
      || die "torch.compile baseline printed no JSON line for rows=$b n=$n"
  fi
done

if [[ -n "$raw" ]]; then
  cat "$gs_json" "$pt_json" >"$raw"
fi

cpu_model="$(grep -m1 -i '^model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2- | sed 's/^ *//' || true)"
[[ -n "$cpu_model" ]] || cpu_model="$(lscpu 2>/dev/null | awk -F: '/Model name/ {sub(/^ +/, "", $2); print $2; exit}' || true)"
[[ -n "$cpu_model" ]] || cpu_model="unknown"
gpu_model=""
if [[ "$backend" == cuda ]] && command -v nvidia-smi >/dev/null 2>&1; then
  gpu_model="$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1 || true)"
fi

echo "# gpusampler vs PyTorch baselines"
echo
echo "- command: \`$cmdline\`"
echo "- date: $(date -u '+%Y-%m-%dT%H:%M:%SZ')"
echo "- host: \`$(uname -a)\`"
echo "- CPU: $cpu_model ($(nproc) CPUs available)"
[[ -z "$gpu_model" ]] || echo "- GPU: $gpu_model"
echo "- threads: $threads"
echo "- gpusampler: \`$(printf '%q' "$bench") --backend $backend --rows B --n N --k N/10 --dim 16 --label-dtype int64 --threads $threads --iters I --json$([[ "$backend" != cpu ]] || echo ' --floor')\`"
[[ "$backend" != cpu ]] || echo "- floor: measured by the same binary in the same run on the same inputs and threads: read the labels once + B (N/4 + K) Philox4x32-10 calls (the backend's instruction set, reported below) + gather of the B K selected 64-byte feature rows in index order; each part timed alone, medians summed. \"x floor\" = gpusampler median / floor."
echo "- PyTorch: $torch_version via \`$py bench/pytorch_baselines.py --sampler all --device $pt_device --rows B --n N --k N/10 --dim 16 --threads $threads --iters I --warmup W --json\`"
[[ -z "$pt_note" ]] || echo "- note: $pt_note"
if [[ -n "$compile_note" ]]; then
  echo "- $compile_note"
else
  echo "- torch.compile: PyTorch $compile_version via \`$(printf '%q' "${compile_py:-$py}") bench/pytorch_baselines.py --sampler topk_compiled ...\` (same arguments)"
fi
echo "- speedup: the faster of the two eager seed samplers (nonzero, topk) over gpusampler; \"x compiled\": torch.compile(topk) over gpusampler"
echo "- labels: int64 uniform in {0,1}; features float32 [B, N, 16]; times are wall-clock medians per call (ms)"
echo

"$py" - "$gs_json" "$pt_json" <<'PYEOF'
import json
import sys

def load(path):
    recs = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line.startswith("{"):
                recs.append(json.loads(line))
    return recs

gs = load(sys.argv[1])
pt = load(sys.argv[2])

def key(r):
    return (int(r["rows"]), int(r["n"]), int(r["k"]))

cells = []
for r in gs + pt:
    if key(r) not in cells:
        cells.append(key(r))

def gs_pick(c):
    cand = [r for r in gs if key(r) == c and "median_ms" in r]
    pref = [r for r in cand if str(r.get("label_dtype", "int64")) == "int64" and int(r.get("dim", 16)) == 16]
    return (pref or cand or [None])[0]

def gs_median(c):
    pick = gs_pick(c)
    return None if pick is None else float(pick["median_ms"])

def gs_floor(c):
    pick = gs_pick(c)
    return None if pick is None or "floor_ms" not in pick else float(pick["floor_ms"])

has_floor = any("floor_ms" in r for r in gs)

isas = sorted({(r["isa"], r.get("isa_choice", "")) for r in gs if "isa" in r})
if isas:
    print("gpusampler CPU instruction set (backend and floor): " +
          "; ".join(f"{i} ({why})" for i, why in isas) + ".")
    print()

def pt_median(c, impl):
    for r in pt:
        if key(r) == c and r.get("impl") == impl and "median_ms" in r and "skipped" not in r:
            return float(r["median_ms"])
    return None

impls = ["pytorch-nonzero", "pytorch-topk"]
compiled = "pytorch-topk_compiled"

def fmt(v):
    if v is None:
        return "n/a"
    if v >= 1000:
        return f"{v:.0f}"
    return f"{v:.4g}"

head = (["rows", "n", "k", "gpusampler median ms"] + [f"{i} median ms" for i in impls]
        + ["torch.compile(topk) median ms", "speedup (best seed / gpusampler)", "x compiled"])
if has_floor:
    head += ["floor ms", "x floor"]
print("| " + " | ".join(head) + " |")
print("|" + "|".join("---:" for _ in head) + "|")
for c in cells:
    g = gs_median(c)
    ps = [pt_median(c, i) for i in impls]
    best = min((p for p in ps if p is not None), default=None)
    ratio = "n/a" if (g is None or best is None or g <= 0) else f"{best / g:.2f}x"
    pc = pt_median(c, compiled)
    ratio_c = "n/a" if (g is None or pc is None or g <= 0) else f"{pc / g:.2f}x"
    row = [str(c[0]), str(c[1]), str(c[2]), fmt(g)] + [fmt(p) for p in ps] + [fmt(pc), ratio, ratio_c]
    if has_floor:
        f = gs_floor(c)
        row += [fmt(f), "n/a" if (f is None or g is None or f <= 0) else f"{g / f:.2f}x"]
    print("| " + " | ".join(row) + " |")

ran_compiled = any(r.get("impl") == compiled and "skipped" not in r for r in pt)
skipped = sorted({r["skipped"] for r in pt if r.get("impl") == compiled and "skipped" in r})
if skipped and not ran_compiled:
    print()
    print(f"torch.compile(topk): skipped ({'; '.join(skipped)}).")
PYEOF

if [[ -s "$cls_json" ]]; then
  echo
  echo "## The class path (SPEC section 7), gpusampler median ms"
  echo
  echo "\`gpusampler-bench ... --classes MODE\`: binary (section 1), binary-as-classes (the same spec as two classes, lowering off), 8 / 64 UNIFORM classes of one label each (labels uniform over them), weighted-neg (binary-as-classes with WEIGHTED negatives, scores uniform in (0, 1])."
  echo
  "$py" - "$cls_json" <<'PYEOF'
import json
import sys

recs = [json.loads(l) for l in open(sys.argv[1]) if l.strip().startswith("{")]
modes = ["binary", "binary-as-classes", "8", "64", "weighted-neg"]
cells = []
for r in recs:
    c = (int(r["rows"]), int(r["n"]), int(r["k"]))
    if c not in cells:
        cells.append(c)
med = {((int(r["rows"]), int(r["n"]), int(r["k"])), r["classes"]): float(r["median_ms"]) for r in recs}
head = ["rows", "n", "k"] + modes + ["as-classes / binary", "weighted-neg / as-classes"]
print("| " + " | ".join(head) + " |")
print("|" + "|".join("---:" for _ in head) + "|")
for c in cells:
    v = [med.get((c, m)) for m in modes]
    ratio = lambda a, b: "n/a" if a is None or b is None or b <= 0 else f"{a / b:.2f}x"
    row = [str(x) for x in c] + ["n/a" if x is None else f"{x:.4g}" for x in v]
    row += [ratio(v[1], v[0]), ratio(v[4], v[1])]
    print("| " + " | ".join(row) + " |")
PYEOF
fi
