"""Stock SGLang beside SGLang with devmem's plugin: N instances started at the same instant, as separate processes.

Per instance: the KV pool (``max_total_num_tokens``), its ratio to the same mode started alone, the NVML footprint
of the instance's processes after serving against the share devmem reserved for it (plugin) or ``ceil(f x total)``
(stock, for scale), whether its weights began to load (a refusal must come before), and the start time
(``sglang.Engine(...)`` to ready). Models are saved with random weights from a config (``save_pretrained``): the
TinyLlama-1.1B shape and a Qwen3 shape with a 151,936-token vocabulary. Stock and plugin rounds alternate in one
run, so every figure has its baseline beside it; rounds that would start after ``--deadline`` seconds are listed
as not run, so that one command stays within the device's time per call.

Needs SGLang (0.5.16 was run: triton attention, PyTorch sampling, token-id prompts)
and devmem installed with its entry points (``pip install --no-deps -e .``), so that ``DEVMEM_SGLANG=1`` loads the
plugin.

Every round's instances share a profile store of the round's own (``DEVMEM_PROFILE_DIR``; a ``-warm`` round reads
the one of the round it repeats), so that no round plans from figures an earlier round stored.

Usage: python benchmarks/sglang_cotenants.py [--shapes tinyllama,qwen3] [--scenarios ...] [--out results.json]
       [--logs DIR]
       python benchmarks/sglang_cotenants.py report results.json ...
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any

GiB = 1 << 30
SHAPES = {
    "tinyllama": dict(
        kind="llama",
        hidden_size=2048,
        intermediate_size=5632,
        num_hidden_layers=22,
        num_attention_heads=32,
        num_key_value_heads=4,
        vocab_size=32000,
        max_position_embeddings=2048,
    ),
    "qwen3": dict(
        kind="qwen3",
        hidden_size=1024,
        intermediate_size=3072,
        num_hidden_layers=28,
        num_attention_heads=16,
        num_key_value_heads=8,
        head_dim=128,
        vocab_size=151936,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
    ),
}
# name: (instances, mem_fraction_static, mode(s), extra): "both" runs stock then plugin
SCENARIOS = {
    "solo-0.3": (1, 0.3, "both", {}),
    "solo-0.3-warm": (1, 0.3, "both", {}),  # the start-time comparison: caches warm for both modes
    "two-0.3": (2, 0.3, "both", {}),
    "solo-0.2": (1, 0.2, "plugin", {}),
    "four-0.2": (4, 0.2, "plugin", {}),
    "five-0.2": (5, 0.2, "plugin", {}),
    "churn-0.3": (1, 0.3, "both", {"churn": True}),
    "graphs-solo-0.3": (1, 0.3, "both", {"graphs": True}),
    "graphs-two-0.3": (2, 0.3, "both", {"graphs": True}),
}
#: How long one round may take before its instances are stopped (seconds).
ROUND_LIMIT = 300


def save_model(shape: str, root: str) -> str:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM

    spec = dict(SHAPES[shape])
    kind = spec.pop("kind")
    config_cls, model_cls = (LlamaConfig, LlamaForCausalLM) if kind == "llama" else (Qwen3Config, Qwen3ForCausalLM)
    path = os.path.join(root, shape)
    torch.manual_seed(0)
    model_cls(config_cls(torch_dtype="bfloat16", **spec)).to(torch.bfloat16).save_pretrained(path)
    return path


def _tree(pid: int) -> set[int]:
    import psutil

    process = psutil.Process(pid)
    return {pid} | {child.pid for child in process.children(recursive=True)}


def _share_of(pids: set[int]) -> int | None:
    """What devmem's ledger holds for ``pids`` on device 0 (``None``: nothing)."""
    from devmem.engine.reservations import device_reservations
    from devmem.platform import device_report
    from devmem.resolution.plugins import current_platform

    platform = current_platform()
    reservations = device_reservations(platform, 0, device_report(platform, 0))
    if reservations is None:
        return None
    held = [h.reserved for h in reservations.accounting.holdings if h.pid in pids and h.reserved]
    return sum(held) if held else None


