#!/usr/bin/env bash
# devmem under an MPS daemon with an 8 GiB pinned-memory limit: what a client sees, and whether an engine fits.
#
#   bash benchmarks/mps_limit.sh OUTDIR        # on the GPU machine (about 1-2 minutes); a no-op that says why elsewhere
#
# It starts its own MPS control daemon (CUDA_MPS_PIPE_DIRECTORY/CUDA_MPS_LOG_DIRECTORY in a temporary directory),
# records what the runtime and NVML report without MPS (view_no_mps.json), sets the daemon's default pinned-memory
# limit for device 0 to 8G (`set_default_device_pinned_mem_limit 0 8G`), and runs, as MPS clients:
#   mps_probe.json        whether reading devmem's figures makes a process an MPS client (it must not: no cuInit)
#   <client>_info.json    `devmem info --json` (no CUDA context): total and free at most 8 GiB, the limit as source
#   <client>_view.json    with a CUDA context: devmem's report, torch.cuda.mem_get_info, NVML v1/v2, and whether
#                         9 GiB can be allocated (the limit enforced: it should be refused)
#   <client>_engine.json  examples/engine.py --utilization 0.9 --model llama-1b --batch-tokens 2048
# for three clients: "variable" (given CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=8G), "daemon_default" (bound only by the
# daemon's default, which devmem asks the daemon for) and "runtime_only" (no variable and no control program on
# PATH: only the runtime's report to a process with a context shows the limit; no engine).
#   mps_limit.json        the summary; goal: info within the limit and the engine's footprint within it, for the
#                         first two clients
# The daemon is always shut down (`echo quit | nvidia-cuda-mps-control`, on every exit). It never changes the
# compute mode and never resets a GPU; it refuses to run where another MPS control daemon is already running.
set -u
OUT=${1:?usage: bash benchmarks/mps_limit.sh OUTDIR}
cd "$(dirname "$0")/.." || exit 2
mkdir -p "$OUT" || exit 2
OUT=$(cd "$OUT" && pwd)
PY=${PYTHON:-python3}
LIMIT=8G
LIMIT_BYTES=$((8 << 30))

skip() {  # skip REASON: record why nothing ran and exit 0
    echo "mps_limit: skipped: $1" | tee "$OUT/mps_limit.txt"
    "$PY" -c 'import json, sys; print(json.dumps({"skipped": sys.argv[1]}))' "$1" > "$OUT/mps_limit.json"
    exit 0
}
command -v nvidia-smi > /dev/null || skip "no nvidia-smi: not an NVIDIA GPU machine"
command -v nvidia-cuda-mps-control > /dev/null || skip "nvidia-cuda-mps-control is not installed"
nvidia-smi -L > /dev/null 2>&1 || skip "nvidia-smi lists no GPU"
pgrep -f "^nvidia-cuda-mps-control" > /dev/null && skip "an MPS control daemon is already running; not touching it"

TMP=$(mktemp -d)
export CUDA_MPS_PIPE_DIRECTORY=$TMP/pipe CUDA_MPS_LOG_DIRECTORY=$TMP/log
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
stop_daemon() {
    echo quit | nvidia-cuda-mps-control > /dev/null 2>&1
    sleep 1
    cp -r "$CUDA_MPS_LOG_DIRECTORY" "$OUT/mps_daemon_log" 2> /dev/null
    rm -rf "$TMP"
}
trap stop_daemon EXIT
trap 'exit 130' INT TERM

nvidia-smi --query-gpu=name,memory.total,compute_mode --format=csv > "$OUT/mps_gpu.csv" 2>&1

# What the runtime reports without MPS, next to NVML's total and reserved: the gap a runtime-side cap must exceed.
VIEW=$(cat << 'PYEOF'
import json, sys
import pynvml, torch
torch.zeros(1, device="cuda")
pynvml.nvmlInit()
props = torch.cuda.get_device_properties(0)
h = pynvml.nvmlDeviceGetHandleByPciBusId(f"{props.pci_domain_id:04x}:{props.pci_bus_id:02x}:{props.pci_device_id:02x}.0")
v1 = pynvml.nvmlDeviceGetMemoryInfo(h)
v2 = pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2)
free, total = torch.cuda.mem_get_info(0)
try:
    x = torch.empty(9 << 30, dtype=torch.uint8, device="cuda")
    over = "allocated"
    del x
except torch.OutOfMemoryError as exc:
    over = f"refused: {str(exc).splitlines()[0][:160]}"
torch.cuda.empty_cache()
import devmem
report = devmem.device_report(devmem.current_platform(), 0).as_dict()
print(json.dumps({"case": sys.argv[1], "runtime": {"free": free, "total": total},
                  "nvml_v1": {"total": v1.total, "free": v1.free, "used": v1.used},
                  "nvml_v2": {"total": v2.total, "reserved": v2.reserved, "free": v2.free, "used": v2.used},
                  "allocate_9GiB": over, "devmem": report}))
PYEOF
)
"$PY" -c "$VIEW" no-mps > "$OUT/view_no_mps.json" 2> "$OUT/view_no_mps.log"
nvidia-cuda-mps-control -d || skip "nvidia-cuda-mps-control -d failed"
sleep 1
# What the daemon answers with no limit set (and for an ordinal it does not have), then set the limit.
printf 'get_default_device_pinned_mem_limit 0\nget_default_device_pinned_mem_limit 7\n' | nvidia-cuda-mps-control > "$OUT/mps_control_unset.log" 2>&1
echo "set_default_device_pinned_mem_limit 0 $LIMIT" | nvidia-cuda-mps-control > "$OUT/mps_control.log" 2>&1
echo "get_default_device_pinned_mem_limit 0" | nvidia-cuda-mps-control >> "$OUT/mps_control.log" 2>&1

