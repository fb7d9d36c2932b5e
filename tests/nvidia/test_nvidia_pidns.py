"""Finding this process in NVML's lists when its PID namespace is not the driver's."""

from __future__ import annotations

import devmem
from devmem import MiB
from devmem_nvidia.pidns import LEARN_SIZES, learn_driver_pid, maps_nvidia_device, namespace_pids
from devmem_nvidia.testing import H200_CONTEXT, ScriptedAllocator, ScriptedNvml, h200_scenario, scripted_platform

HOST_PID = 81234
CHILD = 5151


def contained(*, nspid_visible: bool, **kwargs):
    """This process holds its H200 context under host PID 81234, which its own namespace does not show."""
    sc = h200_scenario(driver_pid=HOST_PID, nspid_visible=nspid_visible, **kwargs)
    sc.allocate(H200_CONTEXT)
    return sc


def platform_for(sc, allocator=None, **kwargs):
    return scripted_platform(sc, allocator=allocator or ScriptedAllocator(sc), **kwargs)


def test_nspid_lists_outer_pid_first():
    sc = contained(nspid_visible=True)
    assert namespace_pids(sc.fs) == [HOST_PID, sc.pid]


def test_process_is_found_under_its_nspid_outer_pid():
    sc = contained(nspid_visible=True)
    assert platform_for(sc, learn_pid=False).get_process_memory_usage(0) == H200_CONTEXT


def test_nspid_note_names_both_pids():
    sc = contained(nspid_visible=True)
    assert any(str(HOST_PID) in n and "NSpid" in n for n in platform_for(sc).notes(0))


def test_hidden_pid_without_learning_is_none():
    sc = contained(nspid_visible=False)
    assert platform_for(sc, learn_pid=False).get_process_memory_usage(0) is None


def test_hidden_pid_reason_says_what_to_do():
    sc = contained(nspid_visible=False)
    platform = platform_for(sc, learn_pid=False)
    platform.get_process_memory_usage(0)
    assert "--pid=host" in platform.process_memory_reason(0)


def prepared(sc, allocator=None, **kwargs):
    platform = platform_for(sc, allocator, **kwargs)
    platform.prepare(0)
    return platform


def test_prepare_learns_a_hidden_pid_from_distinctive_allocations():
    sc = contained(nspid_visible=False)
    assert prepared(sc).get_process_memory_usage(0) == H200_CONTEXT


def test_a_reading_never_allocates():
    sc = contained(nspid_visible=False)
    allocator = ScriptedAllocator(sc)
    platform = platform_for(sc, allocator)
    devmem.device_report(platform, 0)
    platform.get_process_memory_usage(0)
    assert allocator.allocations == []


def test_without_prepare_the_reason_says_to_call_it_and_names_the_allocation():
    sc = contained(nspid_visible=False)
    platform = platform_for(sc)
    assert platform.get_process_memory_usage(0) is None
    assert "call platform.prepare(0) once (it allocates 42 MiB and 26 MiB" in platform.process_memory_reason(0)


def test_readings_do_not_depend_on_the_calls_before_them():
    sc = contained(nspid_visible=False)
    sc.allocate(2 * H200_CONTEXT, pid=CHILD)
    fresh, used = platform_for(sc), platform_for(sc)
    for _ in range(3):
        used.get_process_memory_usage(0)
        used.other_processes_memory(0)
    assert devmem.device_report(used, 0) == devmem.device_report(fresh, 0)


def test_learned_pid_is_named_in_the_notes():
    sc = contained(nspid_visible=False)
    assert any(f"PID {HOST_PID}" in n for n in prepared(sc).notes(0))


def test_prepare_allocates_once_per_size_and_never_again():
    sc = contained(nspid_visible=False)
    allocator = ScriptedAllocator(sc)
    platform = prepared(sc, allocator)
    platform.prepare(0)
    platform.get_process_memory_usage(0)
    assert allocator.allocations == list(LEARN_SIZES)


def test_prepare_allocates_nothing_where_this_process_is_listed():
    sc = contained(nspid_visible=True)
    allocator = ScriptedAllocator(sc)
    prepared(sc, allocator)
    assert allocator.allocations == []


def test_prepare_with_learning_off_allocates_nothing():
    sc = contained(nspid_visible=False)
    allocator = ScriptedAllocator(sc)
    assert prepared(sc, allocator, learn_pid=False).get_process_memory_usage(0) is None
    assert allocator.allocations == []


def test_learning_gives_back_what_it_allocated():
    sc = contained(nspid_visible=False)
    prepared(sc)
    assert sc.processes(0) == {HOST_PID: H200_CONTEXT}


def test_learned_pid_excludes_a_cotenant():
    sc = contained(nspid_visible=False)
    sc.allocate(2 * H200_CONTEXT, pid=CHILD)
    assert prepared(sc).other_processes_memory(0) == {CHILD: 2 * H200_CONTEXT}


