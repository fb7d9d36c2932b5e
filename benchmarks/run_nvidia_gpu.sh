#!/usr/bin/env bash
# Every NVIDIA GPU-side check of devmem in one batch, recorded under OUTDIR (default benchmarks/results/h200).
# Needs: an NVIDIA GPU, torch with CUDA, nvidia-ml-py, devmem installed (pip install -e .), util-linux `unshare`.
# Usage: bash benchmarks/run_nvidia_gpu.sh [OUTDIR]
set -u
OUT="${1:-benchmarks/results/h200}"
PY="${PYTHON:-python3}"
mkdir -p "$OUT"
{
  echo "date: $(date -u +%FT%TZ)"
  echo "commit: $(git rev-parse HEAD 2>/dev/null || echo unknown)"
  nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv 2>&1
  "$PY" -c "import torch, pynvml; print('torch', torch.__version__, 'cuda', torch.version.cuda); print('nvidia-ml-py', pynvml.__file__)" 2>&1
} > "$OUT/environment.txt"
"$PY" -m devmem info --json > "$OUT/devmem_info.json" 2>&1
"$PY" -m devmem plugins --json > "$OUT/devmem_plugins.json" 2>&1
DEVMEM_GPU_RESULTS="$OUT" "$PY" -m pytest -m gpu tests/test_gpu_nvidia.py -s -q -rs -p no:cacheprovider \
  > "$OUT/pytest_gpu_nvidia.txt" 2>&1
echo "pytest tests/test_gpu_nvidia.py: exit $?" >> "$OUT/environment.txt"
"$PY" benchmarks/nvml_overhead.py --rounds 5000 --out "$OUT" > "$OUT/nvml_overhead.txt" 2>&1
"$PY" benchmarks/nvidia_pidns.py --out "$OUT" > "$OUT/nvidia_pidns.txt" 2>&1
tail -n 3 "$OUT/pytest_gpu_nvidia.txt"; head -n 8 "$OUT/nvml_overhead.txt"
"$PY" -c "import json,sys; print(json.dumps(json.load(open(sys.argv[1])).get('expectations'), indent=1))" "$OUT/nvidia_pidns.json"
