"""devmem.integrations.transformers on a real NVIDIA GPU (marked ``gpu``; skipped without CUDA, NVML or transformers).

A small Llama (random weights, GQA: 8 heads over 2 KV heads, bf16) sized at 1 GiB of growth, then served with
prompts that fill most of the cache, so that decode steps read nearly all of it back: this process's device memory,
sampled from NVML while it serves, stays within the request.

    python -m pytest -m gpu tests/integrations/test_gpu_transformers.py -s
"""

from __future__ import annotations

import threading

import pytest

import devmem
from devmem import GiB
from devmem.engine import MemorySnapshot

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers", minversion="5.17")


def _why_not() -> str | None:
    if not torch.cuda.is_available():
        return "needs torch with a CUDA device"
    platform = devmem.current_platform()
    if platform.name == "cpu" or platform.get_process_memory_usage(0) is None:
        return f"needs a per-process figure on a GPU platform (platform {platform.name!r})"
    return None


WHY_NOT = _why_not()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(WHY_NOT is not None, reason=WHY_NOT or "")]

REQUEST = 1 * GiB


@pytest.fixture(autouse=True)
def allocator_without_a_cap(tmp_path, monkeypatch):
    """Each test sizes from an empty profile store and lifts the allocator cap its sizing set, so that the
    tests after it run with the whole device."""
    from devmem.engine.allocator_cap import limit_allocator

    monkeypatch.setenv("DEVMEM_PROFILE_DIR", str(tmp_path / "profiles"))
    yield
    limit_allocator(torch.device("cuda", 0), None)


PROMPT = 2048
NEW = 4


class Peak:
    """This process's device memory from the platform (NVML), sampled every 5 ms in a thread; the largest seen."""

    def __init__(self, platform):
        self.platform, self.peak = platform, 0
        self._stop = threading.Event()

    def _run(self):
        while not self._stop.wait(0.005):
            self.peak = max(self.peak, self.platform.get_process_memory_usage(0) or 0)

    def __enter__(self):
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.platform.get_process_memory_usage(0) or 0)


def test_a_sized_engine_that_fills_its_cache_stays_within_its_request():
    from devmem.integrations.transformers import block_tokens, size_continuous_batching

    platform = devmem.current_platform()
    devmem.engine.release_allocator_cache(0)  # what earlier tests left cached is not this engine's
    baseline = MemorySnapshot.measure(0, platform)
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=2,
        num_attention_heads=8,
        num_key_value_heads=2,
        vocab_size=1024,
        max_position_embeddings=PROMPT + 2 * NEW,
    )
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        with torch.device("cuda", 0):
            model = transformers.LlamaForCausalLM(config).eval()
    finally:
        torch.set_default_dtype(default)
    generation = transformers.GenerationConfig(max_new_tokens=NEW, do_sample=False, eos_token_id=-1, pad_token_id=0)
    sized = size_continuous_batching(
        model,
        utilization=REQUEST / baseline.total,
        baseline=baseline,
        config=transformers.ContinuousBatchingConfig(max_batch_tokens=512),
        generation_config=generation,
    )
    print(sized.explain())
    # sdpa repeats the keys and values it reads back to every head: the peak grows faster than the held tensors
    assert sized.read_back_block_bytes > 0
    tokens = sized.num_blocks * block_tokens(sized.config)
    prompts = [[(i * 131 + j) % 1000 + 1 for j in range(PROMPT)] for i in range(int(0.8 * tokens) // (PROMPT + NEW))]
    assert prompts, f"{sized.num_blocks} blocks hold no prompt of {PROMPT} tokens"
    with Peak(platform) as peak:
        outputs = model.generate_batch(prompts, generation_config=generation, continuous_batching_config=sized.config)
    grown = peak.peak - (baseline.process or 0)
    print(
        f"{len(prompts)} prompts of {PROMPT} tokens, {sized.num_blocks} blocks: peak growth {grown} bytes, "
        f"requested {sized.plan.breakdown['requested']} bytes"
    )
    assert all(o.error is None and len(o.generated_tokens) == NEW for o in outputs.values())
    assert grown <= sized.plan.breakdown["requested"]


def test_the_forward_waits_for_the_batch_inputs_on_a_busy_device(monkeypatch):
    """transformers writes a batch's inputs on the current stream and runs the forward on its compute stream. With
    the inputs' fresh memory holding out-of-range token ids and cache indices and the current stream held back
    (engines started together keep the device busy), a forward that does not wait reads them: a device assert."""
    from transformers.generation.continuous_batching import input_outputs

    from devmem.integrations.transformers import size_continuous_batching

    setup = input_outputs.ContinuousBatchingIOs._setup_static_tensors

    def poisoned(self, *args, **kwargs):
        setup(self, *args, **kwargs)
        self._bulk_input_tensor.fill_(2**30)  # token ids and positions past any table
        self.read_index_storage.fill_(2**40)  # cache indices past any cache
        torch.cuda.synchronize()
        torch.cuda._sleep(200_000_000)  # what the current stream writes next comes late

    monkeypatch.setattr(input_outputs.ContinuousBatchingIOs, "_setup_static_tensors", poisoned)
    baseline = MemorySnapshot.measure(0, devmem.current_platform())
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=2,
        num_attention_heads=8,
        num_key_value_heads=2,
        vocab_size=1024,
    )
    with torch.device("cuda", 0):
        model = transformers.LlamaForCausalLM(config).eval()
    generation = transformers.GenerationConfig(max_new_tokens=NEW, do_sample=False, eos_token_id=-1, pad_token_id=0)
    sized = size_continuous_batching(
        model,
        utilization=REQUEST / baseline.total,
        baseline=baseline,
        config=transformers.ContinuousBatchingConfig(max_batch_tokens=512),
        generation_config=generation,
    )
    torch.cuda.synchronize()
    assert sized.num_blocks > 0
