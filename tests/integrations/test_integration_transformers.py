"""devmem.integrations.transformers on the CPU: a tiny Llama (random weights from a config) served by transformers'
continuous batching with a devmem-sized ``ContinuousBatchingConfig``.

On the cpu platform the device is host memory, the per-process figure is RSS and torch's CPU allocator keeps no
peak statistics, so one block costs the tensors the engine holds per block: the paged cache and the batch's
static tensors. The cache is checked against a ``PagedAttentionCache`` built here with transformers' own
constructor, and against the Llama layout (keys and values of every layer for every token of the block).
"""

from __future__ import annotations

import inspect
import json
import logging
import subprocess
import sys
import threading

import pytest
from forward_counter import Forwards

transformers = pytest.importorskip("transformers", minversion="5.17")
torch = pytest.importorskip("torch")

from devmem import MiB, NotEnoughMemoryError, SizingError  # noqa: E402
from devmem.cpu import CpuPlatform  # noqa: E402
from devmem.engine import EngineMemory, MemorySnapshot, release_allocator_cache  # noqa: E402
from devmem.integrations.transformers import block_tokens, size_continuous_batching  # noqa: E402
from devmem.planner import requested_memory  # noqa: E402

pytestmark = pytest.mark.slow  # each test builds and serves a model: `pytest -m slow` and CI run them

TOKENS = 16  # tokens in a block
BATCH = 64  # max_batch_tokens
LLAMA = {
    "vocab_size": 256,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 512,
}
#: What the engine may use in all on the utilization path: the model, the run's leftovers and a few MiB of cache.
REQUEST = 160 * MiB


def cb_config(**fields):
    """A ContinuousBatchingConfig with blocks of TOKENS tokens (``page_size`` from 5.18 on, ``block_size`` in 5.17)."""
    name = (
        "page_size"
        if "page_size" in inspect.signature(transformers.ContinuousBatchingConfig).parameters
        else "block_size"
    )
    return transformers.ContinuousBatchingConfig(**{name: TOKENS, "max_batch_tokens": BATCH, **fields})


def build_model():
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(transformers.LlamaConfig(**LLAMA)).eval()


@pytest.fixture(autouse=True)
def profile_dir(tmp_path, monkeypatch):
    """Every test keeps its stored profiles in a folder of its own (a first start, unless it sizes twice)."""
    folder = tmp_path / "profiles"
    monkeypatch.setenv("DEVMEM_PROFILE_DIR", str(folder))
    return folder


@pytest.fixture
def baseline():
    """The engine's snapshot, taken before the model exists."""
    return MemorySnapshot.measure(0, CpuPlatform())


@pytest.fixture
def model(baseline):
    return build_model()


@pytest.fixture(scope="module")
def generation():
    return transformers.GenerationConfig(max_new_tokens=6, do_sample=False, eos_token_id=-1, pad_token_id=0)


@pytest.fixture(scope="module")
def engine(generation):
    """(model, baseline, sized): an engine sized at REQUEST bytes of host memory, as an engine does it."""
    baseline = MemorySnapshot.measure(0, CpuPlatform())
    model = build_model()
    sized = size_continuous_batching(
        model,
        utilization=utilization(baseline),
        config=cb_config(),
        generation_config=generation,
        baseline=baseline,
        store=False,
    )
    return model, baseline, sized


def utilization(baseline, nbytes=REQUEST):
    return nbytes / baseline.total


def llama_kv_block_bytes(dtype=torch.float32):
    """Keys and values of every layer for every token of one block, from the model's config."""
    head_dim = LLAMA["hidden_size"] // LLAMA["num_attention_heads"]
    return 2 * LLAMA["num_hidden_layers"] * TOKENS * LLAMA["num_key_value_heads"] * head_dim * dtype.itemsize


