"""``CompareOptions``: ``lrcheck compare``'s options, one record that its entry points build.
Every field (each of the candidate's ``RunSpec`` fields too), given a value other than its
default, reaches ``CompareOptions.pair`` through the command line, ``lrcheck.compare``,
``lrcheck.testing.assert_equivalent`` and a suite's ``[[pair]]`` (nothing is trained: the pair
is replaced by a ``SpecError`` that keeps the options it was asked of)."""

import pytest

from lrcheck.errors import SpecError
from lrcheck.spec import CompareOptions, RunSpec, ToleranceOverrides, Tolerances
from lrcheck.spec.compare_options import CANDIDATE_FIELDS, PAIR_FIELDS
from tests.cli.helpers import invoke

# The fields in a few cases, each a candidate RunSpec accepts (a framework's own settings need
# that framework), with every field other than its default in one of them. The tolerances are
# given as a Python caller writes them (a mapping of overrides).
CASES = [
    {"framework": "transformers", "drop_last": True, "trainer_loss": "num-items",
     "even_batches": False, "dtype": "float32", "task": "tokens", "bs": 4, "accum": 4,
     "world": 2, "epochs": 2},
    {"framework": "deepspeed", "zero_stage": 2, "scheduler_stepped_too": True,
     "dtype": "float32", "scheduler": "linear", "warmup": 0.2, "lr": 0.1, "optimizer": "adamw",
     "seed": 3, "device": "cpu", "deterministic": True},
    {"framework": "lightning", "lightning_sampler": "own", "dtype": "float32"},
    {"task": "synthetic", "samples": 400, "policy": "per-micro-batch", "tail": "carry",
     "loss_norm": "mean", "dtype": "float32", "amp": "fp16", "inject_overflow": (3,),
     "resume_at_micro": 3, "ref_bs": 16, "ref_world": 2, "ref_framework": "plain",
     "tolerances": {"lr": 1e-3, "params": 1e-2, "loss": 2e-2, "metrics": 0.05},
     "fast": True, "timeout": 60.0},
    {"resume_at": 2},
]
PAIR = ("ref_bs", "ref_world", "ref_framework", "tolerances", "fast", "timeout")


def expected(case):
    """The options ``case`` describes."""
    run = {key: value for key, value in case.items() if key in CANDIDATE_FIELDS}
    own = {key: value for key, value in case.items() if key in PAIR_FIELDS}
    if "tolerances" in own:
        own["tolerances"] = ToleranceOverrides(**own["tolerances"])
    return CompareOptions(RunSpec(**run), **own)


def test_every_field_has_a_value_here_other_than_its_default():
    assert PAIR_FIELDS == PAIR
    given = {key for case in CASES for key in case}
    assert given == {*CANDIDATE_FIELDS, *PAIR_FIELDS}
    default = CompareOptions()
    for case in CASES:
        options = expected(case)
        assert [key for key in case if key in CANDIDATE_FIELDS and getattr(
            options.candidate, key) == getattr(default.candidate, key)] == []
        assert [key for key in case if key in PAIR_FIELDS
                and getattr(options, key) == getattr(default, key)] == []


@pytest.fixture
def received(monkeypatch):
    """The options ``CompareOptions.pair`` is asked of, one per call; it trains nothing and
    stops there with a ``SpecError``."""
    got: list[CompareOptions] = []

    def pair(options):
        got.append(options)
        raise SpecError("stopped here")

    monkeypatch.setattr(CompareOptions, "pair", pair)
    return got


def flags(case):
    """``case`` as ``lrcheck compare``'s flags."""
    names = {"world": "nproc", "ref_world": "ref_nproc"}
    words = []
    for key, value in case.items():
        flag = "--" + names.get(key, key).replace("_", "-")
        if key == "tolerances":
            words += [w for name, tol in value.items() for w in (f"--tol-{name}", str(tol))]
        elif key == "even_batches":
            words.append("--no-even-batches")
        elif isinstance(value, bool):
            words.append(flag)
        elif key == "inject_overflow":
            words += [flag, ",".join(map(str, value))]
        else:
            words += [flag, str(value)]
    return words


