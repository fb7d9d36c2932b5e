"""Stock vLLM beside vLLM with devmem's plugin: N instances started at the same instant, as separate processes.

Per instance: vLLM's "Available KV cache memory", ``num_gpu_blocks``, the ratio to the same mode started alone,
the NVML footprint after serving against ``ceil(u x total)`` (footprint minus that cap: ``over_cap_bytes``; the total
is the CUDA runtime's, of which vLLM and devmem both take their share: NVML's is larger by what the driver keeps,
0.47 GiB on an H100; a pinned round has no cap), the footprint and torch's reserved bytes after the start and after
serving (where serving grew, and whether inside torch's allocator), and the start time (``LLM(...)`` to ready, with
the seconds to the end of each step vLLM logs: :data:`STEPS`).
Models are saved with random weights from a config (``save_pretrained``): the TinyLlama-1.1B shape, a Qwen2 shape
and a Qwen3 shape (both with a 151,936-token vocabulary). Stock and plugin runs
alternate in one run, so every figure has its baseline beside it. Needs vLLM (the GPU machines have no network: a
trimmed copy of the release's wheel, unpacked there, is put first on the instances' path by ``--vllm-path``) and
devmem installed with its entry points (``pip install --no-deps -e .``), so that ``DEVMEM_VLLM=1`` loads the plugin.

The release is the one on the path (recorded per instance); ``--runner v1|v2|default`` sets
``VLLM_USE_V2_MODEL_RUNNER`` (``default``: unset, the release's own choice; 0.34 has V2 only). Each round of
docs/vllm.md's list is one ``--scenarios`` value, so that one command runs one round:
solo, two at 0.3, four and five at 0.2, graphs in the release's default mode, a co-tenant allocating and freeing
12 GiB every 0.1 s, two pinned starts that do not fit, and the heaviest sampling vLLM accepts beside a light load.

Every round's instances share a profile store of the round's own (``DEVMEM_PROFILE_DIR``; a ``-warm`` round reads
the one of the round it repeats), so that no round plans from figures an earlier round stored.

Usage: python benchmarks/vllm_cotenants.py [--shapes tinyllama,qwen3] [--scenarios ...] [--runner default]
       [--vllm-path DIR] [--deadline SECONDS] [--out results.json]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
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
    "qwen2": dict(
        kind="qwen2",
        hidden_size=1536,
        intermediate_size=8960,
        num_hidden_layers=28,
        num_attention_heads=12,
        num_key_value_heads=2,
        vocab_size=151936,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
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
# name: (instances, utilization, mode(s), extra): "both" runs stock then plugin. extra: "churn" (a co-tenant
# allocating and freeing 12 GiB every 0.1 s during the start), "graphs" (CUDA graphs in the release's default mode),
# "pinned" (kv_cache_memory_bytes as a fraction of the device total), "load" (one workload per instance: light or heavy)
SCENARIOS: dict[str, tuple[int, float, str, dict[str, Any]]] = {
    "solo-0.3": (1, 0.3, "both", {}),
    "solo-0.3-warm": (1, 0.3, "both", {}),  # the start-time comparison: caches warm for both modes
    "two-0.3": (2, 0.3, "both", {}),
    "solo-0.2": (1, 0.2, "both", {}),
    "four-0.2": (4, 0.2, "both", {}),
    "five-0.2": (5, 0.2, "plugin", {}),
    "churn-0.3": (1, 0.3, "both", {"churn": True}),
    "graphs-solo-0.3": (1, 0.3, "both", {"graphs": True}),
    "graphs-two-0.3": (2, 0.3, "both", {"graphs": True}),
    "pinned-two-0.49": (2, 0.3, "both", {"pinned": 0.49}),  # two caches of 0.49 x total fit, with the weights not
    "sampling-0.3": (2, 0.3, "both", {"load": ["heavy", "light"]}),
}
# the heaviest sampling vLLM accepts beside a light load (issue: "never over under the heaviest serving"): every
# option on over the largest batch (``max_num_seqs`` short prompts, decoded together), and prompt logprobs over long
# prompts. A load is a list of groups; ``prompts=None`` is the engine's max_num_seqs.
EVERY_OPTION = dict(
    temperature=0.8,
    top_p=0.9,
    top_k=50,
    min_p=0.01,
    presence_penalty=0.5,
    frequency_penalty=0.5,
    repetition_penalty=1.2,
    logprobs=20,
)
LOADS: dict[str, list[dict[str, Any]]] = {
    "plain": [dict(prompts=32, length=200, params={})],
    "light": [dict(prompts=48, length=690, params={})],
    "heavy": [
        dict(prompts=None, length=24, params=EVERY_OPTION),
        dict(prompts=16, length=1990, params=dict(EVERY_OPTION, prompt_logprobs=20)),
    ],
}


def save_model(shape: str, root: str) -> str:
    import torch
    import transformers

    spec = dict(SHAPES[shape])
    kind = spec.pop("kind")
    name = {"llama": "Llama", "qwen2": "Qwen2", "qwen3": "Qwen3"}[kind]
    config_cls = getattr(transformers, f"{name}Config")
    model_cls = getattr(transformers, f"{name}ForCausalLM")
    path = os.path.join(root, shape)
    torch.manual_seed(0)
    model_cls(config_cls(torch_dtype="bfloat16", **spec)).to(torch.bfloat16).save_pretrained(path)
    return path


#: The steps of a start, each by the first line vLLM logs at its end (0.24-0.34): the weights loaded, the cache
#: sized, graphs captured (where they are), the engine ready.
STEPS = {
    "weights": "Model loading took",
    "sized": "Available KV cache memory",
    "graphs": "Graph capturing finished",
    "ready": "init engine (profile, create kv cache, warmup model) took",
}


def steps(stamped: list[tuple[float, str]], began: float) -> dict[str, float]:
    """Seconds from ``began`` (``LLM(...)`` called) to the end of each of :data:`STEPS` that vLLM logged, from the
    log records' own times (``stamped``: time, message): where a start spent its time, stock or not."""
    found: dict[str, float] = {}
    for at, message in stamped:
        for name, marker in STEPS.items():
            if name not in found and message.startswith(marker):
                found[name] = round(at - began, 2)
    return found