def cache_nbytes(model, num_blocks):
    """Bytes of the paged cache transformers allocates for ``num_blocks`` blocks, built with its own constructor."""
    from transformers.generation.continuous_batching.cache import PagedAttentionCache
    from transformers.generation.continuous_batching.distributed import DistributedHelper

    wanted = {
        "config": model.config,
        "continuous_batching_config": cb_config(num_blocks=num_blocks, max_memory_percent=1.0),
        "device": torch.device("cpu"),
        "distributed_helper": DistributedHelper(None, None),
        "tp_plan": {},
        "dtype": model.dtype,
    }
    accepted = inspect.signature(PagedAttentionCache.__init__).parameters
    cache = PagedAttentionCache(**{k: v for k, v in wanted.items() if k in accepted})
    tensors = [cache.cache_tensor] if hasattr(cache, "cache_tensor") else [*cache.key_cache, *cache.value_cache]
    return sum(t.untyped_storage().nbytes() for t in tensors)


def test_generate_batch_with_the_sized_config_serves_every_request(engine, generation):
    model, _, sized = engine
    prompts = [[(7 * i + j) % 250 + 1 for j in range(20 + 3 * i)] for i in range(8)]
    outputs = model.generate_batch(
        prompts, generation_config=generation, continuous_batching_config=sized.config, persistent_manager=True
    )
    try:
        used = model._cached_continuous_batching_manager.continuous_batching_config.num_blocks
    finally:
        model.destroy_cached_continuous_batching_manager()
    assert len(outputs) == len(prompts)
    assert all(o.error is None and len(o.generated_tokens) == generation.max_new_tokens for o in outputs.values())
    assert used == sized.num_blocks == sized.config.num_blocks > 0


def test_planned_blocks_follow_from_the_budget_and_the_block_bytes(engine):
    _, baseline, sized = engine
    plan = sized.plan
    assert plan.path == "utilization"
    assert plan.breakdown["requested"] == requested_memory(baseline.total, utilization(baseline))
    assert plan.kv_cache_bytes == plan.breakdown["requested"] - plan.breakdown["non_kv"]
    assert plan.block_bytes == sized.block_bytes
    assert sized.num_blocks == plan.kv_cache_bytes // sized.block_bytes


def test_a_block_costs_the_cache_and_the_batch_tensors_transformers_allocates_for_it(engine):
    model, _, sized = engine
    assert sized.kv_block_bytes == cache_nbytes(model, 9) - cache_nbytes(model, 8) == llama_kv_block_bytes()
    # one attention mask [max_batch_tokens, cached tokens + max_batch_tokens] in the model's dtype and one row of
    # int64 read indices per cached token: both grow with every block
    assert sized.static_block_bytes == TOKENS * (BATCH * model.dtype.itemsize + 8)
    assert sized.block_bytes == sized.kv_block_bytes + sized.static_block_bytes


def test_pinned_bytes_give_the_whole_blocks_they_hold(model, generation):
    block = llama_kv_block_bytes() + TOKENS * (BATCH * model.dtype.itemsize + 8)
    sized = size_continuous_batching(
        model, pinned_bytes=7 * block + block // 2, config=cb_config(), generation_config=generation
    )
    assert (sized.plan.path, sized.num_blocks, sized.config.num_blocks) == ("pinned", 7, 7)


@pytest.mark.parametrize("bad", [0, -0.5, 1.5, float("nan")])
def test_utilization_outside_zero_to_one_is_refused_naming_it(model, bad):
    with pytest.raises(SizingError, match=rf"utilization .*{bad!r}"):
        size_continuous_batching(model, utilization=bad, config=cb_config())


def test_pinned_bytes_below_one_block_are_refused_naming_both(model, generation):
    # a batch of one block: its mask's columns (1 KiB) are less than a block: the engine runs and the plan refuses
    block = llama_kv_block_bytes() + TOKENS * (TOKENS * model.dtype.itemsize + 8)
    with pytest.raises(SizingError, match=rf"pinned_bytes=2000 .*smaller than one block of {block} bytes"):
        size_continuous_batching(
            model, pinned_bytes=2000, config=cb_config(max_batch_tokens=TOKENS), generation_config=generation
        )


