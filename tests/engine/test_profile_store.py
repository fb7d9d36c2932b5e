"""devmem.engine.profile_store: measured figures kept on disk under a key, read back by a start with the same key."""

from __future__ import annotations

import json
import logging
from decimal import Decimal
from fractions import Fraction

import pytest
from ledger_workers import no_hang

from devmem.engine.profile_store import ENV, ProfileStore, ProfileStoreError, default_directory, resolve_store

KEY = {"model": {"layers": 22, "hidden": 2048}, "device_total": 150 << 30, "versions": {"torch": "2.11"}}
FIGURES = {"block_bytes": 21757952, "runs": [{"num_blocks": 33}]}


@pytest.fixture
def store(tmp_path):
    return ProfileStore(tmp_path / "profiles")


def test_figures_saved_under_a_key_are_read_back_under_the_same_key(store):
    path = store.save("engine", KEY, FIGURES, 1700000000.0)
    stored = store.load("engine", dict(reversed(list(KEY.items()))))  # the order of the fields does not matter
    assert stored is not None and stored.path == path and stored.figures == FIGURES
    assert stored.created == 1700000000.0 and stored.key == KEY


@pytest.mark.parametrize(
    "changed",
    [
        {**KEY, "device_total": (150 << 30) - 1},
        {**KEY, "versions": {"torch": "2.12"}},
        {**KEY, "model": {"layers": 22, "hidden": 2048, "dtype": "bf16"}},
        {**KEY, "allocator": {"PYTORCH_ALLOC_CONF": "expandable_segments:True"}},
    ],
)
def test_any_changed_field_finds_nothing(store, changed):
    store.save("engine", KEY, FIGURES, 0.0)
    assert store.load("engine", changed) is None


def test_another_kind_finds_nothing(store):
    store.save("engine", KEY, FIGURES, 0.0)
    assert store.load("other-engine", KEY) is None


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("{ not json", "Expecting property name"),
        ('{"format": "something-else", "figures": {}}', "not a devmem-profile file"),
        ("[1, 2, 3]", "not a devmem-profile file"),
        ("[" * 100_000, "ignoring the stored profile"),
    ],
)
def test_a_corrupt_or_foreign_file_is_ignored_with_a_warning(store, caplog, text, why):
    path = store.save("engine", KEY, FIGURES, 0.0)
    path.write_text(text)
    with caplog.at_level(logging.WARNING, logger="devmem.engine.profile_store"):
        assert store.load("engine", KEY) is None
    assert f"ignoring the stored profile {path}" in caplog.text and why in caplog.text


def test_a_file_stored_under_another_key_at_the_same_path_is_ignored(store, caplog):
    path = store.save("engine", KEY, FIGURES, 0.0)
    body = json.loads(path.read_text())
    body["key"] = {**KEY, "device_total": 1}
    path.write_text(json.dumps(body))
    with caplog.at_level(logging.WARNING, logger="devmem.engine.profile_store"):
        assert store.load("engine", KEY) is None
    assert "stored under another key" in caplog.text


def test_a_file_of_another_layout_version_is_ignored(store, caplog):
    path = store.save("engine", KEY, FIGURES, 0.0)
    body = json.loads(path.read_text())
    body["version"] = 999
    path.write_text(json.dumps(body))
    with caplog.at_level(logging.WARNING, logger="devmem.engine.profile_store"):
        assert store.load("engine", KEY) is None
    assert "layout version 999" in caplog.text


def test_a_folder_that_cannot_be_written_gives_a_warning_and_no_file(tmp_path, caplog):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with caplog.at_level(logging.WARNING, logger="devmem.engine.profile_store"):
        assert ProfileStore(blocker / "profiles").save("engine", KEY, FIGURES, 0.0) is None
    assert "could not store the profile" in caplog.text


