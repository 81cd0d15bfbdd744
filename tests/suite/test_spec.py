"""Suite files: grid expansion, names, defaults, and errors that name the file, entry and key."""

from __future__ import annotations

import re
import textwrap

import pytest

from lrcheck.errors import SpecError
from lrcheck.suite.spec import load_suite


def suite(tmp_path, text: str):
    path = tmp_path / "ci.toml"
    path.write_text(textwrap.dedent(text))
    return load_suite(path)


def error(tmp_path, text: str) -> str:
    with pytest.raises(SpecError) as caught:
        suite(tmp_path, text)
    message = str(caught.value)
    assert "ci.toml" in message, message
    return message


def test_grid_expands_to_the_cartesian_product_first_key_slowest(tmp_path):
    s = suite(tmp_path, """
        [defaults]
        task = "wine"
        epochs = 2

        [[grid]]
        name = "g-{scheduler}-x{accum}-n{nproc}"
        scheduler = ["linear", "cosine", "onecycle"]
        accum = [1, 2, 4]
        nproc = [1, 2]
        bs = 4
        ref_bs = "auto"
    """)
    assert len(s.entries) == 18
    assert [e.name for e in s.entries[:3]] == ["g-linear-x1-n1", "g-linear-x1-n2",
                                               "g-linear-x2-n1"]
    for entry in s.entries:
        cand, ref = entry.pair.candidate, entry.pair.reference
        assert (cand.task, cand.epochs, cand.bs) == ("wine", 2, 4)
        assert ref.bs == cand.bs * cand.accum * cand.world and ref.world == 1
        assert entry.expect == "pass" and entry.origin.startswith("[[grid]] #1 (scheduler=")
    assert {e.pair.candidate.world for e in s.entries} == {1, 2}


def test_pairs_defaults_ref_nproc_tolerances_and_default_names(tmp_path):
    s = suite(tmp_path, """
        [defaults]
        task = "wine"
        tol_metrics = 0.05

        [[pair]]
        accum = 2
        bs = 8

        [[pair]]
        name = "ddp"
        nproc = 4
        ref_nproc = 2
        bs = 4
        expect = "fail"
        tol_lr = 0.0

        [[grid]]
        name = "sweep"
        policy = ["per-update", "per-micro-batch"]
        accum = 2
        bs = 8
    """)
    first, ddp, *grid = s.entries
    assert first.name == first.pair.name == "wine-cosine-bs8x2-vs-bs16"
    assert first.pair.tolerances.metrics == 0.05
    # bs 4 · accum 2 (the default, as on the command line) · nproc 4, over ref_nproc 2
    assert (ddp.pair.reference.bs, ddp.pair.reference.world, ddp.expect) == (16, 2, "fail")
    assert ddp.pair.tolerances.lr == 0.0
    assert [g.name for g in grid] == ["sweep-wine-cosine-bs8x2-vs-bs16",
                                      "sweep-wine-cosine-bs8x2-per-micro-batch-vs-bs16"]


def test_pairs_and_grids_keep_the_order_of_the_file(tmp_path):
    s = suite(tmp_path, """
        [[grid]]
        name = "g{accum}"
        accum = [2, 3]
        [[pair]]
        name = "p"
    """)
    assert [e.name for e in s.entries] == ["g2", "g3", "p"]


def test_amp_and_inject_overflow_are_checked_with_the_pairs_other_keys(tmp_path):
    """amp = "fp16" needs dtype = "float32", inject_overflow needs amp = "fp16": the keys may
    stand in [defaults], in the [[pair]], or split between them, as flags may come in any
    order."""
    s = suite(tmp_path, """
        [defaults]
        task = "wine"
        dtype = "float32"
        amp = "fp16"
        inject_overflow = [1, 3]

        [[pair]]
        name = "from-defaults"

        [[pair]]
        name = "own-list"
        inject_overflow = [5]

        [[pair]]
        name = "one-update"
        inject_overflow = 2

        [[pair]]
        name = "none"
        inject_overflow = []

        [[pair]]
        name = "off"
        amp = "off"
        dtype = "float64"
        inject_overflow = []

        [[grid]]
        name = "g"
        accum = [1, 2]
        inject_overflow = [[1], [1, 2]]
    """)
    runs = {e.name: (e.pair.candidate.amp, e.pair.candidate.dtype, e.pair.candidate.inject_overflow)
            for e in s.entries}
    assert runs == {
        "from-defaults": ("fp16", "float32", (1, 3)), "own-list": ("fp16", "float32", (5,)),
        "one-update": ("fp16", "float32", (2,)), "none": ("fp16", "float32", ()),
        "off": ("off", "float64", ()),
        "g-wine-cosine-bs16-float32-fp16-overflow1-vs-bs16": ("fp16", "float32", (1,)),
        "g-wine-cosine-bs16-float32-fp16-overflow1.2-vs-bs16": ("fp16", "float32", (1, 2)),
        "g-wine-cosine-bs16x2-float32-fp16-overflow1-vs-bs32": ("fp16", "float32", (1,)),
        "g-wine-cosine-bs16x2-float32-fp16-overflow1.2-vs-bs32": ("fp16", "float32", (1, 2)),
    }
    assert s.entries[0].pair.tolerances.params == 5e-2  # fp16's default, not float32's

    pair = suite(tmp_path, """
        [[pair]]
        task = "wine"
        amp = "fp16"
        inject_overflow = [0, 4]
        dtype = "float32"
    """).entries[0].pair
    assert (pair.candidate.amp, pair.reference.amp, pair.reference.inject_overflow) == (
        "fp16", "fp16", (0, 4))


