"""devmem.integrations.transformers across the architectures transformers' continuous batching serves, on the CPU
(host memory as the device): tiny random-weight models (2 layers, hidden 64) sized, then served with the sized
config; the models it cannot serve refused, naming why, before the engine runs; hostile inputs refused or served.
"""

from __future__ import annotations

import inspect
import threading

import pytest
from forward_counter import Forwards

transformers = pytest.importorskip("transformers", minversion="5.17")
torch = pytest.importorskip("torch")

from devmem import MiB, SizingError  # noqa: E402
from devmem.cpu import CpuPlatform  # noqa: E402
from devmem.engine import MemorySnapshot  # noqa: E402
from devmem.integrations.kit import attention_types, model_key, one_layer_per_attention_type  # noqa: E402
from devmem.integrations.transformers import run_engine, size_continuous_batching  # noqa: E402

pytestmark = pytest.mark.slow  # each test builds a model: `pytest -m slow` and CI run them

#: What the engine may take in all; served footprints may pass it by the cpu platform's allowance (RSS noise from
#: glibc's arenas and the serving thread), as benchmarks/transformers_cb.py judges them (``SAME_BUDGET["cpu"]``).
REQUEST = 320 * MiB
CPU_ALLOWANCE = 8 * MiB
SMALL = {
    "vocab_size": 256,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 512,
    "pad_token_id": 0,
}
MIXTRAL = {"num_local_experts": 4, "num_experts_per_tok": 2}
SLIDING_FULL = {"head_dim": 16, "sliding_window": 32, "layer_types": ["sliding_attention", "full_attention"]}
#: name: (config class, model class, fields over SMALL, dtype). Every family transformers 5.24's continuous
#: batching serves that the integration was checked with.
ARCHITECTURES = {
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", {}, torch.float32),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", {"head_dim": 16}, torch.float32),
    "qwen3_moe": (
        "Qwen3MoeConfig",
        "Qwen3MoeForCausalLM",
        {"head_dim": 16, "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32},
        torch.float32,
    ),
    "mixtral": ("MixtralConfig", "MixtralForCausalLM", MIXTRAL, torch.float32),
    "mistral_sliding": ("MistralConfig", "MistralForCausalLM", {"sliding_window": 32}, torch.float32),
    "gemma2": ("Gemma2Config", "Gemma2ForCausalLM", SLIDING_FULL, torch.float32),
    "gemma3_text": ("Gemma3TextConfig", "Gemma3ForCausalLM", SLIDING_FULL, torch.float32),
    "gemma3_two_sliding_one_full": (
        "Gemma3TextConfig",
        "Gemma3ForCausalLM",
        {**SLIDING_FULL, "num_hidden_layers": 3, "layer_types": ["sliding_attention"] * 2 + ["full_attention"]},
        torch.float32,
    ),
    "qwen2_max_window_layers": (
        "Qwen2Config",
        "Qwen2ForCausalLM",
        {"use_sliding_window": True, "sliding_window": 32, "max_window_layers": 1},
        torch.float32,
    ),
    "cohere2_window_pattern": (
        "Cohere2Config",
        "Cohere2ForCausalLM",
        {"sliding_window": 32, "sliding_window_pattern": 2},
        torch.float32,
    ),
    "phi3": ("Phi3Config", "Phi3ForCausalLM", {}, torch.float32),
    "phi_layernorm": ("PhiConfig", "PhiForCausalLM", {}, torch.float32),
    "llama_tied_embeddings": ("LlamaConfig", "LlamaForCausalLM", {"tie_word_embeddings": True}, torch.float32),
    "llama_bfloat16": ("LlamaConfig", "LlamaForCausalLM", {}, torch.bfloat16),
    "llama_quantization_config": (  # a config that looks quantized; the weights are what they are
        "LlamaConfig",
        "LlamaForCausalLM",
        {"quantization_config": {"quant_method": "bitsandbytes", "load_in_4bit": True}},
        torch.float32,
    ),
}


def build(name, **fields):
    config_class, model_class, extra, dtype = ARCHITECTURES[name]
    torch.manual_seed(0)
    config = getattr(transformers, config_class)(**{**SMALL, **extra, **fields})
    return getattr(transformers, model_class)(config).to(dtype).eval()