def test_the_folder_comes_from_the_variable_then_the_xdg_cache_folder(tmp_path, monkeypatch):
    monkeypatch.setenv(ENV, str(tmp_path / "named"))
    assert default_directory() == tmp_path / "named"
    monkeypatch.delenv(ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_directory() == tmp_path / "xdg" / "devmem" / "profiles"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/path")  # not absolute: ignored, as the XDG spec says
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_directory() == tmp_path / "home" / ".cache" / "devmem" / "profiles"


def test_the_store_argument_names_the_store(tmp_path, monkeypatch):
    monkeypatch.setenv(ENV, str(tmp_path / "named"))
    assert resolve_store(None).directory == tmp_path / "named" == resolve_store(True).directory
    assert resolve_store(False) is None
    assert resolve_store(tmp_path / "given").directory == tmp_path / "given"
    store = ProfileStore(tmp_path)
    assert resolve_store(store) is store


def test_a_folder_with_a_nul_character_is_refused_naming_it(tmp_path):
    with pytest.raises(ProfileStoreError, match=r"without a NUL character, got '.*x\\x00y'"):
        ProfileStore(f"{tmp_path}/x\0y")


@pytest.mark.parametrize("variable", [ENV, "XDG_CACHE_HOME"])
def test_a_folder_variable_past_its_bound_is_refused_naming_it(monkeypatch, variable):
    monkeypatch.delenv(ENV, raising=False)
    monkeypatch.setenv(variable, "/" + "x" * 5000)
    with pytest.raises(ProfileStoreError, match=f"{variable}='/x+\\.\\.\\. \\(\\d+ characters\\) holds more than 4096"):
        ProfileStore()


@pytest.mark.parametrize("bad", [3, 1.5, b"bytes", ["a"]])
def test_a_store_argument_of_another_kind_is_refused(bad):
    with pytest.raises(ProfileStoreError, match="store must be a ProfileStore"):
        resolve_store(bad)


@pytest.mark.parametrize("bad", ["", "a/b", "../x", 3])
def test_a_kind_that_is_not_a_plain_name_is_refused(store, bad):
    with pytest.raises(ProfileStoreError, match="kind must be a name"):
        store.path(bad, KEY)


@pytest.mark.parametrize("bad", [{}, [], "key", None])
def test_a_key_that_is_not_a_non_empty_mapping_is_refused(store, bad):
    with pytest.raises(ProfileStoreError, match="a profile key must be a non-empty mapping"):
        store.path("engine", bad)


def test_save_first_stores_where_nothing_is_stored(store):
    kept, ours = store.save_first("engine", KEY, FIGURES, 5.0)
    assert ours and kept is not None and kept.figures == FIGURES
    assert store.load("engine", KEY).figures == FIGURES


def test_save_first_keeps_the_figures_another_engine_stored_first_and_returns_them(store):
    store.save_first("engine", KEY, FIGURES, 5.0)
    kept, ours = store.save_first("engine", KEY, {**FIGURES, "block_bytes": 1}, 6.0)
    assert not ours and kept.figures == FIGURES and kept.created == 5.0
    assert store.load("engine", KEY).figures == FIGURES
    assert not list(store.directory.glob(".*.tmp"))  # no temporary file left behind


def test_save_first_replaces_a_file_that_load_ignores(store, caplog):
    path = store.save("engine", KEY, FIGURES, 0.0)
    path.write_text("{ not json")
    with caplog.at_level(logging.WARNING, logger="devmem.engine.profile_store"):
        kept, ours = store.save_first("engine", KEY, FIGURES, 7.0)
    assert ours and store.load("engine", KEY).created == 7.0


def test_save_first_in_a_folder_that_cannot_be_written_gives_a_warning_and_nothing(tmp_path, caplog):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with caplog.at_level(logging.WARNING, logger="devmem.engine.profile_store"):
        assert ProfileStore(blocker / "profiles").save_first("engine", KEY, FIGURES, 0.0) == (None, False)
    assert "could not store the profile" in caplog.text


def _store_first_in_a_child(directory, figure, start, answers):
    import time as _time

    _time.sleep(max(0.0, start - _time.time()))
    kept, ours = ProfileStore(directory).save_first("engine", KEY, {**FIGURES, "block_bytes": figure}, float(figure))
    answers.put((figure, kept.figures["block_bytes"], ours))


def _store_at_once(store_in_a_child, directory):
    """Six forked processes that each store figure 1..6 under one key at the same moment: their answers."""
    import multiprocessing
    import time

    context = multiprocessing.get_context("fork")
    answers = context.Queue()
    start = time.time() + 0.5
    children = [
        context.Process(target=store_in_a_child, args=(directory, figure, start, answers)) for figure in range(1, 7)
    ]
    for child in children:
        child.start()
    got = [answers.get(timeout=30) for _ in children]
    for child in children:
        child.join(timeout=30)
    return got


def test_processes_that_store_one_key_at_once_all_get_the_one_figure_that_was_stored(tmp_path):

    got = _store_at_once(_store_first_in_a_child, tmp_path)
    kept = {stored for _, stored, _ in got}
    assert len(kept) == 1 and [ours for _, _, ours in got].count(True) == 1
    (winner,) = [figure for figure, _, ours in got if ours]
    assert kept == {winner} and ProfileStore(tmp_path).load("engine", KEY).figures["block_bytes"] == winner


@pytest.mark.parametrize(
    ("key", "why"),
    [
        ({}, "non-empty mapping"),
        ([("model", 1)], "non-empty mapping"),
        ({"nested": [[[[]]]] * 1}, None),  # plain data: accepted
    ],
)
def test_a_key_that_is_no_plain_mapping_is_refused_by_name(store, key, why):
    if why is None:
        assert store.path("engine", key).name.startswith("engine-")
        return
    with pytest.raises(ProfileStoreError, match=why):
        store.path("engine", key)


def test_a_circular_key_is_refused_with_a_store_error(store):
    key: dict = {"model": {}}
    key["model"]["self"] = key
    with pytest.raises(ProfileStoreError, match="plain data.*Circular reference"):
        store.load("engine", key)


def test_a_fifo_in_place_of_a_stored_profile_is_ignored_not_waited_on(store, caplog):
    import os

    path = store.save("engine", KEY, FIGURES, 0.0)
    path.unlink()
    os.mkfifo(path)

    with no_hang(), caplog.at_level(logging.WARNING, logger="devmem.engine.profile_store"):
        assert store.load("engine", KEY) is None
    assert "is not a regular file" in caplog.text


def test_a_symlink_loop_as_the_folder_gives_a_warning_and_no_file(tmp_path, caplog):
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    store = ProfileStore(tmp_path / "loop")
    with caplog.at_level(logging.WARNING, logger="devmem.engine.profile_store"):
        assert store.save_first("engine", KEY, FIGURES, 0.0) == (None, False)
        assert store.load("engine", KEY) is None
    assert "could not store the profile" in caplog.text and "ignoring the stored profile" in caplog.text


def _store_first_without_hard_links(directory, figure, start, answers):
    import errno
    import os
    import time as _time

    def no_link(*_: object, **__: object) -> None:
        raise OSError(errno.EPERM, "Operation not permitted")  # vfat, some FUSE and SMB mounts

    real_replace = os.replace

    def slow_replace(src, dst):  # widens the window between the check and the rename, as a loaded host does
        _time.sleep(0.05)
        real_replace(src, dst)

    os.link, os.replace = no_link, slow_replace
    _time.sleep(max(0.0, start - _time.time()))
    kept, ours = ProfileStore(directory).save_first("engine", KEY, {**FIGURES, "block_bytes": figure}, float(figure))
    answers.put((figure, kept.figures["block_bytes"], ours))


def test_without_hard_links_processes_that_store_one_key_at_once_all_get_one_figure(tmp_path):

    got = _store_at_once(_store_first_without_hard_links, tmp_path)
    (winner,) = [figure for figure, _, ours in got if ours]
    assert {stored for _, stored, _ in got} == {winner}
    assert ProfileStore(tmp_path).load("engine", KEY).figures["block_bytes"] == winner


def test_figures_too_large_to_read_back_are_not_stored(store, caplog):
    from devmem.engine.profile_store import MAX_FILE_BYTES

    with caplog.at_level(logging.WARNING, logger="devmem.engine.profile_store"):
        assert store.save("engine", {**KEY, "huge": "x" * MAX_FILE_BYTES}, FIGURES, 0.0) is None
    assert f"the key and figures take more than {MAX_FILE_BYTES} bytes" in caplog.text
    assert not list(store.directory.glob("*"))


@pytest.mark.parametrize(
    ("one", "other"),
    [
        ({"ratio": "Fraction(1, 2)"}, {"ratio": Fraction(1, 2)}),
        ({"id2label": {1: "a"}}, {"id2label": {"1": "a"}}),
        ({"shape": (1, 2)}, {"shape": [1, 2]}),
        ({"n": Decimal("5")}, {"n": "Decimal('5')"}),
        ({"a": {"~tuple": [1, 2]}}, {"a": (1, 2)}),
        ({"labels": {1: "a", "b": 2}}, {"labels": {"1": "a", "b": 2}}),
        ({"s": {1, 2}}, {"s": [1, 2]}),
    ],
    ids=[
        "dtype-or-text",
        "int-or-text-names",
        "tuple-or-list",
        "numpy-or-its-repr",
        "a-name-like-a-tag",
        "mixed",
        "set",
    ],
)
def test_keys_of_different_configurations_never_share_a_file(store, one, other):
    """JSON wrote both as one text (a repr for what it cannot hold, names as text, tuples as lists): the figures
    measured for one were read back for the other."""
    assert store.path("engine", one) != store.path("engine", other)
    store.save("engine", one, FIGURES, 0.0)
    assert store.load("engine", other) is None


def test_a_key_of_plain_data_is_written_as_json_writes_it():
    """Profiles stored under plain keys before keys were tagged keep their files."""
    from devmem.engine.profile_store import canonical

    key = {"model": {"layers": 32, "name": "llama", "ratio": 0.5}, "flags": [True, None], "m~": "x"}
    assert canonical(key) == json.dumps(key, sort_keys=True, separators=(",", ":"))


def test_a_set_in_a_key_is_one_text_whatever_its_order():
    from devmem.engine.profile_store import canonical

    assert canonical({"s": {"b", "a", "c"}}) == canonical({"s": {"c", "a", "b"}}) == '{"s":{"~set":["a","b","c"]}}'
