"""DeepSeek sparse attention whose layers share an indexer: vLLM 0.34.0's compute_skip_topk_layers builds
the indexer (and its key cache) only on the layers marked ``full`` in ``indexer_types`` (GLM-5.2's IndexShare), or
every ``index_topk_freq``-th layer; the others cache the latent alone."""

from __future__ import annotations

from model_configs_fourth import GLM_5_2
from model_configs_third import GLM_5

from devmem.planner.models import ModelMemory


def model(config: dict, **options) -> ModelMemory:
    return ModelMemory.from_config(config, **options)


def test_glm_5_2_caches_the_indexer_key_only_on_its_full_indexer_layers():
    """21 full layers x (576 x 2 B latent + 132 B indexer key) = 26,964 and 57 shared layers x 1,152 B = 65,664:
    92,628 B per token (GLM-5, every layer with its indexer: 100,152)."""
    m = model(GLM_5_2)
    assert (m.kv_bytes_per_token, m.uniform_layers) == (92_628, False)


def test_glm_5_2_with_an_fp8_cache_packs_every_latent_and_keeps_the_shared_keys_off():
    """fp8 (vLLM's fp8_ds_mla): 78 x 656 B + 21 x 132 B = 53,940 B per token."""
    assert model(GLM_5_2, kv_cache_dtype="fp8").kv_bytes_per_token == 53_940


def test_index_topk_freq_builds_an_indexer_on_every_nth_layer_from_the_offset():
    """index_topk_freq 4 (index_skip_topk_offset's default 2): layer i builds one where max(i - 1, 0) % 4 == 0 (0, 1,
    5, 9, ..., 77: 21 layers): 78 x 1,152 + 21 x 132 = 92,628 B per token."""
    assert model({**GLM_5, "index_topk_freq": 4}).kv_bytes_per_token == 92_628


def test_index_topk_pattern_skips_the_layers_marked_s():
    """FSSS... over 78 layers: 20 layers with an indexer (0, 4, ..., 76): 78 x 1,152 + 20 x 132 = 92,496 B."""
    assert model({**GLM_5, "index_topk_pattern": "FSSS" * 19 + "FS"}).kv_bytes_per_token == 92_496


def test_the_note_says_which_layers_share_the_indexer():
    assert any("indexer_types: 21 full, 57 shared" in n for n in model(GLM_5_2).notes)