@pytest.mark.parametrize("text, where, says", [
    ("[[pair]]\nacum = 2\n", "[[pair]] #1", "unknown key 'acum' (did you mean 'accum'?)"),
    ("[[pair]]\nref-bs = 2\n", "[[pair]] #1", "did you mean 'ref_bs'?"),
    ("[defaults]\nbs = 0\n[[pair]]\n", "[defaults], key 'bs'",
     "must be a whole number >= 1, got 0"),
    ("[[pair]]\nscheduler = 'cosine2'\n", "[[pair]] #1, key 'scheduler'", "'cosine2' is not known"),
    ("[[pair]]\nlr = true\n", "[[pair]] #1, key 'lr'", "expected a number or a string, got True"),
    ("[[pair]]\nwarmup = '0.1'\n", "[[pair]] #1, key 'warmup'", "fraction of the run"),
    ("[[pair]]\nexpect = 'passes'\n", "[[pair]] #1, key 'expect'", "choose one of: pass, fail"),
    ("[[pair]]\ntol_lr = -1\n", "[[pair]] #1, key 'tol_lr'", "must be a number >= 0"),
    ("[[pair]]\nref_bs = 'big'\n", "[[pair]] #1, key 'ref_bs'", '"auto"'),
    ("[[pair]]\nnproc = 0\n", "[[pair]] #1, key 'nproc'", ">= 1, got 0"),
    ("[[pair]]\naccum = [1, 2]\n", "[[pair]] #1, key 'accum'", "lists expand only in [[grid]]"),
    ("[[grid]]\naccum = []\n", "[[grid]] #1, key 'accum'", "empty list"),
    ("[[grid]]\naccum = [2, 0]\n", "[[grid]] #1, key 'accum'", "got 0"),
    ("[[grid]]\nexpect = ['pass', 'fail']\n", "[[grid]] #1, key 'expect'", "cannot be a list"),
    ("[[pair]]\nbs = 8\naccum = 2\nref_bs = 12\n", "[[pair]] #1:", "set ref_bs 16"),
    ("[[grid]]\naccum = [2, 4]\nbs = 8\nref_bs = 16\n", "[[grid]] #1 (accum=4):", "ref_bs 16"),
    ("[[grid]]\nname = 'g-{acum}'\naccum = [2]\n", "[[grid]] #1 (accum=2), key 'name'", "template"),
    ("[[pair]]\nname = 'a b'\n", "[[pair]] #1, key 'name'", "cannot name a report folder"),
    ("[defaults]\namp = 'fp16'\n[[pair]]\n", "[[pair]] #1:", "amp fp16 autocasts float32 to "
     "float16; add dtype float32"),
    ("[defaults]\ninject_overflow = [3]\n[[pair]]\n", "[[pair]] #1:",
     "inject_overflow needs amp fp16"),
    ("[[pair]]\namp = 'fp8'\ndtype = 'float32'\n", "[[pair]] #1, key 'amp'", "'fp8' is not"),
    ("[[pair]]\ninject_overflow = ['3']\n", "[[pair]] #1, key 'inject_overflow'",
     "expected update numbers, such as [3, 7] or 3, got ['3']"),
    ("[[pair]]\ninject_overflow = [-1]\n", "[[pair]] #1, key 'inject_overflow'", ">= 0, got -1"),
    ("[[pair]]\ninject_overflow = [[1], [2]]\n", "[[pair]] #1, key 'inject_overflow'",
     "lists expand only in [[grid]]"),
    ("[[pair]]\nname = 'x'\n[[pair]]\nname = 'x'\n", "",
     "two pairs are named 'x' ([[pair]] #1 and [[pair]] #2)"),
    ("[defaults]\nname = 'x'\n[[pair]]\n", "[defaults], key 'name'", "belongs to one pair"),
    ("[pairs]\nbs = 2\n", "", "unknown table 'pairs' (did you mean 'pair'?)"),
    ("[pair]\nbs = 2\n", "", "write [[pair]]"),
    ("[defaults]\nbs = 2\n", "", "has no pairs"),
    ("[[pair]\nbs = 2\n", "", "not valid TOML"),
])
def test_bad_suites_name_the_file_entry_and_key(tmp_path, text, where, says):
    message = error(tmp_path, text)
    assert where in message and says in message, message
    assert "--" not in re.sub(r"--(baseline|save-baseline)", "", message), message


