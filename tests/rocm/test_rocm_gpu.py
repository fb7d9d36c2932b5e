"""On a real AMD GPU (ROCm build of torch, amdsmi with ROCm's libamd_smi.so): the rocm platform agrees with
the HIP runtime. Skipped elsewhere; docs/amd.md says how to run these and send the figures back."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from devmem.types import GiB, MiB
from devmem_rocm import RocmPlatform, detect

torch = pytest.importorskip("torch")

ON_ROCM = bool(getattr(torch.version, "hip", None)) and torch.cuda.is_available()
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not ON_ROCM, reason="needs a ROCm build of torch and an AMD GPU"),
]

#: docs/design.md: on discrete GPUs, free and total agree with the runtime's own view within 64 MiB.
AGREEMENT = 64 * MiB
ALLOCATION = GiB


@pytest.fixture(scope="module")
def platform() -> RocmPlatform:
    found = detect()
    if not found.detected:
        pytest.skip(f"the rocm platform is not detected here: {found.reason}")
    return RocmPlatform()


def test_device_count_is_torchs(platform):
    assert platform.device_count() == torch.cuda.device_count()


def test_total_and_free_agree_with_torch_mem_get_info(platform):
    for d in range(platform.device_count()):
        torch.cuda.synchronize(d)
        torch_free, torch_total = torch.cuda.mem_get_info(d)
        free, total = platform.device_memory_info(d)
        print(f"device {d}: devmem free={free} total={total}; torch free={torch_free} total={torch_total}")
        assert abs(total - torch_total) <= AGREEMENT
        assert abs(free - torch_free) <= AGREEMENT


def test_gfx_target_and_integration_agree_with_torch(platform):
    for d in range(platform.device_count()):
        props = torch.cuda.get_device_properties(d)
        assert platform.gpu(d).gfx_target == props.gcnArchName.split(":")[0]
        assert platform.is_integrated_gpu(d) == bool(props.is_integrated)


def _rises_only_where_torch_allocates(platform: RocmPlatform) -> dict[int, list[int]]:
    """For each HIP device d: every device's process-usage change while torch holds 1 GiB on cuda:d."""
    for d in range(platform.device_count()):  # create every device's context before measuring
        torch.ones(1, device=f"cuda:{d}")
        torch.cuda.synchronize(d)
    changes = {}
    for d in range(platform.device_count()):
        torch.cuda.synchronize(d)
        before = [platform.get_process_memory_usage(i) for i in range(platform.device_count())]
        block = torch.empty(ALLOCATION, dtype=torch.uint8, device=f"cuda:{d}")
        block.fill_(1)
        torch.cuda.synchronize(d)
        after = [platform.get_process_memory_usage(i) for i in range(platform.device_count())]
        del block
        torch.cuda.empty_cache()
        changes[d] = [a - b for a, b in zip(after, before, strict=True)]
    return changes


def test_each_hip_device_is_the_gpu_torch_allocates_on(platform):
    changes = _rises_only_where_torch_allocates(platform)
    print(json.dumps(changes))
    for d, deltas in changes.items():
        assert abs(deltas[d] - ALLOCATION) <= 32 * MiB, f"device {d} rose by {deltas[d]} bytes for a 1 GiB tensor"
        assert all(abs(x) <= 32 * MiB for i, x in enumerate(deltas) if i != d)


@pytest.mark.skipif(ON_ROCM and torch.cuda.device_count() < 2, reason="needs two AMD GPUs")
@pytest.mark.parametrize("variable", ["HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"])
def test_a_reversed_visible_device_list_still_maps_each_device(variable):
    order = ",".join(str(i) for i in reversed(range(torch.cuda.device_count())))
    code = textwrap.dedent("""
        import json, torch
        from devmem_rocm import RocmPlatform
        from tests.rocm.test_rocm_gpu import _rises_only_where_torch_allocates
        platform = RocmPlatform()
        print(json.dumps({"bdf": [platform.gpu(i).bdf for i in range(platform.device_count())],
                          "changes": _rises_only_where_torch_allocates(platform)}))
    """)
    env = {k: v for k, v in os.environ.items() if not k.endswith("VISIBLE_DEVICES")}
    env[variable] = order
    done = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=str(Path(__file__).resolve().parents[2]),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    print(variable, "=", order, json.dumps(result))
    for d, deltas in result["changes"].items():
        d = int(d)
        assert abs(deltas[d] - ALLOCATION) <= 32 * MiB
        assert all(abs(x) <= 32 * MiB for i, x in enumerate(deltas) if i != d)