def test_rounded_allocation_does_not_teach_a_pid():
    sc = contained(nspid_visible=False)
    allocator = ScriptedAllocator(sc, moves={LEARN_SIZES[0]: LEARN_SIZES[0] + 2 * MiB})
    assert prepared(sc, allocator).get_process_memory_usage(0) is None


def test_failed_learning_is_explained():
    sc = contained(nspid_visible=False)
    allocator = ScriptedAllocator(sc, moves={LEARN_SIZES[0]: LEARN_SIZES[0] + 2 * MiB})
    assert "moved by exactly" in prepared(sc, allocator).process_memory_reason(0)


def test_device_mapped_without_a_context_holds_nothing():
    sc = h200_scenario(driver_pid=HOST_PID, nspid_visible=False)  # cuInit ran, no context was created
    allocator = ScriptedAllocator(sc, available=False)
    assert prepared(sc, allocator).get_process_memory_usage(0) == 0
    assert allocator.allocations == []


def test_second_match_must_agree_with_the_first():
    sc = h200_scenario()
    first = LEARN_SIZES[0]

    class TwoMovers:
        """Another process happens to move by exactly the first size, and this process by both."""

        def available(self, device):
            return True, "scripted"

        def allocate(self, device, nbytes):
            sc.allocate(nbytes, pid=HOST_PID)
            if nbytes == first:
                sc.allocate(nbytes, pid=CHILD)
            return nbytes

        def free(self, nbytes):
            sc.release(nbytes, pid=HOST_PID)

    pid, _ = learn_driver_pid(lambda: sc.processes(0), TwoMovers(), 0)
    assert pid == HOST_PID


def test_two_processes_moving_identically_teach_nothing():
    sc = h200_scenario()

    class Twins:
        def available(self, device):
            return True, "scripted"

        def allocate(self, device, nbytes):
            sc.allocate(nbytes, pid=HOST_PID)
            sc.allocate(nbytes, pid=CHILD)
            return nbytes

        def free(self, nbytes):
            sc.release(nbytes, pid=HOST_PID)
            sc.release(nbytes, pid=CHILD)

    assert learn_driver_pid(lambda: sc.processes(0), Twins(), 0)[0] is None


def test_maps_show_which_device_is_held():
    sc = contained(nspid_visible=False)
    assert (maps_nvidia_device(sc.fs, 0), maps_nvidia_device(sc.fs, 1)) == (True, False)


def test_unreadable_maps_are_unknown():
    class NoMaps:
        def read_text(self, path):
            raise PermissionError(path)

    assert maps_nvidia_device(NoMaps(), 0) is None


def test_prepare_learns_once_a_context_exists():
    sc = h200_scenario(driver_pid=HOST_PID, nspid_visible=False)
    allocator = ScriptedAllocator(sc, available=False)
    platform = prepared(sc, allocator)
    assert platform.get_process_memory_usage(0) == 0
    sc.allocate(H200_CONTEXT)  # the engine creates its context
    allocator.is_available = True
    assert platform.get_process_memory_usage(0) is None  # a reading does not learn
    platform.prepare(0)
    assert platform.get_process_memory_usage(0) == H200_CONTEXT


def test_nspid_with_full_width_or_huge_entries_is_unknown():
    class Status:
        def __init__(self, line):
            self.line = line

        def read_text(self, path):
            return f"Name:\tpython3\n{self.line}\n"

    from devmem_nvidia.pidns import namespace_pids

    assert namespace_pids(Status("NSpid:\t１２\t7")) == []
    assert namespace_pids(Status("NSpid:\t" + "9" * 5000)) == []
    assert namespace_pids(Status("NSpid:\t4242\t7")) == [4242, 7]


class CountingFiles:
    """The scenario's files, counting the reads of each path."""

    def __init__(self, sc):
        self.files, self.reads = sc.fs, {}

    def read_text(self, path):
        self.reads[path] = self.reads.get(path, 0) + 1
        return self.files.read_text(path)

    def exists(self, path):
        return self.files.exists(path)

    def listdir(self, path):
        return self.files.listdir(path)


def test_maps_are_read_again_only_once_the_address_space_changed():
    from devmem_nvidia.pidns import AddressSpaceFiles

    sc = h200_scenario()
    counting = CountingFiles(sc)
    files = AddressSpaceFiles(counting)
    assert [files.maps_nvidia_device(0) for _ in range(3)] == [False] * 3
    sc.allocate(H200_CONTEXT)  # a context maps the device: the address space grows
    assert files.maps_nvidia_device(0) is True
    assert counting.reads["/proc/self/maps"] == 2 and counting.reads["/proc/self/statm"] == 4


def test_the_device_minor_is_asked_once():
    sc = h200_scenario()
    sc.files["/proc/self/maps"] = "7f0000000000-7f0000200000 rw-s 00000000 00:05 77 /dev/nvidia7\n"  # another GPU's
    nvml = ScriptedNvml(sc)
    platform = platform_for(sc, nvml=nvml)
    for _ in range(3):
        assert platform.get_process_memory_usage(0) == 0
    assert nvml.calls["nvmlDeviceGetMinorNumber"] == 1