def test_a_missing_file_is_bad_input(tmp_path):
    with pytest.raises(SpecError, match="does not exist"):
        load_suite(tmp_path / "nope.toml")


def test_deepspeed_keys_are_checked_with_the_type_it_trains_in(tmp_path):
    path = tmp_path / "ds.toml"
    path.write_text(textwrap.dedent("""
        [[grid]]
        name = "ds-zero{zero_stage}"
        framework = "deepspeed"
        dtype = "float32"
        zero_stage = [0, 2]
        scheduler_stepped_too = true
    """))
    entries = load_suite(path).entries
    assert [e.pair.candidate.zero_stage for e in entries] == [0, 2]
    assert all(e.pair.candidate.scheduler_stepped_too for e in entries)
    path.write_text('[[pair]]\nname = "ds"\nframework = "deepspeed"\n')
    with pytest.raises(SpecError, match="cannot train dtype float64.*add dtype float32"):
        load_suite(path)


def test_amp_bf16_is_a_deepspeed_key_and_refused_elsewhere(tmp_path):
    (entry,) = suite(tmp_path, """
        [[pair]]
        framework = "deepspeed"
        dtype = "float32"
        amp = "bf16"
    """).entries
    assert (entry.pair.candidate.amp, entry.pair.candidate.framework) == ("bf16", "deepspeed")
    assert "framework plain cannot train amp bf16 here" in error(
        tmp_path, '[[pair]]\ndtype = "float32"\namp = "bf16"\n')


def test_a_pair_of_commands_takes_its_commands_samples_and_tolerances_not_the_run_defaults(
        tmp_path):
    s = suite(tmp_path, """
        [defaults]
        task = "wine"
        tol_lr = 1e-9

        [[pair]]
        name = "mine"
        ref_command = "python train.py --bs 32"
        command = "python train.py --bs 16 --accum 2"
        samples_per_update = 32
        expect = "fail"

        [[pair]]
        name = "lrchecks"
        accum = 2
    """)
    mine, own = s.entries
    assert mine.pair.reference == "python train.py --bs 32"
    assert mine.pair.candidate == "python train.py --bs 16 --accum 2"
    assert (mine.pair.options.samples, mine.pair.tolerances.lr, mine.expect) == (32, 1e-9, "fail")
    assert mine.pair.noise_floor is False
    assert mine.pair.to_dict()["kind"] == "commands"
    assert own.pair.candidate.task == "wine"  # the defaults still apply to lrcheck's own pairs


@pytest.mark.parametrize("body, words", [
    ('ref_command = "python a.py"\ncommand = "python b.py"\naccum = 2',
     "[[pair]] #1, key 'accum': a pair of commands runs the commands as they are; it takes no "
     "run key"),
    ('command = "python b.py"',
     "a pair of commands needs both 'ref_command' and 'command'; 'ref_command' is missing"),
    ('ref_command = "python a.py"\ncommand = ""', "key 'command': expected a command line"),
    ('ref_command = "python \'a.py"\ncommand = "python b.py"',
     "key 'ref_command': \"python 'a.py\" does not split as a shell would"),
    ('ref_command = "python a.py"\ncommand = "python b.py"\nsamples_per_update = 0',
     "key 'samples_per_update': must be a whole number >= 1"),
])
def test_a_bad_pair_of_commands_is_refused_naming_the_key(tmp_path, body, words):
    assert words in error(tmp_path, "[[pair]]\n" + body)