def toml_value(value):
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, tuple):
        return f"[{', '.join(map(str, value))}]"
    return str(value)


def suite_lines(case):
    """``case`` as a suite's ``[[pair]]`` keys; a suite has no per-pair ``timeout``."""
    names = {"world": "nproc", "ref_world": "ref_nproc"}
    lines = []
    for key, value in case.items():
        if key == "tolerances":
            lines += [f"tol_{name} = {tol}" for name, tol in value.items()]
        elif key != "timeout":
            lines.append(f"{names.get(key, key)} = {toml_value(value)}")
    return "\n".join(lines)


@pytest.mark.parametrize("case", CASES)
def test_the_command_line_gives_every_option(received, case):
    result = invoke("compare", "--quiet", *flags(case))
    assert result.exit_code == 2, result.output
    assert received == [expected(case)]


@pytest.mark.parametrize("case", CASES)
def test_the_api_and_assert_equivalent_take_every_option(received, case):
    import lrcheck
    from lrcheck.testing import assert_equivalent

    for call in (lrcheck.compare, assert_equivalent):
        with pytest.raises(SpecError, match="stopped here"):
            call(**case)
        with pytest.raises(SpecError, match="stopped here"):
            call(expected(case))
    assert received == [expected(case)] * 4


@pytest.mark.parametrize("case", CASES)
def test_a_suite_pair_takes_every_option_but_the_timeout(received, tmp_path, case):
    from lrcheck.suite.spec import load_suite

    path = tmp_path / "ci.toml"
    path.write_text(f"[[pair]]\n{suite_lines(case)}\n")
    with pytest.raises(SpecError, match="stopped here"):
        load_suite(path)
    given = {key: value for key, value in case.items() if key != "timeout"}
    assert received == [expected(given)]


def test_tolerance_overrides_are_typed_checked_and_over_the_dtype_s_defaults():
    overrides = ToleranceOverrides.of({"lr": 1e-3})
    assert overrides == ToleranceOverrides(lr=1e-3)
    assert overrides.over("float32") == Tolerances.for_dtype("float32", lr=1e-3)
    with pytest.raises(SpecError, match="tolerances: unknown check 'lrs'; the checks with a "
                                        "tolerance are lr, params, loss, metrics"):
        ToleranceOverrides.of({"lrs": 1e-3})
    with pytest.raises(SpecError, match="--tol-loss must be a number >= 0, got -1"):
        ToleranceOverrides(loss=-1)
    assert CompareOptions.of(caller="c", tolerances={"loss": 0.5}).pair().tolerances == (
        Tolerances.for_dtype("float64", loss=0.5))


@pytest.mark.parametrize(("keywords", "message"), [
    ({"ref_bs": 0}, "--ref-bs must be a whole number >= 1, got 0"),
    ({"ref_world": 0}, "--ref-nproc must be a whole number >= 1, got 0"),
    ({"ref_framework": "nope"}, "--ref-framework 'nope' is not known"),
    ({"fast": "yes"}, "fast must be true or false, got 'yes'"),
    ({"timeout": 0}, "--timeout must be a number of seconds > 0, got 0"),
    ({"tolerances": 1e-3}, "tolerances must be a Tolerances or ToleranceOverrides, got 0.001"),
    ({"acum": 2}, r"lrcheck.caller: unknown keyword 'acum' \(did you mean 'accum'\?\)"),
])
def test_a_bad_value_is_a_spec_error_naming_it(keywords, message):
    with pytest.raises(SpecError, match=message):
        CompareOptions.of(caller="caller", **keywords)


def test_options_that_are_not_compare_options_are_a_spec_error():
    with pytest.raises(SpecError, match="lrcheck.caller: options must be a CompareOptions, got "
                                        "dict"):
        CompareOptions.of({"bs": 8}, caller="caller")  # type: ignore[arg-type]


def test_the_old_policy_accelerate_compares_against_plain_unless_told():
    with pytest.warns(FutureWarning):
        assert CompareOptions.of(caller="c", policy="accelerate").ref_framework == "plain"
    with pytest.warns(FutureWarning):
        assert CompareOptions.of(caller="c", policy="accelerate",
                                 ref_framework="accelerate").ref_framework == "accelerate"