def own_footprint(handle: Any) -> int:
    """This process's device memory as raw NVML lists it (``nvmlDeviceGetComputeRunningProcesses``)."""
    import pynvml

    procs = pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
    return sum(p.usedGpuMemory or 0 for p in procs if p.pid == os.getpid())


def instance(args: argparse.Namespace) -> None:
    """One vLLM instance: waits for the start instant, starts, serves, and writes its figures as JSON."""
    import logging

    os.environ.setdefault("VLLM_USE_FLASHINFER_SAMPLER", "0")
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    lines: list[str] = []
    stamped: list[tuple[float, str]] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())
            stamped.append((record.created, lines[-1]))

    import pynvml
    import torch
    import vllm
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    logging.getLogger("vllm").addHandler(Keep())
    while time.time() < args.start_at:
        time.sleep(0.005)
    t0 = time.time()
    out: dict[str, Any] = {"pid": os.getpid(), "mode": "plugin" if args.plugin else "stock", "vllm": vllm.__version__}
    try:
        options: dict[str, Any] = dict(
            model=args.model,
            gpu_memory_utilization=args.util,
            skip_tokenizer_init=True,
            attention_backend="TRITON_ATTN",
            max_model_len=2048,
            seed=0,
        )
        if args.pinned:
            pynvml.nvmlInit()
            total = pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(0)).total
            options.update(kv_cache_memory_bytes=int(args.pinned * total))
        if args.graphs:  # full decode graphs without torch.compile (not carried): with compilation off, the
            # release's default mode captures nothing (seen on 0.26.0: the footprint equalled the eager one's)
            options.update(enforce_eager=False, compilation_config={"mode": 0, "cudagraph_mode": "FULL_DECODE_ONLY"})
        else:
            options.update(enforce_eager=True)
        llm = LLM(**options)
        out["start_s"] = time.time() - t0
        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        out["runtime_total"] = int(torch.cuda.mem_get_info()[1])
        out["after_start"] = {"nvml": own_footprint(handle), "torch_reserved": int(torch.cuda.memory_reserved())}
        out["runner"] = os.environ.get("VLLM_USE_V2_MODEL_RUNNER", "default")
        largest = int(llm.llm_engine.vllm_config.scheduler_config.max_num_seqs)
        prompts, params = [], []
        for group in LOADS[args.load or "plain"]:
            for i in range(largest if group["prompts"] is None else group["prompts"]):
                prompts.append(
                    TokensPrompt(prompt_token_ids=[1 + (i * 7 + j) % 30000 for j in range(group["length"] + i % 8)])
                )
                params.append(SamplingParams(max_tokens=16, ignore_eos=True, detokenize=False, **group["params"]))
        llm.generate(prompts, params)
        out["requests"] = len(prompts)
        out["num_gpu_blocks"] = llm.llm_engine.vllm_config.cache_config.num_gpu_blocks
        out["nvml_footprint"] = own_footprint(handle)
        out["after_serving"] = {"nvml": out["nvml_footprint"], "torch_reserved": int(torch.cuda.memory_reserved())}
        out["total"] = pynvml.nvmlDeviceGetMemoryInfo(handle).total
    except Exception as exc:  # a refused start is a result
        out["error"] = f"{type(exc).__name__}: {exc}"[:2000]
        out["start_s"] = time.time() - t0
    out["steps_s"] = steps(stamped, t0)
    for line in lines:
        if m := re.search(r"Available KV cache memory: ([0-9.]+) GiB", line):
            out["available_gib"] = float(m.group(1))
        if line.startswith("devmem sized the KV cache") or line.startswith("devmem: warm-up"):
            out.setdefault("devmem_lines", []).append(line)
    with open(args.out, "w") as f:
        json.dump(out, f)
    os._exit(0)  # vLLM's engine threads would keep the process alive


