"""``lrcheck compare``'s options as one frozen record. The command line, ``lrcheck.compare`` (and
``lrcheck.testing.assert_equivalent``, which is it), ``lrcheck trace``'s pair and a suite's
``[[pair]]`` all build a ``CompareOptions`` (the keyword entry points through
``CompareOptions.of``), and the pair is made from it alone (``CompareOptions.pair``): an option
added here reaches each (tests/spec/test_compare_options.py holds each entry point to every
field)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields

from lrcheck.errors import SpecError
from lrcheck.plan.frameworks import FRAMEWORKS
from lrcheck.spec.choices import at_least, check_timeout, one_of
from lrcheck.spec.pair import PairSpec, reference_framework
from lrcheck.spec.run import DEFAULT_TIMEOUT_S, RunSpec
from lrcheck.spec.run_options import unknown_keywords
from lrcheck.spec.tolerances import ToleranceOverrides, Tolerances

# The candidate's fields a caller gives: RunSpec's, less ``twin``, which lrcheck sets on a
# reference of its own and a user never types.
CANDIDATE_FIELDS = tuple(f.name for f in fields(RunSpec) if f.name != "twin")


@dataclass(frozen=True)
class CompareOptions:
    """Everything ``lrcheck compare`` takes besides the report's folder and output: the
    candidate (its world already the one it runs as: ``comparison.check_processes``), the
    reference's batch, processes and framework (None: the candidate's), the tolerances (whole,
    or overrides of the defaults of the dtype the candidate trains in), ``fast`` (no noise
    floor) and ``timeout`` (seconds a run launched through torchrun may go without an update;
    None: no limit). Checked when built: a bad value is a ``SpecError`` naming its flag."""

    candidate: RunSpec = field(default_factory=RunSpec)
    ref_bs: int | None = None
    ref_world: int = 1
    ref_framework: str | None = None
    tolerances: Tolerances | ToleranceOverrides = field(default_factory=ToleranceOverrides)
    fast: bool = False
    timeout: float | None = DEFAULT_TIMEOUT_S

    def __post_init__(self) -> None:
        if not isinstance(self.candidate, RunSpec):
            raise SpecError(f"candidate must be a RunSpec, got {self.candidate!r}")
        if self.ref_bs is not None:
            at_least("--ref-bs", self.ref_bs, 1)
        at_least("--ref-nproc", self.ref_world, 1)
        if self.ref_framework is not None:
            one_of("--ref-framework", self.ref_framework, list(FRAMEWORKS))
        if not isinstance(self.tolerances, Tolerances | ToleranceOverrides):
            raise SpecError(f"tolerances must be a Tolerances or ToleranceOverrides, got "
                            f"{self.tolerances!r}")
        if not isinstance(self.fast, bool):
            raise SpecError(f"fast must be true or false, got {self.fast!r}")
        check_timeout(self.timeout)

    def pair(self) -> PairSpec:
        """The pair these describe (``PairSpec.build``)."""
        return PairSpec.build(self.candidate, ref_bs=self.ref_bs, ref_world=self.ref_world,
                              tolerances=self.tolerances, ref_framework=self.ref_framework,
                              noise_floor=not self.fast)

    @classmethod
    def of(cls, options: CompareOptions | None = None, /, *, caller: str,
           **keywords: object) -> CompareOptions:
        """``options`` (default: every default) with ``keywords`` over it: the candidate's
        ``RunSpec`` fields (``world`` None: as it was) and these fields, in the forms a Python
        caller writes them (``tolerances`` None for the defaults, or a mapping of overrides:
        ``{"lr": 1e-3}``). ``policy="accelerate"``, the spelling before ``framework``, compares
        against ``ref_framework="plain"`` unless one is given. A keyword that is neither is a
        ``SpecError`` naming ``lrcheck.caller``, the nearest accepted one and all of them."""
        if options is not None and not isinstance(options, CompareOptions):
            raise SpecError(f"lrcheck.{caller}: options must be a CompareOptions, got "
                            f"{type(options).__name__}; give the options as keywords")
        unknown = [key for key in keywords if key not in COMPARE_KEYWORDS]
        if unknown:
            raise unknown_keywords(
                caller, unknown, COMPARE_KEYWORDS,
                "it takes a PairSpec or CompareOptions, or the candidate's RunSpec fields: "
                f"{', '.join(CANDIDATE_FIELDS)}; and "
                f"{', '.join(PAIR_FIELDS)}")
        base = options if options is not None else cls()
        run = {key: value for key, value in keywords.items()
               if key in CANDIDATE_FIELDS and not (key == "world" and value is None)}
        own = {key: _typed(key, value) for key, value in keywords.items() if key in PAIR_FIELDS}
        if run.get("policy") == "accelerate" and own.get("ref_framework",
                                                        base.ref_framework) is None:
            own["ref_framework"] = reference_framework("accelerate", None)
        own["candidate"] = base.candidate.replace(**run) if run else base.candidate
        # Each value is checked by __post_init__ (and RunSpec's), whatever its type.
        build: Callable[..., CompareOptions] = cls
        return build(**{f.name: getattr(base, f.name) for f in fields(base)} | own)


PAIR_FIELDS = tuple(f.name for f in fields(CompareOptions) if f.name != "candidate")
COMPARE_KEYWORDS = (*CANDIDATE_FIELDS, *PAIR_FIELDS)


def _typed(key: str, value: object) -> object:
    """``value`` of the keyword ``key`` in the field's own type, where a caller may write it
    otherwise: the tolerances None (the defaults) or a mapping of overrides."""
    if key != "tolerances":
        return value
    if value is None:
        return ToleranceOverrides()
    if isinstance(value, Mapping):
        return ToleranceOverrides.of(value)
    return value
