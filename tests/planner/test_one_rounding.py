"""One rounding of a share to bytes (devmem.planner.requested_memory): the ledger reserves what the plan requests."""

from __future__ import annotations

from devmem.engine.reservations import reserve
from devmem.planner import plan_kv_cache, requested_memory
from devmem.testing import Scenario
from devmem_nvidia.testing import ScriptedNvidiaGpu, scripted_platform


def test_a_reservation_and_a_plan_at_0_9_of_1000_bytes_both_take_900(tmp_path):
    # the float 0.9 is a little above 9/10: exact arithmetic on its binary value takes 901 bytes
    platform = scripted_platform(Scenario(devices=[ScriptedNvidiaGpu(total=1000, reserved=0)]))
    plan = plan_kv_cache(total=1000, utilization=0.9, page_size_bytes=1, num_layers=1)
    with reserve(0, utilization=0.9, platform=platform, ledger_dir=tmp_path) as reservation:
        assert reservation.bytes == plan.breakdown["requested"] == requested_memory(1000, 0.9) == 900