def instance(args: argparse.Namespace) -> None:
    """One SGLang instance: waits for the start instant, starts, serves, and writes its figures as JSON."""
    import pynvml
    import sglang

    while time.time() < args.start_at:
        time.sleep(0.005)
    t0 = time.time()
    out: dict[str, Any] = {
        "pid": os.getpid(),
        "mode": "plugin" if args.plugin else "stock",
        "sglang": sglang.__version__,
    }
    engine = None
    try:
        options: dict[str, Any] = dict(
            model_path=args.model,
            skip_tokenizer_init=True,
            attention_backend="triton",
            sampling_backend="pytorch",
            mem_fraction_static=args.fraction,
            chunked_prefill_size=2048,
            context_length=2048,
            disable_cuda_graph=not args.graphs,
            log_level="info",
            random_seed=0,
        )
        if args.graphs:
            options.update(cuda_graph_max_bs_decode=16, cuda_graph_max_bs_prefill=512)
        engine = sglang.Engine(**options)
        out["start_s"] = time.time() - t0
        params = {"max_new_tokens": 16, "temperature": 0, "ignore_eos": True}
        engine.generate(input_ids=[list(range(1, 200 + i)) for i in range(32)], sampling_params=params)
        out["max_total_num_tokens"] = int(engine.get_server_info()["max_total_num_tokens"])
        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        pids = _tree(os.getpid())
        procs = pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
        out["nvml_footprint"] = sum(p.usedGpuMemory or 0 for p in procs if p.pid in pids)
        out["total"] = pynvml.nvmlDeviceGetMemoryInfo(handle).total
        out["share"] = _share_of(pids)
    except Exception as exc:  # a refused start is a result
        out["error"] = f"{type(exc).__name__}: {exc}"[:2000]
        out["start_s"] = time.time() - t0
    with open(args.out, "w") as f:
        json.dump(out, f)
    if engine is not None:
        engine.shutdown()
    os._exit(0)


CHURN = """
import time, torch
end = time.time() + {seconds}
while time.time() < end:
    x = torch.empty(12 << 30, dtype=torch.uint8, device="cuda"); torch.cuda.synchronize(); time.sleep(0.05)
    del x; torch.cuda.empty_cache(); time.sleep(0.05)
"""


#: The steps of a start, each by the first line of SGLang's log that marks its beginning.
STEPS = {
    "scheduler": "Init torch distributed begin",  # the scheduler process started and imported
    "weights": "Load weight begin",
    "pool": "Load weight end",  # the pool's sizing (devmem's hook) and allocation follow
    "graphs": "Memory pool end",  # graph capture (devmem's window) follows
    "ready": "max_total_num_tokens=",
}
_STAMP = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)\] ")


def steps(text: str) -> dict[str, int]:
    """Seconds from the log's first timestamped line (SGLang's ``server_args``) to each of :data:`STEPS` that the
    log holds, at the second's resolution of SGLang's timestamps: where a start spent its time, stock or not."""
    first, found = None, {}
    for line in text.splitlines():
        stamp = _STAMP.match(line)
        if stamp is None:
            continue
        at = datetime.datetime.fromisoformat(stamp.group(1))
        first = first or at
        for name, marker in STEPS.items():
            if name not in found and marker in line:
                found[name] = int((at - first).total_seconds())
    return found


def _from_log(row: dict[str, Any], log: str) -> None:
    """What the instance's log (its scheduler's included) says: devmem's lines, a refusal, whether weights loaded,
    when each step of the start began."""
    with open(log, errors="replace") as f:
        text = f.read()
    row["devmem_lines"] = [line.strip()[:600] for line in text.splitlines() if "devmem" in line and "sized" in line]
    row["weights_began"] = "Load weight begin" in text
    row["steps_s"] = steps(text)
    refusal = re.search(r"cannot reserve.*?(?=\n\S|\Z)", text, re.S)
    if refusal:
        row["refusal"] = refusal.group(0)[:1500]


