"""The fixed per-sequence state of recurrent layers (Mamba, Mamba2, gated-delta-net linear attention, short
convolutions), shaped as vLLM's MambaStateShapeCalculator shapes it, and the Mamba2 mixer's parameters."""

from __future__ import annotations

from dataclasses import dataclass

from devmem.planner.models.config import _Config
from devmem.planner.models.kimi_linear import kda_dims
from devmem.planner.models.kinds import CONV, KDA, LIGHTNING, LINEAR, MAMBA, MAMBA2
from devmem.planner.models.reading import _shown


@dataclass(frozen=True)
class RecurrentState:
    """The fixed per-sequence state of one kind of recurrent layer, in elements at ``tp = 1``.

    ``conv_elements`` is the convolution state of one layer (``(kernel - 1) x channels``), ``ssm_elements`` its
    SSM or linear-attention state (``conv_text`` and ``ssm_text`` say how); both are split evenly across
    ranks, each of which must divide every count in ``split``. Mamba2's ``groups`` (B and C, ``group_elements``
    conv elements each) are replicated up to ``tp`` where they do not split, as vLLM does. ``fixed_ssm_bytes`` is the
    state's element size where the engine fixes it whatever the dtypes asked for (KDA's float32), else ``None``.
    """

    kind: str
    layers: int
    conv_elements: int
    ssm_elements: int
    split: tuple[tuple[str, int], ...]
    conv_text: str
    ssm_text: str
    groups: int = 0
    group_elements: int = 0
    fixed_ssm_bytes: int | None = None

    def conv_elements_at(self, tp: int) -> int:
        """One layer's convolution state on one of ``tp`` ranks."""
        extra = 0 if not self.groups or self.groups % tp == 0 else (tp - self.groups) * self.group_elements
        return (self.conv_elements + extra) // tp

    def tp_problems(self, tp: int) -> list[str]:
        problems = [f"{what} {count} is not a multiple of {tp}" for what, count in self.split if count % tp]
        if self.groups > 1 and self.groups % tp:
            problems.append(f"Mamba2 n_groups {self.groups} is neither 1 nor a multiple of {tp}")
        return problems

    def bytes_per_sequence(self, tp: int, conv_bytes: int, ssm_bytes: int) -> int:
        """Bytes one sequence holds in these layers on one of ``tp`` ranks."""
        return self.layers * self.layer_bytes(tp, conv_bytes, ssm_bytes)

    def layer_bytes(self, tp: int, conv_bytes: int, ssm_bytes: int) -> int:
        """Bytes one sequence holds in one of these layers on one of ``tp`` ranks (vLLM's MambaSpec page)."""
        return self.conv_elements_at(tp) * conv_bytes + self.ssm_elements // tp * self.ssm_bytes(ssm_bytes)

    def ssm_bytes(self, asked: int) -> int:
        """The state's element size: ``fixed_ssm_bytes`` where set, else ``asked`` (the model's SSM dtype)."""
        return asked if self.fixed_ssm_bytes is None else self.fixed_ssm_bytes


def _recurrent_states(c: _Config, kinds: list[str]) -> tuple[RecurrentState, ...]:
    """The per-sequence state of each recurrent kind, as vLLM's MambaStateShapeCalculator shapes it."""
    states = []
    if MAMBA in kinds:
        c.require("hidden_size", "mamba_d_state", "mamba_d_conv", "mamba_expand", why="the Mamba state per sequence")
        inner = c.int("mamba_expand") * c.int("hidden_size")
        d_state, d_conv = c.int("mamba_d_state"), c.int("mamba_d_conv")
        states.append(
            RecurrentState(
                MAMBA,
                kinds.count(MAMBA),
                inner * (d_conv - 1),
                inner * d_state,
                (("Mamba inner size", inner),),
                f"conv {inner} x (d_conv {d_conv} - 1)",
                f"ssm {inner} x d_state {d_state}",
            )
        )
    if MAMBA2 in kinds:
        heads, head_dim, inner, groups, d_state, kernel = _mamba2_dims(c)
        channels = inner + 2 * groups * d_state
        states.append(
            RecurrentState(
                MAMBA2,
                kinds.count(MAMBA2),
                (kernel - 1) * channels,
                heads * head_dim * d_state,
                (("Mamba2 heads", heads),),
                f"conv (kernel {kernel} - 1) x ({inner} + 2 x {groups} groups x d_state {d_state})",
                f"ssm {heads} heads x {head_dim} x d_state {d_state}",
                groups,
                (kernel - 1) * 2 * d_state,
            )
        )
    if LINEAR in kinds:
        keys = (
            "linear_num_key_heads",
            "linear_key_head_dim",
            "linear_num_value_heads",
            "linear_value_head_dim",
            "linear_conv_kernel_dim",
        )
        c.require(*keys, why="the linear-attention state per sequence")
        nk, dk, nv, dv, kernel = (c.int(k) for k in keys)
        conv = 2 * nk * dk + nv * dv
        states.append(
            RecurrentState(
                LINEAR,
                kinds.count(LINEAR),
                conv * (kernel - 1),
                nv * dk * dv,
                (("linear key heads", nk), ("linear value heads", nv)),
                f"conv (2 x {nk} x {dk} + {nv} x {dv}) x (kernel {kernel} - 1)",
                f"state {nv} x {dk} x {dv}",
            )
        )
    if LIGHTNING in kinds:
        heads, head_dim = _lightning_dims(c)
        states.append(
            RecurrentState(
                LIGHTNING,
                kinds.count(LIGHTNING),
                0,
                heads * head_dim * head_dim,
                (("lightning-attention heads", heads),),
                "no convolution state",
                f"state {heads} heads x {head_dim} x {head_dim}",
            )
        )
    if KDA in kinds:
        heads, head_dim, kernel = kda_dims(c)
        states.append(
            RecurrentState(
                KDA,
                kinds.count(KDA),
                3 * heads * head_dim * (kernel - 1),
                heads * head_dim * head_dim,
                (("KDA heads", heads),),
                f"conv 3 x {heads} x {head_dim} x (kernel {kernel} - 1)",
                f"state {heads} heads x {head_dim} x {head_dim} (float32)",
                fixed_ssm_bytes=4,
            )
        )
    if CONV in kinds:
        why = "the short-convolution state per sequence"
        channels = c.first_int("conv_dim", "hidden_size", why=why)
        kernel = c.int("conv_L_cache", why=why)
        states.append(
            RecurrentState(
                CONV,
                kinds.count(CONV),
                (kernel - 1) * channels,
                0,
                (("convolution channels", channels),),
                f"conv (L_cache {kernel} - 1) x {channels}",
                "no SSM state",
            )
        )
    return tuple(states)