CHURN = """
import time, torch
end = time.time() + {seconds}
while time.time() < end:
    x = torch.empty(12 << 30, dtype=torch.uint8, device="cuda"); torch.cuda.synchronize(); time.sleep(0.05)
    del x; torch.cuda.empty_cache(); time.sleep(0.05)
"""


def round_of(
    model: str,
    count: int,
    util: float,
    plugin: bool,
    extra: dict[str, Any],
    tmp: str,
    args: argparse.Namespace,
    profiles: str,
) -> list[dict]:
    start_at = time.time() + 3.0
    env = dict(os.environ, DEVMEM_VLLM="1" if plugin else "0", DEVMEM_PROFILE_DIR=profiles)
    env.pop("VLLM_USE_V2_MODEL_RUNNER", None)
    if args.runner != "default":
        env["VLLM_USE_V2_MODEL_RUNNER"] = "1" if args.runner == "v2" else "0"
    if args.vllm_path:
        env["PYTHONPATH"] = os.pathsep.join([args.vllm_path, *filter(None, [env.get("PYTHONPATH")])])
    churn = None
    if extra.get("churn"):
        churn = subprocess.Popen([sys.executable, "-c", CHURN.format(seconds=90)])
    procs = []
    for i in range(count):
        out = os.path.join(tmp, f"r{time.time_ns()}_{i}.json")
        argv = (
            [
                sys.executable,
                __file__,
                "instance",
                "--model",
                model,
                "--util",
                str(util),
                "--out",
                out,
                "--start-at",
                str(start_at),
            ]
            + (["--plugin"] if plugin else [])
            + (["--graphs"] if extra.get("graphs") else [])
            + (["--pinned", str(extra["pinned"])] if extra.get("pinned") else [])
            + (["--load", extra["load"][i]] if extra.get("load") else [])
        )
        procs.append((subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL), out))
    rows = []
    for proc, out in procs:
        try:
            proc.wait(timeout=400)
        except subprocess.TimeoutExpired:
            proc.kill()
        try:
            with open(out) as f:
                rows.append(json.load(f))
        except OSError:
            rows.append({"error": f"no result (exit {proc.returncode})", "mode": "plugin" if plugin else "stock"})
    if churn is not None:
        churn.kill()
        churn.wait()
    for row in rows:
        if "total" in row:  # the share of the total vLLM and devmem read (the runtime's), none for a pinned cache
            total = row.get("runtime_total", row["total"])
            row["cap"] = None if extra.get("pinned") else math.ceil(util * total)
            row["over_cap_bytes"] = None if row["cap"] is None else row["nvml_footprint"] - row["cap"]
            row["over_cap"] = None if row["cap"] is None else row["nvml_footprint"] > row["cap"]
    return rows


