#!/usr/bin/env bash
# Every GPU benchmark and GPU test of devmem, one after another, with the results in one folder.
#
#   bash benchmarks/run_gpu_suite.sh OUTDIR               # on the GPU machine (an H200: about 5-6 minutes)
#   bash benchmarks/run_gpu_suite.sh OUTDIR --cpu-smoke   # on a CPU: tiny sizes, GPU-only steps skipped
#
# Steps: the environment; `devmem info/plugins/doctor --json`; `pytest -m gpu` (GPU tests record their figures
# in OUTDIR/test_gpu_nvidia.json); the conformance kit on the nvml platform; the NVIDIA scripts
# benchmarks/nvidia_pidns.py (unshare --pid --fork [--mount-proc]); then
# benchmarks cotenants, churn, accuracy, pinned, overhead, ranks, fit_check and planner_vs_engine (OUTDIR/<name>.json
# and <name>.txt).
# Each step's output goes to OUTDIR/<step>.log. A failing step is recorded and the suite goes on; each step has
# its own time limit, and none starts once SUITE_BUDGET_S seconds (default 500) have passed. OUTDIR/suite.json
# and suite.txt list every step with its exit status and seconds. Run from anywhere; it works in the repo root.
set -u
OUT=${1:?usage: bash benchmarks/run_gpu_suite.sh OUTDIR [--cpu-smoke]}
MODE=${2:-gpu}
case "$MODE" in gpu|--cpu-smoke) ;; *) echo "unknown option $MODE (expected --cpu-smoke)" >&2; exit 2 ;; esac
cd "$(dirname "$0")/.." || exit 2
mkdir -p "$OUT" || exit 2
OUT=$(cd "$OUT" && pwd)
BUDGET=${SUITE_BUDGET_S:-500}
START=$(date +%s)
export PYTHONUNBUFFERED=1
# NVLink multicast stays off on shared multi-GPU hosts.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
: > "$OUT/.steps.tsv"

# step NAME LIMIT_S COMMAND...: run it with its output in OUTDIR/NAME.log, record status and seconds.
step() {
    local name=$1 limit=$2 began rc status left ms
    shift 2
    left=$(( BUDGET - ($(date +%s) - START) ))
    if (( left < 10 )); then
        printf '%s\t-\t0\tskipped: the suite budget of %ss is spent\n' "$name" "$BUDGET" >> "$OUT/.steps.tsv"
        echo "== $name: skipped (budget spent)"
        return
    fi
    (( limit > left )) && limit=$left
    echo "== $name (limit ${limit}s)"
    began=$(date +%s%N)
    timeout --kill-after=10 "$limit" "$@" > "$OUT/$name.log" 2>&1
    rc=$?
    ms=$(( ($(date +%s%N) - began) / 1000000 ))
    case $rc in 0) status=ok ;; 124|137) status="timeout after ${limit}s" ;; *) status=failed ;; esac
    printf '%s\t%s\t%d.%d\t%s\n' "$name" "$rc" $(( ms / 1000 )) $(( ms % 1000 / 100 )) "$status" >> "$OUT/.steps.tsv"
    echo "   $status (exit $rc)"
}

skip() {
    printf '%s\t-\t0\tskipped: %s\n' "$1" "$2" >> "$OUT/.steps.tsv"
    echo "== $1: skipped ($2)"
}

suite_environment() {
    python3 - <<'PY'
import json, os, platform, sys
info = {"python": sys.version.split()[0], "machine": f"{platform.machine()}, {os.cpu_count()} cores"}
try:
    import torch
    info.update(torch=torch.__version__, cuda=torch.version.cuda, hip=torch.version.hip,
                cuda_devices=torch.cuda.device_count() if torch.cuda.is_available() else 0)
except ImportError as exc:
    info["torch"] = f"not importable: {exc}"
for name in ("pynvml", "pluggy", "psutil", "pytest"):
    try:
        module = __import__(name)
        info[name] = getattr(module, "__version__", "present")
    except ImportError as exc:
        info[name] = f"not importable: {exc}"
info["env"] = {k: v for k, v in os.environ.items() if k.startswith(("CUDA_", "NCCL_", "DEVMEM_", "HIP_"))}
print(json.dumps(info, indent=2))
PY
    command -v nvidia-smi > /dev/null && nvidia-smi
    return 0
}

