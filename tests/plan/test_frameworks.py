"""--framework as data: which settings apply where, what a framework decides itself, the
reference it is compared with, and the old spelling --policy accelerate."""

import pytest
from typer.testing import CliRunner

from lrcheck.cli import app
from lrcheck.errors import SpecError
from lrcheck.plan.frameworks import FRAMEWORKS, require_framework
from lrcheck.spec import PairSpec, RunSpec, reference_framework, resolve
from lrcheck.suite.spec import parse_suite


@pytest.mark.parametrize(("setting", "value", "framework"), [
    ("trainer_loss", "num-items", "transformers"),
    ("even_batches", False, "transformers"),
    ("lightning_sampler", "own", "lightning"),
    ("drop_last", True, "lightning"),
])
def test_a_framework_setting_is_refused_where_it_does_not_apply(setting, value, framework):
    RunSpec(framework=framework, **{setting: value})  # where it applies
    with pytest.raises(SpecError, match=f"applies to --framework .*{framework}.*not plain"):
        RunSpec(**{setting: value})


def test_what_a_framework_decides_itself_cannot_be_asked_of_it():
    for flag, field in (("--policy", {"policy": "per-micro-batch"}),
                        ("--resume-at", {"resume_at": 3})):
        with pytest.raises(SpecError, match=f"{flag} applies to lrcheck's own loop"):
            RunSpec(framework="lightning", **field)


def test_a_framework_that_owns_the_epoch_is_fed_every_sample_and_refuses_carry():
    assert resolve(RunSpec(framework="transformers"))[0].tail == "flush"
    assert resolve(RunSpec(framework="accelerate"))[0].tail == "drop"  # lrcheck's tail
    with pytest.raises(SpecError, match="ends each epoch itself"):
        RunSpec(framework="lightning", tail="carry")


def test_the_trainer_runs_its_own_schedules_only():
    assert RunSpec(framework="transformers", scheduler="linear").scheduler == "linear"
    with pytest.raises(SpecError, match="choose one of constant, linear, cosine"):
        RunSpec(framework="transformers", scheduler="onecycle")


def test_the_reference_trains_in_the_candidates_framework_unless_told():
    cand = RunSpec(framework="lightning", drop_last=True, lightning_sampler="own")
    same = PairSpec.build(cand)
    assert (same.reference.framework, same.reference.drop_last) == ("lightning", True)
    assert same.reference.accum == 1 and same.name.endswith("-vs-bs32")
    plain = PairSpec.build(cand, ref_framework="plain")
    assert plain.reference.framework == "plain" and not plain.reference.drop_last
    assert plain.reference.lightning_sampler == "distributed" and plain.reference.tail == "flush"
    assert plain.name.endswith("-vs-plain-bs32") and "lightning" in plain.name
    with pytest.raises(SpecError, match="--ref-framework 'keras' is not known"):
        PairSpec.build(cand, ref_framework="keras")


def test_the_old_spelling_policy_accelerate_is_the_framework_against_plain():
    with pytest.warns(FutureWarning, match="--framework accelerate"):
        spec = RunSpec(policy="accelerate")
    assert (spec.framework, spec.policy) == ("accelerate", "per-update")
    assert reference_framework("accelerate", None) == "plain"
    assert reference_framework("accelerate", "accelerate") == "accelerate"
    assert reference_framework("per-update", None) is None


def test_a_missing_framework_names_its_install_command(monkeypatch):
    import sys

    assert require_framework("plain") == {}
    monkeypatch.setitem(sys.modules, "lightning", None)
    with pytest.raises(SpecError, match=r"pip install 'lrcheck\[lightning\]'"):
        require_framework("lightning")


def test_a_suite_takes_the_framework_its_settings_and_the_reference_framework():
    suite = parse_suite({"pair": [{"framework": "transformers", "trainer_loss": "num-items",
                                   "even_batches": False, "ref_framework": "plain"}]}, "s.toml")
    pair = suite.entries[0].pair
    assert (pair.candidate.framework, pair.candidate.trainer_loss) == ("transformers", "num-items")
    assert not pair.candidate.even_batches and pair.reference.framework == "plain"
    with pytest.raises(SpecError, match="key 'drop_last': expected true or false"):
        parse_suite({"pair": [{"framework": "lightning", "drop_last": "yes"}]}, "s.toml")
    with pytest.raises(SpecError, match="key 'ref_framework': 'jax' is not known"):
        parse_suite({"pair": [{"ref_framework": "jax"}]}, "s.toml")


def test_lrcheck_list_shows_every_framework_and_its_settings():
    out = CliRunner().invoke(app, ["list"]).stdout
    assert "frameworks (--framework)" in out
    for framework in FRAMEWORKS.values():
        assert framework.name in out
    assert "--trainer-loss" in out and "--lightning-sampler" in out


def test_a_run_says_how_it_trained_in_a_reports_words():
    assert RunSpec().trained_by == "per-update"
    assert RunSpec(framework="transformers").trained_by == "transformers"
    spec = RunSpec(framework="transformers", trainer_loss="num-items", even_batches=False)
    assert spec.trained_by == "transformers, trainer-loss num-items, no-even-batches"
    assert RunSpec(framework="lightning", drop_last=True).trained_by == "lightning, drop-last"