def _lightning_dims(c: _Config) -> tuple[int, int]:
    """``(heads, head dim)`` of MiniMax's lightning attention, as vLLM's MiniMaxText01LinearAttention reads them:
    ``num_attention_heads`` heads of ``head_dim`` (else ``hidden_size / num_attention_heads``)."""
    heads = c.int("num_attention_heads")
    if c.has("head_dim"):
        return heads, c.int("head_dim")
    hidden = c.int("hidden_size", why="the lightning-attention state (head_dim, else hidden_size / heads)")
    if hidden % heads:
        raise c.refuse(
            "head_dim", f"config has no head_dim and hidden_size {hidden} is not a multiple of {heads} heads"
        )
    return heads, hidden // heads


def _mamba2_dims(c: _Config) -> tuple[int, int, int, int, int, int]:
    """``(heads, head dim, inner size, groups, d_state, conv kernel)`` of a Mamba2 layer, under NemotronH's keys
    (inner = heads x head dim) or Bamba's and Granite's (inner = mamba_expand x hidden_size)."""
    why = "the Mamba2 state per sequence"
    if c.model_type == "zamba2":  # Zamba2Config: head dim = mamba_expand x hidden_size / n_mamba_heads
        heads, inner = c.int("n_mamba_heads", why=why), c.int("mamba_expand", why=why) * c.int("hidden_size", why=why)
        if inner % heads:
            raise c.refuse(
                "n_mamba_heads", f"config key n_mamba_heads {heads} does not divide mamba_expand x hidden_size {inner}"
            )
        return (
            heads,
            inner // heads,
            inner,
            c.int("mamba_ngroups", why=why),
            c.int("mamba_d_state", why=why),
            c.int("mamba_d_conv", why=why),
        )
    if c.has("mamba_num_heads"):
        heads, head_dim = c.int("mamba_num_heads"), c.int("mamba_head_dim", why=why)
        return (
            heads,
            head_dim,
            heads * head_dim,
            c.first_int("n_groups", "mamba_n_groups", why=why),
            c.first_int("ssm_state_size", "mamba_d_state", why=why),
            c.first_int("conv_kernel", "mamba_d_conv", why=why),
        )
    heads = c.int("mamba_n_heads", why=why)
    if c.has("mamba_d_ssm"):  # Falcon-H1's inner size, as vLLM reads it
        inner = c.int("mamba_d_ssm", why=why)
    else:
        inner = c.int("mamba_expand", why=why) * c.int("hidden_size", why=why)
    if c.get("mamba_d_head") == "auto" and inner % heads == 0:  # the config classes' default: inner / heads
        head_dim = inner // heads
    else:
        head_dim = c.int("mamba_d_head", why=why)
    if heads * head_dim != inner:
        raise c.refuse(
            "mamba_d_head",
            f"config keys mamba_n_heads {heads} x mamba_d_head {_shown(c.get('mamba_d_head'))} must equal the Mamba2 "
            f"inner size {inner} ({'mamba_d_ssm' if c.has('mamba_d_ssm') else 'mamba_expand x hidden_size'})",
        )
    return (
        heads,
        head_dim,
        inner,
        c.get_int("mamba_n_groups", 1, positive=True),
        c.int("mamba_d_state", why=why),
        c.int("mamba_d_conv", why=why),
    )


def _mamba2_params(c: _Config, hidden: int) -> tuple[int, int]:
    """``(matrices, other)`` of one Mamba2 mixer: in_proj (z, x, B, C, dt), the convolution, out_proj."""
    heads, _, inner, groups, d_state, kernel = _mamba2_dims(c)
    channels = inner + 2 * groups * d_state
    matrices = hidden * (inner + channels + heads) + inner * hidden
    return matrices, channels * (kernel + 1) + 3 * heads + inner