def cb_config(**fields):
    """Blocks of 16 tokens (``page_size`` from 5.18 on, ``block_size`` in 5.17) and batches of 64 tokens."""
    parameters = inspect.signature(transformers.ContinuousBatchingConfig).parameters
    tokens = "page_size" if "page_size" in parameters else "block_size"
    return transformers.ContinuousBatchingConfig(**{tokens: 16, "max_batch_tokens": 64, **fields})


def greedy(**fields):
    return transformers.GenerationConfig(
        **{"max_new_tokens": 6, "do_sample": False, "eos_token_id": -1, "pad_token_id": 0, **fields}
    )


def anonymous_memory():
    """This process's anonymous RSS and shared memory, as benchmarks/transformers_cb.py's Footprint reads it."""
    with open("/proc/self/status", encoding="ascii") as status:
        return 1024 * sum(int(line.split()[1]) for line in status if line.startswith(("RssAnon:", "RssShmem:")))


class PeakFootprint:
    """The largest ``anonymous_memory()`` sampled while the block runs, above its figure when ``start`` ran."""

    def __init__(self):
        self.start = anonymous_memory()
        self.peak = self.start
        self._stop = threading.Event()

    def _sample(self):
        while not self._stop.wait(0.01):
            self.peak = max(self.peak, anonymous_memory())

    def __enter__(self):
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, anonymous_memory())

    @property
    def growth(self):
        return self.peak - self.start


def load_kernels_of_every_token_count(name, tokens=64):
    """Run a twin of the model once at every token count serving can batch (1 to ``max_batch_tokens``): torch's CPU
    bf16 matmuls (oneDNN) compile and keep a kernel per new shape, about 0.6 MiB each here (3.3 MiB a token count
    for the bf16 Llama), in the process, outside any engine. Alone in a fresh process they would land inside the
    footprint; after the rest of the suite they are there already. docs/transformers.md, "Limits"."""
    twin = build(name)
    with torch.no_grad():
        for count in range(1, tokens + 1):
            twin(torch.ones((1, count), dtype=torch.long), use_cache=False)


def serve(model, sized, generation, prompts=8):
    batch = [[(7919 * i + 31 * j) % 250 + 1 for j in range(24)] for i in range(prompts)]
    outputs = model.generate_batch(batch, generation_config=generation, continuous_batching_config=sized.config)
    return [o for o in outputs.values() if o.error is None and len(o.generated_tokens) == generation.max_new_tokens]


@pytest.mark.parametrize("name", sorted(ARCHITECTURES))
def test_each_architecture_is_sized_then_serves_every_request_within_its_share(name, tmp_path):
    load_kernels_of_every_token_count(name)
    footprint = PeakFootprint()  # the baseline, before the model exists
    baseline = MemorySnapshot.measure(0, CpuPlatform())
    model = build(name)
    with footprint:
        sized = size_continuous_batching(
            model,
            utilization=REQUEST / baseline.total,
            baseline=baseline,
            config=cb_config(),
            generation_config=greedy(),
            store=tmp_path,
        )
        served = serve(model, sized, greedy())
    assert len(served) == 8 and sized.num_blocks > 0
    assert footprint.growth <= REQUEST + CPU_ALLOWANCE, (footprint.growth / MiB, sized.explain())


@pytest.mark.parametrize(
    ("name", "types"),
    [
        ("qwen2", 1),
        ("mistral_sliding", 1),
        ("gemma2", 2),
        ("gemma3_text", 2),
        ("gemma3_two_sliding_one_full", 2),
        ("phi_layernorm", 1),
        ("qwen2_max_window_layers", 2),
        ("cohere2_window_pattern", 2),
    ],
)
def test_one_layer_per_attention_type_keeps_one_layer_of_each_type(name, types):
    model = build(name)
    layers = model.model.layers
    ran = []
    for i, layer in enumerate(layers):
        layer.register_forward_hook(lambda *args, i=i: ran.append(i))
    with torch.no_grad(), one_layer_per_attention_type(model) as kept:
        model(torch.tensor([[1, 2, 3]]), use_cache=False)
    named = getattr(model.config, "layer_types", None) or ["full_attention"] * len(layers)
    assert kept == types == len(ran) == len({named[i] for i in ran})
    assert model.model.layers is layers


