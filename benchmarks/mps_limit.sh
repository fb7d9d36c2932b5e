#!/usr/bin/env bash
# devmem under an MPS daemon with an 8 GiB pinned-memory limit: what a client sees, and whether an engine fits.
#
#   bash benchmarks/mps_limit.sh OUTDIR        # on the GPU machine (about 1-2 minutes); a no-op that says why elsewhere
#
# It starts its own MPS control daemon (CUDA_MPS_PIPE_DIRECTORY/CUDA_MPS_LOG_DIRECTORY in a temporary directory),
# sets the daemon's default pinned-memory limit for device 0 to 8G (`set_default_device_pinned_mem_limit 0 8G`)
# and gives every client CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=8G: the daemon's default is not visible to a client,
# the variable is, and devmem reads the variable (devmem_nvidia/limits.py). Then, each as an MPS client:
#   mps_info.json      `devmem info --json` (no CUDA context): total and free at most 8 GiB, the limit as source
#   mps_client.json    with a CUDA context: devmem's report (the MPS note names the server), torch.cuda.mem_get_info,
#                      and whether 9 GiB can be allocated (the limit enforced: it should fail)
#   mps_engine.json    examples/engine.py --utilization 0.9 --model llama-1b --batch-tokens 2048: u of what it may use
#   mps_limit.json     the summary: fits = the engine ran to the end with devmem's total <= 8 GiB
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
pgrep -x nvidia-cuda-mps-control > /dev/null && skip "an MPS control daemon is already running; not touching it"

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
nvidia-cuda-mps-control -d || skip "nvidia-cuda-mps-control -d failed"
sleep 1
echo "set_default_device_pinned_mem_limit 0 $LIMIT" | nvidia-cuda-mps-control > "$OUT/mps_control.log" 2>&1
echo "get_default_device_pinned_mem_limit 0" | nvidia-cuda-mps-control >> "$OUT/mps_control.log" 2>&1
export CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=$LIMIT

"$PY" -m devmem info --json > "$OUT/mps_info.json" 2> "$OUT/mps_info.log"
echo "devmem info: exit $?" >> "$OUT/mps_control.log"

"$PY" - > "$OUT/mps_client.json" 2> "$OUT/mps_client.log" << 'PYEOF'
import json
import torch
import devmem

torch.zeros(1, device="cuda")  # this client's context: the MPS server starts for it
platform = devmem.current_platform()
report = devmem.device_report(platform, 0).as_dict()
free, total = torch.cuda.mem_get_info(0)
try:
    x = torch.empty(9 << 30, dtype=torch.uint8, device="cuda")
    over = "allocated"
    del x
except torch.OutOfMemoryError as exc:
    over = f"refused: {str(exc).splitlines()[0]}"
print(json.dumps({"devmem": report, "torch_mem_get_info": {"free": free, "total": total}, "allocate_9GiB": over}))
PYEOF
echo "client: exit $?" >> "$OUT/mps_control.log"
echo get_server_list | nvidia-cuda-mps-control >> "$OUT/mps_control.log" 2>&1

"$PY" examples/engine.py --utilization 0.9 --model llama-1b --batch-tokens 2048 > "$OUT/mps_engine.json" 2> "$OUT/mps_engine.log"
ENGINE_RC=$?
nvidia-smi > "$OUT/mps_nvidia_smi.txt" 2>&1

"$PY" - "$OUT" "$ENGINE_RC" "$LIMIT_BYTES" << 'PYEOF' | tee "$OUT/mps_limit.txt"
import json, pathlib, sys
out, rc, limit = pathlib.Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
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
info = load("mps_info.json")
dev = (info or {}).get("devices", [info])[0] if isinstance(info, dict) else None
summary = {
    "limit": limit,
    "devmem_total": dev and dev.get("total"), "devmem_free": dev and dev.get("free"),
    "devmem_sources": dev and dev.get("sources"),
    "client": load("mps_client.json"), "engine_exit": rc, "engine": load("mps_engine.json"),
}
summary["within_limit"] = bool(dev) and dev["total"] <= limit and dev["free"] <= limit
summary["fits"] = summary["within_limit"] and rc == 0
(out / "mps_limit.json").write_text(json.dumps(summary, indent=1))
print(f"devmem total {summary['devmem_total']} free {summary['devmem_free']} (limit {limit}); "
      f"engine exit {rc}; fits: {summary['fits']}")
PYEOF