def test_a_share_too_small_for_the_batchs_attention_mask_is_refused_before_the_engine_runs(model, baseline):
    # 8192 query tokens x (8192 cache tokens + 8192) x 4 B = 512 MiB of mask: a 300 MiB share cannot hold it
    forwards = Forwards(model)
    with pytest.raises(NotEnoughMemoryError, match=r"requested 300.00 MiB .*max_batch_tokens=8192.* = 512.00 MiB"):
        size_continuous_batching(
            model,
            utilization=utilization(baseline, 300 * MiB),
            baseline=baseline,
            config=cb_config(max_batch_tokens=8192),
        )
    assert forwards.count == 0


def test_a_share_above_the_mask_but_short_of_one_batch_is_refused_after_the_first_engine_run(baseline, generation):
    # the floor (weights + 512 MiB of mask) passes at 700 MiB; the first run, at the batch's 513 blocks, peaks near
    # 1 GiB: no block cost the next runs could measure fits the batch's 512 blocks, so they are not run
    memory = EngineMemory(0, utilization=utilization(baseline, 700 * MiB), platform=CpuPlatform(), baseline=baseline)
    with pytest.raises(NotEnoughMemoryError, match=r"requested 700.00 MiB .* refused after the first of up to 6"):
        size_continuous_batching(
            build_model(), memory=memory, config=cb_config(max_batch_tokens=8192), generation_config=generation
        )
    assert memory.first_run.num_blocks == 513 and memory.block_cost is None


def test_pinned_bytes_below_the_batchs_attention_mask_columns_are_refused_before_the_engine_runs(model):
    columns = BATCH * BATCH * model.dtype.itemsize  # a cache of the batch's 64 tokens, read by its 64 query tokens
    forwards = Forwards(model)
    with pytest.raises(SizingError, match=rf"pinned_bytes={columns - 1} .*pin at least {columns} bytes"):
        size_continuous_batching(model, pinned_bytes=columns - 1, config=cb_config())
    assert forwards.count == 0


def test_a_batch_whose_mask_no_utilization_holds_is_advised_no_utilization(model, baseline):
    with pytest.raises(NotEnoughMemoryError, match=r"Advice: no utilization holds it \(the device's total is") as e:
        size_continuous_batching(model, baseline=baseline, config=cb_config(max_batch_tokens=10**7))
    assert "raise the utilization" not in str(e.value)


def test_pinned_bytes_below_a_mask_no_pin_holds_are_advised_no_pin(model):
    with pytest.raises(SizingError, match=r"no pin holds it \(the device's total is") as e:
        size_continuous_batching(model, pinned_bytes=MiB, config=cb_config(max_batch_tokens=10**7))
    assert "pin at least" not in str(e.value)


def drain(master: int, chunks: list[bytes]) -> None:
    """Read a pseudo-terminal into ``chunks`` until its other end is closed."""
    import os

    try:
        while chunk := os.read(master, 65536):
            chunks.append(chunk)
    except OSError:  # EIO: the terminal's other end was closed
        pass


def test_sizing_draws_a_progress_line_counting_its_runs_on_a_terminal(model, baseline, generation, monkeypatch):
    import fcntl
    import os
    import pty
    import struct
    import termios

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))  # an 80x24 terminal
    terminal = os.fdopen(slave, "w")
    chunks: list[bytes] = []
    reader = threading.Thread(target=drain, args=(master, chunks))  # a full terminal buffer would block the writer
    reader.start()
    try:
        with monkeypatch.context() as patch:
            patch.setattr(sys, "stderr", terminal)
            size_continuous_batching(
                model,
                utilization=utilization(baseline),
                baseline=baseline,
                config=cb_config(),
                generation_config=generation,
            )
        terminal.flush()
    finally:
        terminal.close()  # the reader then reads the end of the terminal
        reader.join(timeout=30)
        os.close(master)
    drawn = b"".join(chunks).decode(errors="replace")
    # one line for the whole sizing: the block-cost runs inside it draw none of their own
    assert "devmem: sizing: 1/6 run" in drawn and "devmem: sizing: 2/6 run" in drawn, drawn
    assert "measuring a KV block" not in drawn, drawn


