"""The settings only some frameworks have, declared once (``spec/settings.py``): every place
that names one — ``RunSpec``'s fields, the pair's folder name, the suite's keys, ``lrcheck
compare``'s options, the registry's settings — follows the declaration, and a setting added to
``SETTINGS`` without its field or its option fails here."""

from __future__ import annotations

import typing
from dataclasses import fields

import pytest
import typer.main

from lrcheck.cli import app
from lrcheck.cli.compare import compare_command
from lrcheck.errors import SpecError
from lrcheck.plan.frameworks import FRAMEWORKS
from lrcheck.spec import (
    SETTINGS,
    CompareOptions,
    PairSpec,
    RunSpec,
    Setting,
    ToleranceOverrides,
    settings_for,
)
from lrcheck.suite.spec import BOOL_KEYS, KEYS, parse_suite

# A value other than the default of each setting, for the framework it is tried with.
CHANGED = {"drop_last": True, "trainer_loss": "num-items", "even_batches": False,
           "lightning_sampler": "own", "zero_stage": 2, "scheduler_stepped_too": True}


def _needs(setting: Setting[typing.Any]) -> dict[str, str]:
    return {"framework": setting.frameworks[0], "dtype": "float32"}


def test_every_setting_has_a_value_to_try_here():
    assert set(CHANGED) == {s.name for s in SETTINGS}


@pytest.mark.parametrize("setting", SETTINGS, ids=lambda s: s.name)
def test_every_setting_is_a_runspec_field_with_its_default(setting):
    field = {f.name: f for f in fields(RunSpec)}[setting.name]
    assert field.default == setting.default
    hints = typing.get_type_hints(RunSpec)
    assert isinstance(setting.default, hints[setting.name])


@pytest.mark.parametrize("setting", SETTINGS, ids=lambda s: s.name)
def test_every_setting_applies_to_registered_frameworks_only(setting):
    assert setting.frameworks and set(setting.frameworks) <= set(FRAMEWORKS)
    assert list(setting.frameworks) == [f for f in FRAMEWORKS if f in setting.frameworks]
    for name in FRAMEWORKS:
        assert (setting.flag in settings_for(name)) == (name in setting.frameworks)
        assert setting.flag not in FRAMEWORKS[name].settings  # declared once, here


@pytest.mark.parametrize("setting", SETTINGS, ids=lambda s: s.name)
def test_a_setting_is_refused_where_it_does_not_apply(setting):
    value = CHANGED[setting.name]
    spec = RunSpec(**_needs(setting), **{setting.name: value})
    assert getattr(spec, setting.name) == value
    others = [f for f in FRAMEWORKS if f not in setting.frameworks]
    with pytest.raises(SpecError, match=f"{setting.flag} applies to --framework "
                                        f"{' or '.join(setting.frameworks)}, not {others[0]}"):
        RunSpec(framework=others[0], dtype="float32", **{setting.name: value})


@pytest.mark.parametrize("setting", SETTINGS, ids=lambda s: s.name)
def test_a_changed_setting_marks_the_folder_name_and_how_it_trained(setting):
    value = CHANGED[setting.name]
    pair = PairSpec.build(RunSpec(**_needs(setting), **{setting.name: value}))
    assert setting.mark.format(getattr(pair.candidate, setting.name)) in pair.name
    assert setting.flag.removeprefix("--") in pair.candidate.trained_by
    assert getattr(pair.reference, setting.name) == value  # the same framework: shared
    plain = PairSpec.build(RunSpec(**_needs(setting), **{setting.name: value}),
                           ref_framework="plain")
    assert getattr(plain.reference, setting.name) == setting.default


@pytest.mark.parametrize("setting", SETTINGS, ids=lambda s: s.name)
def test_every_setting_is_a_suite_key(setting):
    assert setting.name in KEYS
    assert (setting.name in BOOL_KEYS) == setting.switch
    suite = parse_suite({"pair": [{**_needs(setting), setting.name: CHANGED[setting.name]}]},
                        "s.toml")
    assert getattr(suite.entries[0].pair.candidate, setting.name) == CHANGED[setting.name]


def _compare_options() -> dict[str, typing.Any]:
    group = typer.main.get_command(app)
    ctx = group.context_class(group, info_name="lrcheck")
    command = group.get_command(ctx, "compare")
    return {p.name: p for p in command.params}


@pytest.mark.parametrize("setting", SETTINGS, ids=lambda s: s.name)
def test_every_setting_is_an_option_of_compare_with_its_flag_and_help(setting):
    option = _compare_options()[setting.name]
    assert setting.flag in (*option.opts, *option.secondary_opts)
    assert option.help == setting.help
    assert option.default == setting.default


def test_every_compare_option_is_a_flag_of_the_command_and_every_flag_one():
    import inspect

    params = set(inspect.signature(compare_command).parameters)
    candidate = {f.name for f in fields(RunSpec)} - {"world", "twin"}
    own = {"ref_world": "ref_nproc"}
    pair = {own.get(f.name, f.name) for f in fields(CompareOptions)
            if f.name not in ("candidate", "tolerances")}
    tolerances = {f"tol_{f.name}" for f in fields(ToleranceOverrides)}
    output = {"out", "json_out", "quiet"}
    assert params == candidate | pair | tolerances | output | {"nproc"}
