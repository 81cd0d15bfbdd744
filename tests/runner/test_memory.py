"""What a run's recording needs against what the machine has: refused before anything trains."""

import pytest

from lrcheck.errors import SpecError
from lrcheck.runner import memory


@pytest.mark.parametrize("count, text", [
    (0, "0 B"), (999, "999 B"), (1500, "1.5 kB"), (23_303_444_000, "23.3 GB"),
    (1_693_120_000_000, "1.69 TB"), (2 * 10**15, "2 PB"),
])
def test_human_bytes(count, text):
    assert memory.human_bytes(count) == text


def test_available_bytes_reads_memavailable(tmp_path, monkeypatch):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       24000000 kB\nMemFree:  100 kB\n"
                       "MemAvailable:   23303444 kB\n")
    monkeypatch.setattr(memory, "MEMINFO", str(meminfo))
    monkeypatch.setattr(memory, "CGROUP_FILES", (str(tmp_path / "none"), str(tmp_path / "none")))
    assert memory.available_bytes() == 23303444 * 1024


def test_a_cgroup_limit_lowers_what_is_available(tmp_path, monkeypatch):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemAvailable:   23303444 kB\n")
    (tmp_path / "memory.max").write_text("1000000000\n")
    (tmp_path / "memory.current").write_text("400000000\n")
    monkeypatch.setattr(memory, "MEMINFO", str(meminfo))
    monkeypatch.setattr(memory, "CGROUP_FILES", (str(tmp_path / "memory.max"),
                                                 str(tmp_path / "memory.current")))
    assert memory.available_bytes() == 600_000_000
    (tmp_path / "memory.max").write_text("max\n")
    assert memory.available_bytes() == 23303444 * 1024


def test_check_fits_names_both_amounts_and_the_fix(monkeypatch):
    monkeypatch.setattr(memory, "available_bytes", lambda: 2_000_000_000)
    memory.check_fits(1_000_000_000, "the thing", "do less")
    with pytest.raises(SpecError) as info:
        memory.check_fits(3_000_000_000, "the thing", "do less")
    assert str(info.value) == ("the thing needs about 3 GB of memory, and 2 GB is available; "
                               "do less")
    monkeypatch.setattr(memory, "available_bytes", lambda: None)  # cannot tell: no refusal
    memory.check_fits(10**18, "the thing", "do less")


def test_the_recording_estimate_is_the_snapshots_a_run_keeps():
    from lrcheck.experiments.cache import load_data
    from lrcheck.runner.plain import train
    from lrcheck.runner.recording import recording_bytes
    from lrcheck.spec import RunSpec

    for dtype in ("float32", "float64"):
        spec = RunSpec(task="wine", bs=8, accum=2, epochs=2, dtype=dtype)
        data = load_data(spec.task, spec.seed, spec.samples)
        assert recording_bytes(spec, data) == train(spec, data, device="cpu").params.nbytes


def test_a_reference_that_keeps_its_optimizer_state_is_estimated_with_it():
    from lrcheck.experiments.cache import load_data
    from lrcheck.runner.plain import train
    from lrcheck.runner.recording import recording_bytes
    from lrcheck.spec import RunSpec

    for optimizer in ("sgd", "adamw"):
        spec = RunSpec(task="wine", bs=8, accum=1, epochs=2, optimizer=optimizer)
        data = load_data(spec.task, spec.seed, spec.samples)
        trace = train(spec, data, device="cpu", keep_states=True)
        assert trace.optimizer_states is not None
        kept = trace.params.nbytes + trace.optimizer_states.nbytes
        assert recording_bytes(spec, data, keep_states=True) == kept