def test_sizing_through_a_pipe_draws_no_progress(model, baseline, generation, capsys):
    size_continuous_batching(
        model, utilization=utilization(baseline), baseline=baseline, config=cb_config(), generation_config=generation
    )
    assert "devmem: sizing" not in capsys.readouterr().err


@pytest.mark.parametrize("bad", [0, -4096, 1.5, True, "1GiB"])
def test_pinned_bytes_that_are_not_a_positive_whole_number_are_refused(model, bad):
    with pytest.raises(SizingError, match=rf"pinned_bytes must be (> 0 bytes|a whole number of bytes).*, got {bad!r}"):
        size_continuous_batching(model, pinned_bytes=bad, config=cb_config())


def test_utilization_and_pinned_bytes_together_are_refused(model):
    with pytest.raises(SizingError, match="utilization or pinned_bytes, not both"):
        size_continuous_batching(model, utilization=0.5, pinned_bytes=1 << 20, config=cb_config())


def test_a_config_whose_num_blocks_is_set_is_refused_naming_it(model):
    with pytest.raises(SizingError, match=r"config.num_blocks=12 is already set"):
        size_continuous_batching(model, utilization=0.5, config=cb_config(num_blocks=12))


def test_the_callers_config_fields_are_kept_and_the_callers_object_is_left_alone(model, baseline, generation):
    given = cb_config(scheduler_type="prefill_first", allow_block_sharing=False, max_memory_percent=0.7)
    sized = size_continuous_batching(
        model, utilization=utilization(baseline), config=given, generation_config=generation, baseline=baseline
    )
    out = sized.config
    assert given.num_blocks is None and out.num_blocks == sized.num_blocks
    assert block_tokens(out) == TOKENS and out.max_batch_tokens == BATCH
    assert (out.scheduler_type, out.allow_block_sharing, out.max_memory_percent) == ("prefill_first", False, 0.7)


def test_sizing_gives_the_model_its_attention_back_and_keeps_no_manager(model, baseline, generation):
    before = model.config._attn_implementation
    size_continuous_batching(
        model, utilization=utilization(baseline), config=cb_config(), generation_config=generation, baseline=baseline
    )
    assert model.config._attn_implementation == before
    assert getattr(model, "_cached_continuous_batching_manager", None) is None


def test_a_model_with_a_persistent_manager_is_refused(model, generation):
    model.generate_batch(
        [[1, 2, 3]],
        generation_config=generation,
        continuous_batching_config=cb_config(num_blocks=4),
        persistent_manager=True,
    )
    try:
        with pytest.raises(ValueError, match="destroy_cached_continuous_batching_manager"):
            size_continuous_batching(model, utilization=0.5, config=cb_config())
    finally:
        model.destroy_cached_continuous_batching_manager()


def test_without_a_baseline_the_whole_process_counts_as_consumed(model, generation, caplog):
    host = CpuPlatform()
    release_allocator_cache(0, host)  # as the sizing's own reading, without the C heap's free pages
    held = host.get_process_memory_usage(0)
    with caplog.at_level(logging.WARNING, logger="devmem.integrations.transformers"):
        sized = size_continuous_batching(
            model,
            utilization=(held + REQUEST) / host.device_memory_info(0).total,
            config=cb_config(),
            generation_config=generation,
        )
    assert sized.plan.breakdown["consumed"] >= held - MiB  # resident memory moves by a few pages meanwhile
    assert "take MemorySnapshot.measure() before creating the model" in caplog.text


def test_explain_names_the_blocks_what_one_costs_and_the_plan(engine):
    _, _, sized = engine
    text = sized.explain()
    assert f"{sized.num_blocks} blocks of {TOKENS} tokens (max_batch_tokens {BATCH}" in text
    assert "one block costs" in text and "KV cache" in text and "path: utilization" in text
    assert json.loads(json.dumps(sized.as_dict(), default=str))["num_blocks"] == sized.num_blocks