def test_layers_whose_attention_has_a_window_of_its_own_count_as_a_type_of_their_own():
    model = build("mistral_sliding")  # no layer_types: the window is the config's, every layer alike
    assert len(set(attention_types(model, model.model.layers))) == 1
    model.model.layers[1].self_attn.sliding_window = 8  # a window set per layer by a key other than layer_types
    with one_layer_per_attention_type(model) as kept:
        assert kept == 2


def test_a_kept_layer_gets_the_mask_of_its_own_attention_type():
    model = build("gemma3_two_sliding_one_full", sliding_window=2)  # layers 0 and 2 kept: sliding, then full
    model.set_attn_implementation("eager")  # eager models are given their masks
    masks = {}
    for i, layer in enumerate(model.model.layers):
        layer.register_forward_pre_hook(
            lambda module, args, kwargs, i=i: masks.__setitem__(i, kwargs["attention_mask"]), with_kwargs=True
        )
    ids = torch.tensor([[1, 2, 3, 4, 5, 6]])
    with torch.no_grad():
        model(ids, use_cache=False)
        every = dict(masks)
        masks.clear()
        with one_layer_per_attention_type(model):
            model(ids, use_cache=False)
    assert sorted(masks) == [0, 2]
    assert all(torch.equal(masks[i], every[i]) for i in masks)
    assert model.config.layer_types == ["sliding_attention", "sliding_attention", "full_attention"]


@pytest.mark.parametrize("name", ["gemma2", "gemma3_two_sliding_one_full", "cohere2_window_pattern"])
def test_a_run_through_one_layer_per_type_holds_what_a_run_through_all_holds(name):
    model = build(name)
    config = cb_config(max_memory_percent=1.0)
    every, one = run_engine(model, greedy(), config, 12), run_engine(model, greedy(), config, 12, all_layers=False)
    assert (one.cache_bytes, one.static_bytes, one.forward_tokens) == (
        every.cache_bytes,
        every.static_bytes,
        every.forward_tokens,
    )
    assert (every.layers_run, one.layers_run) == (None, 2)
    assert len(model.model.layers) == model.config.num_hidden_layers == len(model.config.layer_types)


def test_decoder_layers_are_found_where_they_are_not_under_model_layers():
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=256, n_embd=64, n_layer=2, n_head=4, n_positions=512)
    model = transformers.GPT2LMHeadModel(config).eval()  # its layers are transformer.h
    layers = model.transformer.h
    with one_layer_per_attention_type(model) as kept:
        assert kept == 1 and len(model.transformer.h) == 1
    assert model.transformer.h is layers


@pytest.mark.parametrize(
    "change",
    [
        {"num_key_value_heads": 1},
        {"head_dim": 32},
        {"num_hidden_layers": 3, "layer_types": ["sliding_attention", "full_attention", "full_attention"]},
        {"sliding_window": 16},
        {"layer_types": ["full_attention", "full_attention"]},
        {"intermediate_size": 256},
        {"vocab_size": 512},
        {"tie_word_embeddings": False},  # Gemma2 ties them by default
    ],
    ids=lambda change: next(iter(change)),
)
def test_the_model_key_changes_with_every_architecture_field_that_changes_memory(change):
    assert model_key(build("gemma2", **change)) != model_key(build("gemma2"))


def test_the_model_key_changes_with_the_dtype():
    model = build("qwen2")
    before = model_key(model)
    assert model_key(model.to(torch.bfloat16)) != before


def refused(model, message, generation=None, **arguments):
    forwards = Forwards(model)
    baseline = MemorySnapshot.measure(0, CpuPlatform())
    with pytest.raises(SizingError, match=message):
        size_continuous_batching(
            model,
            utilization=REQUEST / baseline.total,
            baseline=baseline,
            config=cb_config(),
            generation_config=generation or greedy(),
            store=False,
            **arguments,
        )
    assert forwards.count == 0


