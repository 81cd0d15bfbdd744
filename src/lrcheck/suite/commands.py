"""A suite's ``[[pair]]`` of a user's own commands (``ref_command``, ``command``): it takes every
option of ``lrcheck run`` (``RunOptions``' fields) as a key of the same name, but
``samples_per_update`` (a run key's ``samples`` is an epoch's) and the tolerances (``tol_*``, as
any pair's). Each value is checked by ``RunOptions`` itself, as the command line's flags are."""

from __future__ import annotations

from collections.abc import Mapping

from lrcheck.errors import SpecError
from lrcheck.spec import DIFF_DTYPE, CommandPair, Tolerances
from lrcheck.spec.run_options import OPTION_NAMES, RunOptions

# Suite key → RunOptions field.
OPTION_KEYS = {("samples_per_update" if name == "samples" else name): name
               for name in OPTION_NAMES if name != "tolerances"}
# The keys of a pair of commands that no other pair has.
COMMAND_KEYS = ("ref_command", "command", *(k for k in OPTION_KEYS if k != "deterministic"))
# The keys that make a [[pair]] one of commands (with the interrupt's): one without both
# commands is refused as such.
STARTS_COMMANDS = ("ref_command", "command", "samples_per_update")
# The interrupt's keys, checked together with the pair's (``spec.interrupt.Interrupt``).
INTERRUPT_KEYS = ("interrupt_at", "interrupt_after_micro", "resume", "interrupt_signal",
                  "grace")


def check_option(key: str, value: object) -> None:
    """``value`` of the option ``key`` on its own, as ``RunOptions`` checks it; a
    ``SpecError`` in the flag's words."""
    if key not in INTERRUPT_KEYS:
        RunOptions.of(caller="suite", **{OPTION_KEYS[key]: value})


def command_pair(item: Mapping[str, object], tolerances: Mapping[str, object]) -> CommandPair:
    """The pair of commands of the [[pair]] ``item`` (its keys checked one by one), with
    ``tolerances`` (``tol_*`` without the prefix, from the pair and [defaults]) over
    ``lrcheck run``'s; ``deterministic`` is the pair's or [defaults]' (in ``item``)."""
    keywords = {field: item[key] for key, field in OPTION_KEYS.items() if key in item}
    tol = {name: value for name, value in tolerances.items()
           if value is None or isinstance(value, float | int)}
    options = RunOptions.of(
        caller="suite", tolerances=Tolerances.for_dtype(DIFF_DTYPE, "off", **tol), **keywords)
    reference, candidate = item["ref_command"], item["command"]
    if not (isinstance(reference, str) and isinstance(candidate, str)):
        raise SpecError(f"ref_command and command must be command lines, got {reference!r} "
                        f"and {candidate!r}")
    return CommandPair(reference, candidate, options)