# Does reading devmem's figures make a process an MPS client? (libcuda mapped, NVML's MPS list)
PROBE=$(cat << 'PYEOF'
import json, os, pynvml
import devmem
def state():
    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    mps = [p.pid for p in pynvml.nvmlDeviceGetMPSComputeRunningProcesses(h)]
    return {"libcuda_mapped": "libcuda.so" in open("/proc/self/maps").read(), "mps_list": mps}
before = state()
devmem.device_report(devmem.current_platform(), 0)
print(json.dumps({"pid": os.getpid(), "before": before, "after_device_report": state()}))
PYEOF
)
"$PY" -c "$PROBE" > "$OUT/mps_probe.json" 2> "$OUT/mps_probe.log"

# Two kinds of client: one given CUDA_MPS_PINNED_DEVICE_MEM_LIMIT, one bound only by the daemon's default.
# For each: `devmem info --json` (no CUDA context), the view with a context, and the engine at u = 0.9.
client() {  # client NAME ENGINE [env args]: run them as that client (the engine where ENGINE is "engine")
    local name=$1 engine=$2; shift 2
    env "$@" "$PY" -m devmem info --json > "$OUT/${name}_info.json" 2> "$OUT/${name}_info.log"
    env "$@" "$PY" -c "$VIEW" "$name" > "$OUT/${name}_view.json" 2> "$OUT/${name}_view.log"
    [ "$engine" = engine ] || return 0
    env "$@" "$PY" examples/engine.py --utilization 0.9 --model llama-1b --batch-tokens 2048 \
        > "$OUT/${name}_engine.json" 2> "$OUT/${name}_engine.log"
    echo $? > "$OUT/${name}_engine.rc"
}
client variable engine CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=$LIMIT
client daemon_default engine -u CUDA_MPS_PINNED_DEVICE_MEM_LIMIT
# A client that can neither read the variable nor run the control program (as in a container given only the
# pipe): only what the runtime reports to a process with a context shows the limit.
mkdir -p "$TMP/bin"
PY=$(command -v "$PY") client runtime_only no-engine -u CUDA_MPS_PINNED_DEVICE_MEM_LIMIT PATH="$TMP/bin"
echo get_server_list | nvidia-cuda-mps-control >> "$OUT/mps_control.log" 2>&1
nvidia-smi > "$OUT/mps_nvidia_smi.txt" 2>&1

"$PY" - "$OUT" "$LIMIT_BYTES" << 'PYEOF' | tee "$OUT/mps_limit.txt"
import json, pathlib, sys
out, limit = pathlib.Path(sys.argv[1]), int(sys.argv[2])
def load(name):  # a whole JSON document, or the JSON last line of a program's output
    try:
        text = (out / name).read_text().strip()
    except OSError:
        return None
    for candidate in (text, text.splitlines()[-1] if text else ""):
        try:
            return json.loads(candidate)
        except ValueError:
            continue
    return None
summary = {"limit": limit, "probe": load("mps_probe.json")}
for name in ("variable", "daemon_default", "runtime_only"):
    info = load(f"{name}_info.json")
    dev = info["devices"][0] if isinstance(info, dict) and info.get("devices") else None
    view = load(f"{name}_view.json") or {}
    engine = load(f"{name}_engine.json") or {}
    rc = int((out / f"{name}_engine.rc").read_text()) if (out / f"{name}_engine.rc").exists() else None
    with_context = view.get("devmem") or {}
    case = {
        "info_no_context": dev and {k: dev.get(k) for k in ("total", "free", "sources")},
        "with_context": {k: with_context.get(k) for k in ("total", "free", "sources")},
        "runtime_mem_get_info": view.get("runtime"), "allocate_9GiB": view.get("allocate_9GiB"),
        "engine_exit": rc,
        "engine_total": engine.get("total"), "engine_kv_cache_bytes": engine.get("kv_cache_bytes"),
        "engine_footprint": engine.get("footprint"),
    }
    def within(d):
        return bool(d) and d["total"] <= limit and d["free"] <= limit
    case["info_within_limit"] = within(dev)
    case["with_context_within_limit"] = within(with_context)
    case["fits"] = None if rc is None else rc == 0 and (engine.get("footprint") or limit + 1) <= limit
    summary[name] = case
    print(f"{name}: devmem info total {dev and dev['total']} free {dev and dev['free']}; with a context total "
          f"{with_context.get('total')} free {with_context.get('free')} (limit {limit}); engine exit {rc}, "
          f"footprint {engine.get('footprint')}; fits: {case['fits']}")
summary["goal_met"] = all(summary[n]["info_within_limit"] and summary[n]["fits"] for n in ("variable", "daemon_default"))
probe = summary["probe"] or {}
print(f"reading devmem's figures made this process an MPS client: "
      f"{bool((probe.get('after_device_report') or {}).get('mps_list'))} (probe {probe})")
print(f"goal (devmem info at most the limit and the engine fits, for both kinds of client): "
      f"{'MET' if summary['goal_met'] else 'NOT MET'}")
(out / "mps_limit.json").write_text(json.dumps(summary, indent=1))
PYEOF