def test_how_a_pair_of_commands_logs_are_read(tmp_path):
    """``tags`` and ``log_steps`` (docs/logs.md): as ``--tag`` and ``--log-steps`` say them."""
    from lrcheck.spec import CommandPair

    (mine,) = suite(tmp_path, """
        [[pair]]
        ref_command = "python a.py"
        command = "python b.py"
        tags = {lr = "LearningRate", loss = "Loss/train"}
        log_steps = "updates-from-1"
    """).entries
    options = mine.pair.options
    assert (options.tags, options.log_steps) == (("lr=LearningRate", "loss=Loss/train"),
                                                 "updates-from-1")
    assert CommandPair.from_dict(mine.pair.to_dict()) == mine.pair
    body = '[[pair]]\nref_command = "python a.py"\ncommand = "python b.py"\n'
    assert "key 'tags': tag mapping learning=" in error(tmp_path, body + 'tags = {learning = "x"}')
    assert "key 'log_steps': log steps 'epochs'" in error(tmp_path, body + 'log_steps = "epochs"')
    assert "key 'tags': an option of lrcheck run, for a pair of commands" in error(
        tmp_path, '[[pair]]\naccum = 2\ntags = {lr = "x"}')


def test_commands_belong_in_a_pair_not_in_defaults_nor_a_grid(tmp_path):
    assert "[defaults], key 'command': a command belongs to one pair" in error(
        tmp_path, '[defaults]\ncommand = "python b.py"\n[[pair]]\naccum = 2')
    assert "[[grid]] #1, key 'ref_command': commands belong in a [[pair]]" in error(
        tmp_path, '[[grid]]\nref_command = "python a.py"\ncommand = ["python b.py"]')


def test_deterministic_is_a_suite_key_for_every_pair_commands_included(tmp_path):
    from lrcheck.spec import CommandPair
    from lrcheck.suite.spec import deterministic_suite
    from lrcheck.suite_api import load_suite as load_for_cli

    s = suite(tmp_path, """
        [defaults]
        deterministic = true

        [[pair]]
        name = "on"

        [[pair]]
        name = "off"
        deterministic = false

        [[pair]]
        name = "commands"
        ref_command = "python train.py --bs 32"
        command = "python train.py --bs 16 --accum 2"
        """)
    pairs = {e.name: e.pair for e in s.entries}
    assert pairs["on"].reference.deterministic and pairs["on"].candidate.deterministic
    assert not pairs["off"].candidate.deterministic
    commands = pairs["commands"]
    assert isinstance(commands, CommandPair) and commands.options.deterministic
    assert CommandPair.from_dict(commands.to_dict()) == commands
    forced = {e.name: e.pair for e in deterministic_suite(s).entries}
    assert forced["off"].reference.deterministic and forced["off"].candidate.deterministic
    assert [e.name for e in load_for_cli(tmp_path / "ci.toml", deterministic=True).entries] == \
        ["on", "off", "commands"]
    assert "expected true or false" in error(tmp_path, """
        [[pair]]
        deterministic = "yes"
        """)


def test_a_pair_of_commands_takes_an_interrupt_and_a_resume(tmp_path):
    from lrcheck.spec import CommandPair
    from lrcheck.spec.interrupt import Interrupt

    (entry,) = suite(tmp_path, """
        [[pair]]
        ref_command = "python train.py --bs 32"
        command = "python train.py --bs 16 --accum 2 --save-every 4 --save c.pt"
        interrupt_at = 14
        resume = "python train.py --bs 16 --accum 2 --resume c.pt"
        interrupt_signal = "KILL"
    """).entries
    assert entry.pair.options.interrupt == Interrupt(
        14, "python train.py --bs 16 --accum 2 --resume c.pt", "KILL", 30.0)
    assert CommandPair.from_dict(entry.pair.to_dict()) == entry.pair
    plain = 'ref_command = "python a.py"\ncommand = "python b.py"\n'
    assert "[[pair]] #1: interrupt_at and resume go together" in error(
        tmp_path, "[[pair]]\n" + plain + "interrupt_at = 3")
    assert "[[pair]] #1: interrupt_at must be a number of updates >= 1, got 0" in error(
        tmp_path, "[[pair]]\n" + plain + 'interrupt_at = 0\nresume = "python b.py"')
    assert "a pair of commands needs both 'ref_command' and 'command'" in error(
        tmp_path, '[[pair]]\ninterrupt_at = 3\nresume = "python b.py"')
    assert "[defaults], key 'resume': a command belongs to one pair" in error(
        tmp_path, '[defaults]\nresume = "python b.py"\n[[pair]]\naccum = 2')
