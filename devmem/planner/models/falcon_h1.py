"""Falcon-H1: the Mamba2 mixer beside each layer's attention."""

from __future__ import annotations

from devmem.planner.models.config import _Config
from devmem.planner.models.recurrent import _mamba2_dims


def _falcon_h1_mixer_params(c: _Config, hidden: int) -> tuple[int, int]:
    """``(matrices, other)`` of Falcon-H1's Mamba2 mixer (beside each layer's attention): its biases and gated norm
    only where ``mamba_conv_bias``, ``mamba_proj_bias`` (``in_proj``), ``projectors_bias`` (``out_proj``, as
    transformers' FalconH1Mixer builds it) and ``mamba_rms_norm`` say."""
    heads, _, inner, groups, d_state, kernel = _mamba2_dims(c)
    channels = inner + 2 * groups * d_state
    projected = inner + channels + heads
    other = channels * kernel + 3 * heads + (channels if c.flag("mamba_conv_bias", True) else 0)
    other += inner if c.flag("mamba_rms_norm", False) else 0
    other += (projected if c.flag("mamba_proj_bias", False) else 0) + (
        hidden if c.flag("projectors_bias", False) else 0
    )
    return hidden * projected + inner * hidden, other