def test_importing_the_integration_imports_neither_transformers_nor_torch():
    code = (
        "import sys, json, devmem.integrations.transformers\n"
        "print(json.dumps([m for m in ('transformers', 'torch') if m in sys.modules]))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert json.loads(out.strip().splitlines()[-1]) == []


def test_the_worst_case_forward_reads_every_token_the_cache_holds(model, generation):
    # 1026 blocks of 16 tokens: with the past padded to transformers' kv_padding_interval_size (16384 tokens), the
    # read would be 16384 + 64 tokens, not the 16416 the cache holds
    from devmem.integrations.transformers import run_engine

    reads = []

    def record(module, args, kwargs, output):
        reads.append(max(int(index.numel()) for index in kwargs["read_index"]))

    hook = model.register_forward_hook(record, with_kwargs=True)
    try:
        run = run_engine(model, generation, cb_config(max_memory_percent=1.0), 1026)
    finally:
        hook.remove()
    assert run.forward_tokens == BATCH
    assert max(reads) == 1026 * TOKENS


def test_sizing_runs_every_forward_without_autograd_so_no_warm_up_fails(model, baseline, generation, caplog):
    # a model built normally has parameters that require grad: a forward under autograd fails in transformers'
    # in-place cache writes, which its warm-up catches and logs
    assert any(p.requires_grad for p in model.parameters())
    with caplog.at_level(logging.WARNING):
        _size(model, baseline, generation)
    assert "Failed to warm up" not in caplog.text


def test_a_warm_up_that_transformers_logs_as_failed_fails_the_run(model, generation):
    from devmem.integrations.transformers import run_engine

    # one block holds no request of max_batch_tokens query tokens: transformers logs "Failed to warm up"
    with pytest.raises(RuntimeError, match="warm-up failed at 1 blocks .*Failed to warm up"):
        run_engine(model, generation, cb_config(max_memory_percent=1.0), 1)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"weights_memory": "16GiB"}, r"weights_memory must be a whole number of bytes .*'16GiB'.*parse_size"),
        ({"weights_memory": -1}, r"weights_memory must be >= 0 bytes, got -1"),
        ({"weights_memory": 1.5}, r"weights_memory must be a whole number of bytes .*1.5"),
        ({"generation_config": "greedy"}, r"generation_config must be a transformers GenerationConfig .*'greedy'"),
        ({"device": -1}, r"device must be a device index .*-1"),
        ({"device": 3}, r"device=3: .*out of range"),
        ({"store": 3}, r"store must be a ProfileStore.*got 3"),
        ({"reservation": "yes"}, r"reservation must be a devmem.Reservation, True or False, got 'yes'"),
        ({"baseline": "before"}, r"baseline must be a devmem MemorySnapshot .*got 'before' of type str"),
        ({"platform": "cpu"}, r"platform must be a devmem Platform .*got 'cpu' of type str"),
    ],
)
def test_a_bad_argument_is_refused_naming_it_before_the_engine_runs(model, baseline, arguments, message):
    forwards = Forwards(model)
    with pytest.raises(SizingError, match=message):
        size_continuous_batching(model, utilization=utilization(baseline), config=cb_config(), **arguments)
    assert forwards.count == 0


def test_a_device_other_than_the_baselines_is_refused(model, baseline):
    from dataclasses import replace

    forwards = Forwards(model)
    other = replace(baseline, device=1)
    with pytest.raises(SizingError, match=r"device=0 but the baseline was taken on device 1"):
        size_continuous_batching(model, utilization=0.5, config=cb_config(), device=0, baseline=other)
    assert forwards.count == 0


