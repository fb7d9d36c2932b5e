#!/usr/bin/env bash
# A real `devmem info` screen with two other processes holding memory, checked against NVML.
#
#   bash benchmarks/info_screen.sh OUTDIR      # on the GPU machine (about 30 s); on a CPU it says it is a no-op
#
# Starts two holders (python3 + torch: 2 GiB and 3 GiB on cuda:0, then sleeping), runs `devmem info` (human,
# COLUMNS=80) and `devmem info --json`, captures nvidia-smi's compute-apps list beside them, and checks with
# pynvml that the bytes devmem lists for every PID (the holders' included) equal NVML's, and that the holders
# are listed with a user and a command. Then it kills the holders.
# Writes OUTDIR/: commands.txt, info.txt, info.json, nvidia_smi.csv, holder_{1,2}.log, verdict.json.
# Exit 0 when the verdict passes (or on a CPU), 1 when it does not.
set -u
OUT=${1:?usage: bash benchmarks/info_screen.sh OUTDIR}
cd "$(dirname "$0")/.." || exit 2
mkdir -p "$OUT" || exit 2
OUT=$(cd "$OUT" && pwd)
PY=${PYTHON:-python3}

if ! command -v nvidia-smi >/dev/null 2>&1 || ! "$PY" -c "import torch, sys; sys.exit(not torch.cuda.is_available())" \
        >/dev/null 2>&1; then
    echo "info_screen: no CUDA GPU here (nvidia-smi or torch.cuda missing): a no-op"
    printf '{"ran": false, "reason": "no CUDA GPU on this machine: a no-op"}\n' > "$OUT/verdict.json"
    exit 0
fi

HOLDERS=()
cleanup() { for pid in "${HOLDERS[@]}"; do kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; done; }
trap cleanup EXIT

for n in 1 2; do
    gib=$((n + 1))
    "$PY" -c "
import time, torch
x = torch.empty($gib << 30, dtype=torch.uint8, device='cuda:0')
x.fill_(1)
torch.cuda.synchronize()
print('holding $gib GiB', flush=True)
time.sleep(600)
" > "$OUT/holder_$n.log" 2>&1 &
    HOLDERS+=($!)
done
for n in 1 2; do  # wait until both hold their memory (at most 120 s)
    for _ in $(seq 240); do grep -q holding "$OUT/holder_$n.log" && break; sleep 0.5; done
    grep -q holding "$OUT/holder_$n.log" || { echo "holder $n did not start:"; cat "$OUT/holder_$n.log"; exit 1; }
done

{
    echo "holders: ${HOLDERS[*]} (2 GiB, 3 GiB on cuda:0)"
    echo "COLUMNS=80 $PY -m devmem info > info.txt"
    echo "$PY -m devmem info --json > info.json"
    echo "nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits > nvidia_smi.csv"
} > "$OUT/commands.txt"
COLUMNS=80 "$PY" -m devmem info > "$OUT/info.txt" 2>&1
"$PY" -m devmem info --json > "$OUT/info.json"
nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits > "$OUT/nvidia_smi.csv"
cat "$OUT/info.txt"

"$PY" - "$OUT" "${HOLDERS[@]}" <<'PYEOF'
import json, sys

import pynvml

out, holders = sys.argv[1], [int(p) for p in sys.argv[2:]]
info = json.load(open(f"{out}/info.json"))
device = info["devices"][0]
listed = {p["pid"]: p for p in device["processes"] or []}
pynvml.nvmlInit()
handle = pynvml.nvmlDeviceGetHandleByIndex(0)
nvml = {}
for call in (pynvml.nvmlDeviceGetComputeRunningProcesses, pynvml.nvmlDeviceGetGraphicsRunningProcesses):
    for p in call(handle):
        nvml[p.pid] = max(nvml.get(p.pid, 0), int(p.usedGpuMemory or 0))
smi = {}
for line in open(f"{out}/nvidia_smi.csv"):
    if line.strip():
        pid, mib = (s.strip() for s in line.split(","))
        smi[int(pid)] = int(mib)
devmem_bytes = {pid: p["used"] for pid, p in listed.items()}
# The driver may list host PIDs a container does not see; a holder's driver PID is then found by NSpid.
def driver_pid(pid):
    try:
        for line in open(f"/proc/{pid}/status"):
            if line.startswith("NSpid:"):
                return int(line.split()[1])
    except OSError:
        pass
    return pid
holder_pids = [driver_pid(p) for p in holders]
verdict = {
    "ran": True,
    "holders": holders,
    "holder_driver_pids": holder_pids,
    "devmem_bytes": {str(k): v for k, v in sorted(devmem_bytes.items())},
    "nvml_bytes": {str(k): v for k, v in sorted(nvml.items())},
    "nvidia_smi_mib": {str(k): v for k, v in sorted(smi.items())},
    "bytes_equal_nvml": devmem_bytes == nvml,
    "holders_listed": all(p in listed for p in holder_pids),
    "holders_have_user_and_command": all(listed.get(p, {}).get("user") and listed.get(p, {}).get("command")
                                         for p in holder_pids),
    "holders_match_nvidia_smi_mib": all(listed.get(p, {}).get("used", -1) // (1 << 20) == smi.get(p)
                                        for p in holder_pids),
    "screen_fits_80_columns": all(len(line) <= 80 for line in open(f"{out}/info.txt").read().splitlines()),
}
verdict["pass"] = all(verdict[k] for k in ("bytes_equal_nvml", "holders_listed", "holders_have_user_and_command",
                                           "holders_match_nvidia_smi_mib", "screen_fits_80_columns"))
json.dump(verdict, open(f"{out}/verdict.json", "w"), indent=2)
print(json.dumps(verdict, indent=2))
sys.exit(0 if verdict["pass"] else 1)
PYEOF