def test_a_hybrid_model_is_refused_naming_its_layer_types():
    torch.manual_seed(0)
    config = transformers.Qwen3NextConfig(
        **SMALL,
        head_dim=16,
        layer_types=["linear_attention", "full_attention"],
        num_experts=2,
        num_experts_per_tok=1,
        moe_intermediate_size=32,
        linear_num_value_heads=2,
        linear_num_key_heads=2,
        linear_key_head_dim=16,
        linear_value_head_dim=16,
    )
    refused(transformers.Qwen3NextForCausalLM(config).eval(), r"layer_types hold \['linear_attention'\]")


def paged_update_requires_kwargs():
    from transformers.generation.continuous_batching.cache import PagedAttentionCache

    parameter = inspect.signature(PagedAttentionCache.update).parameters.get("kwargs")
    return parameter is not None and parameter.default is inspect.Parameter.empty


@pytest.mark.skipif(not paged_update_requires_kwargs(), reason="this transformers' paged cache takes no kwargs=")
def test_a_model_whose_attention_calls_the_cache_without_kwargs_is_refused_naming_it():
    torch.manual_seed(0)
    config = transformers.GPTNeoXConfig(**{k: v for k, v in SMALL.items() if k != "num_key_value_heads"})
    model = transformers.GPTNeoXForCausalLM(config).eval()
    refused(model, r"GPTNeoXAttention.forward calls the cache's update without kwargs=")


def test_a_model_on_the_meta_device_is_refused():
    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**SMALL))
    with pytest.raises(SizingError, match=r"weights are on the meta device \(devices \['meta'\]\)"):
        size_continuous_batching(model, utilization=0.01, config=cb_config(), generation_config=greedy(), store=False)


def test_a_model_whose_parameters_are_split_across_devices_is_refused_naming_them():
    model = build("qwen2")
    model.lm_head.to("meta")  # what an offloaded layer leaves on the model
    refused(model, r"devices \['cpu', 'meta'\]")


def test_beam_search_is_refused_naming_num_beams():
    refused(build("qwen2"), r"generation_config.num_beams=2: .*no beam search", generation=greedy(num_beams=2))


def test_max_batch_tokens_beyond_the_sized_cache_is_refused_naming_both():
    model = build("qwen2")
    message = r"config.max_batch_tokens=256 is more than the sized cache holds \(\d+ blocks of 16"
    with pytest.raises(SizingError, match=message):
        size_continuous_batching(
            model,
            pinned_bytes=256 * 256 * 4,  # the batch's attention mask columns: a few blocks of cache, not 16
            config=cb_config(max_batch_tokens=256),
            generation_config=greedy(),
            store=False,
        )


@pytest.mark.parametrize(
    ("generation", "config"),
    [
        (greedy(do_sample=True, top_k=5), cb_config()),
        (greedy(), cb_config(use_cuda_graph=True)),  # transformers turns graphs off where there is no backend
        (greedy(), cb_config(max_memory_percent=0.5, scheduler_type="prefill_first")),
    ],
    ids=["do_sample", "cuda_graphs_on_cpu", "scheduler_and_memory_percent"],
)
def test_sampling_graphs_and_scheduler_options_are_sized_and_serve(generation, config, tmp_path):
    baseline = MemorySnapshot.measure(0, CpuPlatform())
    model = build("qwen2")
    sized = size_continuous_batching(
        model, utilization=REQUEST / baseline.total, baseline=baseline, config=config, generation_config=generation
    )
    assert len(serve(model, sized, generation)) == 8


def test_a_model_wrapped_by_torch_compile_is_sized_as_the_model_it_wraps_and_serves():
    baseline = MemorySnapshot.measure(0, CpuPlatform())
    model = build("qwen2")
    compiled = torch.compile(model)
    u = REQUEST / baseline.total
    sized = size_continuous_batching(
        compiled, utilization=u, baseline=baseline, config=cb_config(), generation_config=greedy()
    )
    assert sized.runs[0].forward_tokens == 64
    assert len(serve(compiled, sized, greedy())) == 8