def fit(row: dict[str, Any]) -> str:
    """The footprint against the cap: ``23.31/23.75 ok``, ``23.83/23.75 OVER``, ``42.47/- pinned``."""
    if row.get("cap") is None:
        return f"{row['nvml_footprint'] / GiB:.2f}/- pinned"
    return f"{row['nvml_footprint'] / GiB:.2f}/{row['cap'] / GiB:.2f} {'OVER' if row['over_cap'] else 'ok'}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command")
    one = sub.add_parser("instance")
    one.add_argument("--model", required=True)
    one.add_argument("--util", type=float, required=True)
    one.add_argument("--out", required=True)
    one.add_argument("--start-at", type=float, required=True)
    one.add_argument("--plugin", action="store_true")
    one.add_argument("--graphs", action="store_true")
    one.add_argument("--pinned", type=float, default=0, help="kv_cache_memory_bytes as a fraction of the total")
    one.add_argument("--load", choices=sorted(LOADS))
    table = sub.add_parser("report", help="the table of one or more result files (what results/h200/ holds)")
    table.add_argument("files", nargs="+")
    parser.add_argument("--shapes", default="tinyllama,qwen3")
    parser.add_argument("--runner", choices=("v1", "v2", "default"), default="default")
    parser.add_argument("--vllm-path", default="", help="a folder put first on the instances' PYTHONPATH")
    parser.add_argument("--scenarios", default=",".join(SCENARIOS))
    parser.add_argument("--out", default="vllm_cotenants.json")
    parser.add_argument("--deadline", type=float, default=None, help="start no round after this many seconds")
    args = parser.parse_args()
    if args.command == "instance":
        return instance(args)
    if args.command == "report":
        return print(report(args.files))
    from common import round_profile_store  # here: the instances, stock ones included, never import devmem

    began, tmp = time.time(), tempfile.mkdtemp()
    results: dict[str, Any] = {"command": " ".join(sys.argv), "rounds": [], "not_run": []}
    for shape in args.shapes.split(","):
        model = save_model(shape, tmp)
        solo: dict[tuple, int] = {}
        for name in args.scenarios.split(","):
            count, util, modes, extra = SCENARIOS[name]
            for plugin in {"both": (False, True), "plugin": (True,)}[modes]:
                mode = "plugin" if plugin else "stock"
                if args.deadline is not None and time.time() - began > args.deadline:
                    results["not_run"].append(f"{shape} {name} {mode}")
                    continue
                profiles = round_profile_store(tmp, shape, name, mode)
                rows = round_of(model, count, util, plugin, extra, tmp, args, profiles)
                key = (util, plugin, bool(extra.get("graphs")))
                plain = not (extra.get("pinned") or extra.get("load"))  # a ratio to solo means something
                if count == 1 and plain and not extra.get("churn") and "num_gpu_blocks" in rows[0]:
                    solo[key] = rows[0]["num_gpu_blocks"]
                for row in rows:
                    if key in solo and "num_gpu_blocks" in row:
                        row["ratio_to_solo"] = round(row["num_gpu_blocks"] / solo[key], 4)
                for row in rows:
                    if not plain:
                        row.pop("ratio_to_solo", None)
                results["rounds"].append(
                    {
                        "shape": shape,
                        "scenario": name,
                        "mode": mode,
                        "runner": args.runner,
                        "rows": rows,
                    }
                )
                print(summary(results["rounds"][-1]), flush=True)
                with open(args.out, "w") as f:
                    json.dump(results, f, indent=1)
    with open(args.out, "w") as f:
        json.dump(results, f, indent=1)
    if results["not_run"]:
        print("not run (deadline): " + ", ".join(results["not_run"]))


def report(files: list[str]) -> str:
    """One line per instance of every round in ``files``: blocks, ratio to the same mode alone, the NVML
    footprint against ``ceil(u x total)`` (:func:`fit`), the start time; refusals and errors with their first line."""
    head = f"{'shape':<10} {'round':<16} {'mode':<7} {'KV GiB':>7} {'blocks':>8} {'of solo':>7}  "
    head += f"{'NVML/cap GiB':<16} start"
    results = []
    for path in files:
        with open(path) as f:
            results.append(json.load(f))
    lines = [f"# {result['command']}" for result in results] + [head, "-" * len(head)]
    for result in results:
        for r in result["rounds"]:
            for row in r["rows"]:
                what = f"{r['shape']:<10} {r['scenario']:<16} {r['mode']:<7}"
                if "error" in row:
                    first = row["error"].splitlines()[0]
                    lines.append(f"{what} {first[:150]} (after {row.get('start_s', 0):.1f} s)")
                    lines += [f"{'':<36}{line.strip()[:160]}" for line in row["error"].splitlines()[1:] if line.strip()]
                    continue
                ratio = row.get("ratio_to_solo")
                taken = "".join(f" {name} {seconds:.1f}" for name, seconds in row.get("steps_s", {}).items())
                lines.append(
                    f"{what} {row.get('available_gib', 0):>7.2f} {row['num_gpu_blocks']:>8} "
                    f"{'-' if ratio is None else f'{ratio:.4f}':>7}  {fit(row):<16} {row['start_s']:.1f} s" + taken
                )
    return "\n".join(lines)


def summary(r: dict[str, Any]) -> str:
    cells = []
    for row in r["rows"]:
        if "error" in row:
            cells.append("REFUSED/ERROR: " + row["error"][:300].replace("\n", " "))
        else:
            cells.append(
                f"avail {row.get('available_gib')} GiB, blocks {row.get('num_gpu_blocks')}, ratio "
                f"{row.get('ratio_to_solo')}, nvml {fit(row)} GiB, start {row['start_s']:.1f} s"
            )
    return f"{r['shape']} {r['scenario']} {r['mode']}: " + " | ".join(cells)


if __name__ == "__main__":
    main()
