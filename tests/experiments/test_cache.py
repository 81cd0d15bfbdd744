"""Data sets kept once per machine (``experiments.cache``): read back bit for bit, loaded again
where a file is not whole, nothing kept with ``LRCHECK_CACHE=off``, and a folder that cannot be
written only not used."""

import numpy as np
import pytest

from lrcheck.experiments import cache
from lrcheck.experiments.cache import load_data
from lrcheck.experiments.tasks import TASKS


class Loads:
    """``Task.load`` for the wine data, counting its calls."""

    def __init__(self, task: str = "wine", samples: int | None = None):
        self.task, self.samples, self.calls = task, samples, 0

    def __call__(self):
        self.calls += 1
        return TASKS[self.task].load(3, self.samples)


def _same(a, b):
    for name in ("x_train", "y_train", "x_test", "y_test"):
        left, right = getattr(a, name), getattr(b, name)
        assert left.dtype == right.dtype and np.array_equal(left, right), name
    assert (a.num_classes, a.vocab) == (b.num_classes, b.vocab)


@pytest.mark.parametrize(("task", "samples"), [("wine", None), ("tokens", 50)])
def test_a_second_load_is_read_back_bit_for_bit(tmp_path, monkeypatch, task, samples):
    monkeypatch.setenv(cache.CACHE_ENV, str(tmp_path))
    loads = Loads(task, samples)
    first = cache.cached(task, 3, samples, loads)
    second = cache.cached(task, 3, samples, loads)
    assert loads.calls == 1
    _same(first, second)
    _same(second, TASKS[task].load(3, samples))
    assert [p.name for p in tmp_path.iterdir()] == [cache.file_name(task, 3, samples)]


def test_another_seed_or_size_is_another_file(tmp_path, monkeypatch):
    monkeypatch.setenv(cache.CACHE_ENV, str(tmp_path))
    names = {cache.file_name("synthetic", seed, n) for seed in (0, 1) for n in (100, 200)}
    assert len(names) == 4


def test_a_file_cut_short_is_loaded_again_and_rewritten(tmp_path, monkeypatch):
    monkeypatch.setenv(cache.CACHE_ENV, str(tmp_path))
    loads = Loads()
    cache.cached("wine", 3, None, loads)
    path = tmp_path / cache.file_name("wine", 3, None)
    path.write_bytes(path.read_bytes()[:100])
    _same(cache.cached("wine", 3, None, loads), loads())
    assert loads.calls == 3  # the first, the file cut short, and the comparison's
    cache.cached("wine", 3, None, loads)
    assert loads.calls == 3


def test_off_keeps_nothing_and_an_unwritable_folder_is_only_not_used(tmp_path, monkeypatch):
    monkeypatch.setenv(cache.CACHE_ENV, "off")
    loads = Loads()
    cache.cached("wine", 3, None, loads)
    cache.cached("wine", 3, None, loads)
    assert loads.calls == 2
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")
    monkeypatch.setenv(cache.CACHE_ENV, str(blocked / "cache"))
    _same(cache.cached("wine", 3, None, loads), loads())


def test_load_data_goes_through_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv(cache.CACHE_ENV, str(tmp_path))
    load_data.cache_clear()
    try:
        _same(load_data("wine", 5, None), TASKS["wine"].load(5, None))
        assert (tmp_path / cache.file_name("wine", 5, None)).exists()
    finally:
        load_data.cache_clear()


def test_the_default_folder_follows_xdg(monkeypatch, tmp_path):
    monkeypatch.delenv(cache.CACHE_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache.cache_folder() == tmp_path / "lrcheck"


@pytest.mark.parametrize("off", ["off", "OFF", "0", "false", "no", "none"])
def test_each_word_for_off_keeps_nothing_and_makes_no_folder(tmp_path, monkeypatch, off):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(cache.CACHE_ENV, off)
    assert cache.cache_folder() is None
    loads = Loads()
    cache.cached("wine", 3, None, loads)
    assert loads.calls == 1 and list(tmp_path.iterdir()) == []


def test_a_relative_folder_is_made_absolute_and_no_home_means_no_cache(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(cache.CACHE_ENV, "data")
    assert cache.cache_folder() == tmp_path / "data"
    monkeypatch.delenv(cache.CACHE_ENV)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)

    def no_home():
        raise RuntimeError("Could not determine home directory.")

    monkeypatch.setattr(cache.Path, "home", staticmethod(no_home))
    assert cache.cache_folder() is None
    _same(cache.cached("wine", 3, None, Loads()), Loads()())
