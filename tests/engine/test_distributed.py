"""devmem.engine.distributed: ranks agree on the smallest budget through torch.distributed, for real, on CPU with
gloo."""

from __future__ import annotations

import datetime
import subprocess
import sys

import pytest

from devmem import DevmemError, GiB
from devmem.engine.distributed import agree_on_minimum

_RANK = """
import sys
import torch.distributed as dist
from devmem.engine.distributed import agree_on_minimum
rank, budget, rendezvous = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
dist.init_process_group("gloo", init_method=f"file://{rendezvous}", rank=rank, world_size=2)
print(agree_on_minimum(budget), flush=True)
dist.destroy_process_group()
"""


@pytest.mark.slow  # two gloo ranks in subprocesses
@pytest.mark.parametrize(
    "budgets", [[41 * GiB, 38 * GiB + 12345], [(1 << 64) - 1, (1 << 63) + 5]], ids=["budgets", "beyond-int64"]
)
def test_two_gloo_ranks_with_different_budgets_both_end_with_the_smaller(tmp_path, budgets):
    """Rank 1 runs in a child process, rank 0 in this one (which has torch imported already). Byte counts past
    int64 are agreed exactly."""
    torch = pytest.importorskip("torch")
    import torch.distributed as dist

    rendezvous = tmp_path / "rendezvous"
    other = subprocess.Popen(
        [sys.executable, "-c", _RANK, "1", str(budgets[1]), str(rendezvous)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        dist.init_process_group(
            "gloo", init_method=f"file://{rendezvous}", rank=0, world_size=2, timeout=datetime.timedelta(seconds=120)
        )
        try:
            mine = agree_on_minimum(budgets[0])
        finally:
            dist.destroy_process_group()
        out, err = other.communicate(timeout=120)
    finally:
        if other.poll() is None:
            other.kill()
    assert other.returncode == 0, err
    assert mine == int(out) == min(budgets) and torch.distributed.is_initialized() is False


def test_without_a_process_group_the_local_value_is_kept():
    pytest.importorskip("torch")
    assert agree_on_minimum(5 * GiB) == 5 * GiB


def test_without_torch_imported_nothing_is_imported_and_the_value_is_kept():
    code = (
        "import sys; from devmem.engine.distributed import agree_on_minimum; "
        "print(agree_on_minimum(7), 'torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["7", "False"]


@pytest.mark.parametrize("bad", [1.5, True, "7", None])
def test_a_budget_that_is_not_an_int_is_refused(bad):
    with pytest.raises(TypeError, match=r"agree_on_minimum.s value must be a whole number of bytes \(int\)"):
        agree_on_minimum(bad)


@pytest.mark.parametrize("bad", [1 << 70, -1])
def test_a_budget_that_is_no_byte_count_is_a_devmem_error_naming_it(bad):
    with pytest.raises(DevmemError, match=str(bad)):
        agree_on_minimum(bad)


def test_a_platform_that_is_no_devmem_platform_is_refused_before_the_collective():
    with pytest.raises(DevmemError, match="platform must be a devmem Platform .*got 'cuda'"):
        agree_on_minimum(GiB, None, "cuda")  # type: ignore[arg-type]