def round_of(
    model: str, count: int, fraction: float, plugin: bool, extra: dict[str, Any], tmp: str, profiles: str
) -> list[dict]:
    start_at = time.time() + 3.0
    env = dict(os.environ, DEVMEM_SGLANG="1" if plugin else "0", DEVMEM_PROFILE_DIR=profiles)
    churn = None
    if extra.get("churn"):
        churn = subprocess.Popen([sys.executable, "-c", CHURN.format(seconds=ROUND_LIMIT)])
    procs = []
    for i in range(count):
        out = os.path.join(tmp, f"r{time.time_ns()}_{i}.json")
        argv = [sys.executable, __file__, "instance", "--model", model, "--fraction", str(fraction), "--out", out]
        argv += ["--start-at", str(start_at)] + (["--plugin"] if plugin else [])
        argv += ["--graphs"] if extra.get("graphs") else []
        log = out + ".log"
        with open(log, "w") as sink:
            proc = subprocess.Popen(argv, env=env, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)
        procs.append((proc, out, log))
    rows = []
    deadline = time.time() + ROUND_LIMIT
    for proc, out, log in procs:
        try:
            proc.wait(timeout=max(1, deadline - time.time()))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait()
        try:
            with open(out) as f:
                row = json.load(f)
        except OSError:
            row = {"error": f"no result (exit {proc.returncode})", "mode": "plugin" if plugin else "stock"}
        _from_log(row, log)
        row["log"] = log
        rows.append(row)
    if churn is not None:
        churn.kill()
        churn.wait()
    for row in rows:
        if "total" in row:
            row["cap"] = row.get("share") if plugin else math.ceil(fraction * row["total"])
            row["over_cap"] = row["cap"] is not None and row["nvml_footprint"] > row["cap"]
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command")
    one = sub.add_parser("instance")
    one.add_argument("--model", required=True)
    one.add_argument("--fraction", type=float, required=True)
    one.add_argument("--out", required=True)
    one.add_argument("--start-at", type=float, required=True)
    one.add_argument("--plugin", action="store_true")
    one.add_argument("--graphs", action="store_true")
    table = sub.add_parser("report", help="the table of one or more result files")
    table.add_argument("files", nargs="+")
    parser.add_argument("--shapes", default="tinyllama,qwen3")
    parser.add_argument("--scenarios", default=",".join(SCENARIOS))
    parser.add_argument("--out", default="sglang_cotenants.json")
    parser.add_argument("--deadline", type=float, default=480, help="start no round after this many seconds")
    parser.add_argument("--logs", default=None, help="a folder to keep every instance's log in (where its start went)")
    args = parser.parse_args()
    if args.command == "instance":
        return instance(args)
    if args.command == "report":
        return print(report(args.files))
    from common import round_profile_store  # here: the instances, stock ones included, never import devmem

    began = time.time()
    tmp = tempfile.mkdtemp()
    results: dict[str, Any] = {"command": " ".join(sys.argv), "rounds": [], "not_run": []}
    for shape in args.shapes.split(","):
        model = save_model(shape, tmp)
        solo: dict[tuple, int] = {}
        for name in args.scenarios.split(","):
            count, fraction, modes, extra = SCENARIOS[name]
            for plugin in {"both": (False, True), "plugin": (True,)}[modes]:
                mode = "plugin" if plugin else "stock"
                if time.time() - began > args.deadline:
                    results["not_run"].append(f"{shape} {name} {mode}")
                    continue
                rows = round_of(model, count, fraction, plugin, extra, tmp, round_profile_store(tmp, shape, name, mode))
                if args.logs:
                    os.makedirs(args.logs, exist_ok=True)
                    for i, row in enumerate(rows):
                        kept = f"{shape}_{name}_{mode}_{i}.log"
                        shutil.copyfile(row.pop("log"), os.path.join(args.logs, kept))
                else:
                    for row in rows:
                        row.pop("log")
                key = (fraction, plugin, bool(extra.get("graphs")))
                if count == 1 and not extra.get("churn") and "max_total_num_tokens" in rows[0]:
                    solo[key] = rows[0]["max_total_num_tokens"]
                for row in rows:
                    if key in solo and "max_total_num_tokens" in row:
                        row["ratio_to_solo"] = round(row["max_total_num_tokens"] / solo[key], 4)
                results["rounds"].append({"shape": shape, "scenario": name, "mode": mode, "rows": rows})
                print(report_round(results["rounds"][-1]), flush=True)
                with open(args.out, "w") as f:
                    json.dump(results, f, indent=1)
    with open(args.out, "w") as f:
        json.dump(results, f, indent=1)
    if results["not_run"]:
        print("not run (deadline): " + ", ".join(results["not_run"]))


def report_round(r: dict[str, Any]) -> str:
    """One line per instance of round ``r``: the pool, its ratio to the same mode alone, the NVML footprint against
    the share (plugin) or ``ceil(f x total)`` (stock), the start time; a refusal or an error with its first line."""
    lines = []
    for row in r["rows"]:
        what = f"{r['shape']:<10} {r['scenario']:<16} {r['mode']:<7}"
        if "error" in row:
            first = (row.get("refusal") or row["error"]).splitlines()[0]
            loaded = "after its weights began to load" if row.get("weights_began") else "before its weights"
            lines.append(f"{what} {first[:160]} ({loaded}, after {row.get('start_s', 0):.1f} s)")
            continue
        ratio = row.get("ratio_to_solo")
        cap = row.get("cap")
        fit = (
            "-"
            if cap is None
            else f"{row['nvml_footprint'] / GiB:.2f}/{cap / GiB:.2f} {'OVER' if row['over_cap'] else 'ok'}"
        )
        marks = row.get("steps_s") or {}
        began = " ".join(f"{name} {marks[name]}" for name in STEPS if name in marks)
        lines.append(
            f"{what} {row['max_total_num_tokens']:>9} {'-' if ratio is None else f'{ratio:.4f}':>7}  {fit:<18} "
            f"{row['start_s']:>5.1f} s  {began}".rstrip()
        )
    return "\n".join(lines)


def report(files: list[str]) -> str:
    head = (
        f"{'shape':<10} {'round':<16} {'mode':<7} {'tokens':>9} {'of solo':>7}  {'NVML/share GiB':<18} {'start':>7}  "
        "steps began (s after SGLang's first log line)"
    )
    lines, results = [], []
    for path in files:
        with open(path) as f:
            results.append(json.load(f))
    lines = [f"# {result['command']}" for result in results] + [head, "-" * len(head)]
    for result in results:
        lines += [report_round(r) for r in result["rounds"]]
        if result.get("not_run"):
            lines.append("not run (deadline): " + ", ".join(result["not_run"]))
    return "\n".join(lines)


if __name__ == "__main__":
    main()