suite_install() {
    if python3 -c "import importlib.metadata as m; m.distribution('devmem-kv')" 2> /dev/null; then
        echo "devmem is installed: $(python3 -c 'import devmem; print(devmem.__version__, devmem.__file__)')"
    else
        python3 -m pip install --no-deps --no-build-isolation -e . || {
            echo "building devmem-kv without isolation needs setuptools >= 77 (PEP 639 licence metadata) in" \
                "python3; it has $(python3 -c 'import setuptools; print(setuptools.__version__)' 2>&1)" >&2
            return 1
        }
    fi
}

# json_step NAME LIMIT COMMAND...: like step, with the command's stdout (JSON) in OUTDIR/NAME.json.
json_step() {
    local name=$1 limit=$2
    shift 2
    step "$name" "$limit" bash -c '"$@" > "$0"' "$OUT/$name.json" "$@"
}

export OUT
export -f suite_environment suite_install
if [[ $MODE == --cpu-smoke ]]; then
    QUICK=--quick; PLATFORM=cpu; ROUNDS=200
else
    QUICK=; PLATFORM=nvml; ROUNDS=5000
fi

step environment 60 bash -c suite_environment
step install 120 bash -c suite_install
json_step devmem_info 60 python3 -m devmem info --json
json_step devmem_plugins 60 python3 -m devmem plugins --json
json_step devmem_doctor 60 python3 -m devmem doctor --json
step devmem_human 60 bash -c 'python3 -m devmem info && python3 -m devmem plugins && python3 -m devmem doctor'
if [[ $MODE == --cpu-smoke ]]; then
    skip pytest_gpu "cpu smoke"
else
    step pytest_gpu 180 env DEVMEM_GPU_RESULTS="$OUT" python3 -m pytest -m gpu -q -rA -p no:cacheprovider
fi
step conformance 120 python3 -m pytest --pyargs devmem.testing --devmem-platform "$PLATFORM" -q -rA -p no:cacheprovider
step nvidia_pidns 120 python3 benchmarks/nvidia_pidns.py --out "$OUT"
step cotenants 240 python3 benchmarks/cotenants.py $QUICK --out "$OUT"
step churn 150 python3 benchmarks/churn.py $QUICK --out "$OUT"
step accuracy 120 python3 benchmarks/accuracy.py $QUICK --out "$OUT"
step pinned 90 python3 benchmarks/pinned.py --out "$OUT"
step overhead 90 python3 benchmarks/overhead.py $QUICK --rounds "$ROUNDS" --out "$OUT"
step ranks 120 python3 benchmarks/ranks.py --out "$OUT"
step fit_check 180 python3 benchmarks/fit_check.py --engine $QUICK --out "$OUT"
step planner_vs_engine 300 python3 benchmarks/planner_vs_engine.py ${QUICK:+--smoke} --out "$OUT"

python3 - "$OUT" "$MODE" "$(( $(date +%s) - START ))" <<'PY'
import json, sys
from pathlib import Path
out, mode, seconds = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
steps = []
for line in (out / ".steps.tsv").read_text().splitlines():
    name, rc, secs, status = line.split("\t")
    steps.append({"step": name, "exit": None if rc == "-" else int(rc), "seconds": float(secs), "status": status})
goals = {}
for log in ("pytest_gpu", "conformance"):
    lines = (out / f"{log}.log").read_text().strip().splitlines() if (out / f"{log}.log").exists() else []
    if lines:
        goals[log] = lines[-1]
pidns = json.loads((out / "nvidia_pidns.json").read_text()) if (out / "nvidia_pidns.json").exists() else {}
if "observations" in pidns:
    goals["nvidia_pidns"] = "recorded: " + "; ".join(
        f"{what} {seen}" for what, seen in pidns["observations"].items() if isinstance(seen, bool))
elif "skipped" in pidns:
    goals["nvidia_pidns"] = f"skipped: {pidns['skipped']}"
for txt in sorted(p for p in out.glob("*.txt") if p.name != "suite.txt"):
    goals.update({txt.stem: line for line in txt.read_text().splitlines() if "goal" in line})
summary = {"mode": mode, "seconds": seconds, "steps": steps, "goals": goals}
(out / "suite.json").write_text(json.dumps(summary, indent=2) + "\n")
width = max(len(s["step"]) for s in steps)
lines = [f"{s['step']:<{width}}  {s['seconds']:>6.1f}s  {s['status']}" for s in steps]
lines += ["", *(f"{name}: {line}" for name, line in goals.items()), "",
          f"{mode} suite: {seconds} s, {sum(s['status'] == 'ok' for s in steps)}/{len(steps)} steps ok; results in {out}"]
(out / "suite.txt").write_text("\n".join(lines) + "\n")
print("\n".join(lines))
PY
rm -f "$OUT/.steps.tsv"