def test_a_baseline_taken_on_another_platform_is_refused(model, baseline):
    from dataclasses import replace

    forwards = Forwards(model)
    elsewhere = replace(baseline, total=baseline.total // 2)  # what another platform's device reported
    with pytest.raises(SizingError, match=r"baseline's device total is .* taken on another platform or device"):
        size_continuous_batching(model, utilization=0.5, config=cb_config(), baseline=elsewhere)
    assert forwards.count == 0


def test_sizing_reserves_the_engines_share_on_the_ledger(engine):
    _, _, sized = engine
    held = sized.reservation
    assert held is not None and held.device == 0 and not held.released
    assert held.bytes == sized.plan.breakdown["requested"]


def test_a_sizing_that_fails_gives_back_the_share_it_reserved(model, baseline, tmp_path):
    with pytest.raises(NotEnoughMemoryError):  # the batch's attention mask alone is more than the share
        size_continuous_batching(
            model, utilization=utilization(baseline), baseline=baseline, config=cb_config(max_batch_tokens=8192)
        )
    assert list((tmp_path / "ledger").glob("*.owner")) == []  # the ledger's owner file of a held reservation


def test_a_reservation_taken_before_the_model_is_kept_and_false_takes_none(model, baseline, generation):
    import devmem

    taken = devmem.reserve(0, utilization=utilization(baseline), platform=CpuPlatform())
    try:
        assert _size(model, baseline, generation, store=False, reservation=taken).reservation is taken
        assert _size(model, baseline, generation, store=False, reservation=False).reservation is None
    finally:
        taken.release()


def _size(model, baseline, generation, **overrides):
    arguments = {
        "utilization": utilization(baseline),
        "config": cb_config(),
        "generation_config": generation,
        "baseline": baseline,
        **overrides,
    }
    return size_continuous_batching(model, **arguments)


def _freeze_counts_at_collections(call):
    """``call()``'s result and ``gc.get_freeze_count()`` at the start of each full collection it made."""
    import gc

    seen: list[int] = []

    def record(phase, info):
        if phase == "start" and info["generation"] == 2:
            seen.append(gc.get_freeze_count())

    gc.callbacks.append(record)
    try:
        return call(), seen
    finally:
        gc.callbacks.remove(record)


def test_measuring_collects_without_traversing_the_objects_that_existed_and_unfreezes_them_after(
    model, baseline, generation
):
    import gc

    assert gc.get_freeze_count() == 0
    existing = len(gc.get_objects())
    sized, seen = _freeze_counts_at_collections(lambda: _size(model, baseline, generation, store=False))
    assert sum(count >= existing for count in seen) >= len(sized.runs)  # each run's window collects
    assert gc.get_freeze_count() == 0


def test_objects_the_application_froze_stay_frozen_and_devmem_freezes_no_more(model, baseline, generation):
    import gc

    gc.freeze()  # as a server does after start-up (and some libraries at import)
    try:
        frozen = gc.get_freeze_count()
        created_since = [[] for _ in range(1000)]  # tracked objects made after the application's freeze
        sized, seen = _freeze_counts_at_collections(lambda: _size(model, baseline, generation, store=False))
        assert len(seen) >= len(sized.runs) and created_since and max(seen) <= frozen
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()


def test_a_restart_with_the_same_key_reads_the_stored_figures_and_gets_the_same_blocks(model, baseline, generation):
    first = _size(model, baseline, generation)
    forwards = Forwards(model)
    again = _size(model, baseline, generation)
    assert not first.stored and again.stored and forwards.count == 0
    assert again.num_blocks == first.num_blocks and again.block_bytes == first.block_bytes
    assert again.plan.breakdown == first.plan.breakdown
    assert "figures: stored profile" in again.explain() and "figures: measured now" in first.explain()


@pytest.mark.parametrize(
    "change",
    ["config", "generation", "dtype", "allocator", "weights", "attention"],
)
def test_a_changed_key_measures_again(model, baseline, generation, monkeypatch, change):
    _size(model, baseline, generation)
    overrides = {}
    if change == "config":
        overrides["config"] = cb_config(max_batch_tokens=BATCH // 2)
    elif change == "generation":
        overrides["generation_config"] = transformers.GenerationConfig(
            max_new_tokens=7, do_sample=False, eos_token_id=-1, pad_token_id=0
        )
    elif change == "dtype":
        model.to(torch.bfloat16)
    elif change == "allocator":
        monkeypatch.setenv("PYTORCH_ALLOC_CONF", "expandable_segments:True")
    elif change == "weights":
        overrides["weights_memory"] = 1 << 20
    else:
        model.set_attn_implementation("eager")
    forwards = Forwards(model)
    again = _size(model, baseline, generation, **overrides)
    assert not again.stored and forwards.count > 0


def test_a_corrupt_stored_profile_is_ignored_with_a_warning_and_measured_over(
    model, baseline, generation, profile_dir, caplog
):
    _size(model, baseline, generation)
    (path,) = profile_dir.glob("transformers-cb-*.json")
    path.write_text("{ not json")
    forwards = Forwards(model)
    with caplog.at_level(logging.WARNING, logger="devmem.engine.profile_store"):
        again = _size(model, baseline, generation)
    assert not again.stored and forwards.count > 0  # measured, not planned from the broken file
    assert f"ignoring the stored profile {path}" in caplog.text
    assert _size(model, baseline, generation).stored  # measured over: stored again


def test_store_false_measures_every_time_and_writes_nothing(model, baseline, generation, profile_dir):
    _size(model, baseline, generation, store=False)
    assert not _size(model, baseline, generation, store=False).stored
    assert not profile_dir.exists()


def test_the_store_argument_names_the_folder(model, baseline, generation, tmp_path, profile_dir):
    folder = tmp_path / "elsewhere"
    _size(model, baseline, generation, store=folder)
    assert list(folder.glob("transformers-cb-*.json")) and not profile_dir.exists()
    assert _size(model, baseline, generation, store=str(folder)).stored


def test_one_layer_per_attention_type_runs_one_layer_and_gives_every_layer_back(model):
    from devmem.integrations.kit import one_layer_per_attention_type

    layers = model.model.layers
    ran = []
    hooks = [layer.register_forward_hook(lambda *args: ran.append(1)) for layer in layers]
    try:
        with one_layer_per_attention_type(model) as kept, torch.no_grad():
            model(torch.tensor([[1, 2, 3]]))
    finally:
        for hook in hooks:
            hook.remove()
    assert kept == 1 and len(ran) == 1
    assert model.model.layers is layers and len(layers) == LLAMA["num_hidden_layers"]


def test_a_run_through_one_layer_holds_what_a_run_through_all_holds(model, generation):
    from devmem.integrations.transformers import run_engine

    config = cb_config(max_memory_percent=1.0)
    every, one = run_engine(model, generation, config, 12), run_engine(model, generation, config, 12, all_layers=False)
    assert (one.cache_bytes, one.static_bytes, one.forward_tokens) == (
        every.cache_bytes,
        every.static_bytes,
        every.forward_tokens,
    )
    assert (every.layers_run, one.layers_run) == (None, 1)


def test_a_stored_profile_with_incomplete_figures_is_set_aside_with_a_warning(
    model, baseline, generation, profile_dir, caplog
):
    _size(model, baseline, generation)
    (path,) = profile_dir.glob("transformers-cb-*.json")
    body = json.loads(path.read_text())
    del body["figures"]["extra"]["costs"]
    path.write_text(json.dumps(body))
    forwards = Forwards(model)
    with caplog.at_level(logging.WARNING):
        again = _size(model, baseline, generation)
    assert not again.stored and forwards.count > 0  # measured, not planned from the incomplete file
    assert f"{path} (extra.costs is None, not a mapping); the file is set aside" in caplog.text
    assert _size(model, baseline, generation).stored  # measured over: the incomplete file was replaced


def test_engines_of_one_key_that_measure_together_all_plan_from_the_figures_stored_first(
    model, baseline, generation, profile_dir
):
    _size(model, baseline, generation)
    (path,) = profile_dir.glob("transformers-cb-*.json")
    body = json.loads(path.read_text())
    body["figures"]["block_bytes"] += 4096  # the other engine measured a little more per block
    body["figures"]["extra"]["costs"]["block_bytes"] += 4096
    path.unlink()

    def another_engine_stores_first(*args):
        if not path.exists():
            path.write_text(json.dumps(body))

    hook = model.register_forward_hook(another_engine_stores_first)
    try:
        together = _size(model, baseline, generation)
    finally:
        hook.remove()
    assert not together.stored and together.block_bytes == body["figures"]["block_bytes"]
    assert "stored its profile first" in together.explain()
    assert _size(model, baseline, generation).num_blocks == together.num_blocks  # its restart: the same blocks
