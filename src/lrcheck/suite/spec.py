"""A suite file (TOML) → the pairs it asks for, validated, before anything is trained.

The file has an optional ``[defaults]`` table, ``[[pair]]`` entries and ``[[grid]]`` entries
whose list-valued keys expand to their cartesian product. Every key of ``lrcheck compare`` is
allowed (snake_case; ``nproc`` and ``ref_nproc`` are the two runs' process counts), plus ``name``
and ``expect = "pass" | "fail"``. ``ref_bs = "auto"`` (the default) means ``bs·accum·nproc``
(over ``ref_nproc``). A ``[[pair]]`` with ``ref_command`` and ``command`` (and, maybe,
``samples_per_update``) is a pair of a user's own commands, recorded and diffed as ``lrcheck
run`` does (``CommandPair``); it takes no run key. Each value is checked by the same
``RunSpec``/``PairSpec``/``Tolerances`` validation the command line uses; an error names the
file, the entry and the key.

Pure: reads the file, imports no torch.
"""

from __future__ import annotations

import difflib
import itertools
import re
import shlex
import sys
from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from pathlib import Path

from lrcheck.errors import SpecError
from lrcheck.plan.frameworks import FRAMEWORKS
from lrcheck.spec import (
    SETTINGS,
    CommandPair,
    CompareOptions,
    PairSpec,
    RunSpec,
    ToleranceOverrides,
    Tolerances,
)
from lrcheck.suite.commands import (
    COMMAND_KEYS,
    INTERRUPT_KEYS,
    OPTION_KEYS,
    STARTS_COMMANDS,
    check_option,
    command_pair,
)

if sys.version_info >= (3, 11):
    import tomllib
else:  # the same parser, before it joined the standard library
    import tomli as tomllib

EXPECTS = ("pass", "fail")
# Suite key → RunSpec field, where they differ.
RUN_KEYS = {f.name: f.name for f in fields(RunSpec) if f.name != "world"} | {"nproc": "world"}
TOLERANCE_KEYS = ("tol_lr", "tol_params", "tol_loss", "tol_metrics")
# Suite key → CompareOptions field (ref_bs = "auto": its default, None).
PAIR_KEYS = {"ref_bs": "ref_bs", "ref_nproc": "ref_world", "ref_framework": "ref_framework",
             "fast": "fast"}
META_KEYS = ("name", "expect")
# How a pair of commands' own logs are read (docs/logs.md): tags = {lr = "LearningRate"},
# log_steps = "updates-from-1"; its other keys (``lrcheck run``'s options): suite.commands.
LOG_KEYS = ("tags", "log_steps")
KEYS = (*RUN_KEYS, *PAIR_KEYS, *TOLERANCE_KEYS, *META_KEYS, *COMMAND_KEYS)
# Keys whose value is a list of update numbers (or one); in a [[grid]], a list of such lists
# expands.
UPDATE_LIST_KEYS = ("inject_overflow",)
# What a key's value needs from the other keys to be checked on its own. Whether the pair's
# other keys provide it is checked once they are merged, as the command line checks its flags
# together: amp = "fp16" may stand in [defaults] and dtype = "float32" in the [[pair]].
# float32: the type every framework trains in (deepspeed refuses float64); a framework's own
# setting (spec/settings.py) is checked with the first framework it applies to.
NEEDS = {"amp": {"dtype": "float32"}, "inject_overflow": {"dtype": "float32", "amp": "fp16"},
         "framework": {"dtype": "float32"},
         **{s.name: {"framework": s.frameworks[0], "dtype": "float32"} for s in SETTINGS}}
# Values that need more than their key does: bf16 is DeepSpeed's alone.
NEEDS_FOR_VALUE = {("amp", "bf16"): {"framework": "deepspeed"}}
# Keys whose value is true or false.
BOOL_KEYS = ("fast", "deterministic", "free", "strict",
             *(s.name for s in SETTINGS if s.switch))
TABLES = ("defaults", "pair", "grid")
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,119}")
# "--ref-bs" in a message from spec.py is "ref_bs" in a suite file.
_FLAG = re.compile(r"--([a-z][a-z-]*)")
_LEADING_FLAG = re.compile(r"^--[a-z][a-z-]* ")


@dataclass(frozen=True)
class SuiteEntry:
    """One pair of the suite: its unique ``name`` (also its report folder), the pair, what it is
    expected to give, and where in the file it came from (``[[grid]] #1``)."""

    name: str
    pair: PairSpec | CommandPair
    expect: str
    origin: str


@dataclass(frozen=True)
class Suite:
    path: str
    entries: tuple[SuiteEntry, ...]


def load_suite(path: str | Path) -> Suite:
    """Read and validate the suite file at ``path``."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError(f"suite file {str(path)!r} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(f"suite file {str(path)!r} cannot be read: {exc}") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"{path}: not valid TOML: {exc}") from None
    return parse_suite(data, str(path))


def deterministic_suite(suite: Suite) -> Suite:
    """``suite`` with ``--deterministic`` on in every pair (``lrcheck suite --deterministic``:
    as ``deterministic = true`` in each)."""
    def on(pair: PairSpec | CommandPair) -> PairSpec | CommandPair:
        if isinstance(pair, CommandPair):
            return replace(pair, options=replace(pair.options, deterministic=True))
        return replace(pair, reference=pair.reference.replace(deterministic=True),
                       candidate=pair.candidate.replace(deterministic=True))

    return replace(suite, entries=tuple(replace(e, pair=on(e.pair)) for e in suite.entries))


def parse_suite(data: dict[str, object], source: str) -> Suite:
    """The suite ``data`` (a parsed TOML document from ``source``) describes."""
    for table in data:
        if table not in TABLES:
            raise SpecError(f"{source}: unknown table {table!r}{_hint(table, TABLES)}; a suite "
                            "has [defaults], [[pair]] and [[grid]]")
    defaults = data.get("defaults", {})
    if not isinstance(defaults, dict):
        raise SpecError(f"{source}: 'defaults' must be a table: write [defaults]")
    _check_keys(source, "[defaults]", defaults, lists=False)
    for key in (k for k in COMMAND_KEYS if k in defaults):
        raise SpecError(f"{source}: [defaults], key {key!r}: a command belongs to one pair; "
                        "set it in [[pair]]")
    if "name" in defaults:
        raise SpecError(f"{source}: [defaults], key 'name': a name belongs to one pair; "
                        "set it in [[pair]] or [[grid]]")

    entries: list[SuiteEntry] = []
    for kind in (k for k in data if k in ("pair", "grid")):  # in the order the file has them
        items = data.get(kind, [])
        if not (isinstance(items, list) and all(isinstance(i, dict) for i in items)):
            raise SpecError(f"{source}: {kind!r} must be an array of tables: write [[{kind}]]")
        for number, item in enumerate(items, 1):
            origin = f"[[{kind}]] #{number}"
            _check_keys(source, origin, item, lists=kind == "grid")
            if any(k in item for k in (*STARTS_COMMANDS, *INTERRUPT_KEYS)):
                entries.append(_command_entry(source, origin, kind, defaults, item))
            elif own := [k for k in COMMAND_KEYS if k in item]:
                raise SpecError(f"{source}: {origin}, key {own[0]!r}: an option of lrcheck run, "
                                "for a pair of commands (ref_command, command)")
            else:
                entries += (_expand(source, origin, defaults, item) if kind == "grid"
                            else [_entry(source, origin, {**defaults, **item}, None)])
    if not entries:
        raise SpecError(f"{source}: the suite has no pairs; add a [[pair]] or a [[grid]]")
    _check_unique(source, entries)
    return Suite(source, tuple(entries))


def _expand(source: str, origin: str, defaults: dict[str, object],
            grid: dict[str, object]) -> list[SuiteEntry]:
    """One entry per combination of the grid's list-valued keys, first key slowest."""
    axes = {k: v for k, v in grid.items() if isinstance(v, list) and _is_axis(k, v)}
    entries = []
    for combo in itertools.product(*axes.values()):
        chosen = dict(zip(axes, combo, strict=True))
        where = f"{origin} ({', '.join(f'{k}={v!r}' for k, v in chosen.items())})"
        entries.append(_entry(source, where, {**defaults, **grid, **chosen},
                              str(grid["name"]) if "name" in grid else None))
    return entries


def _entry(source: str, where: str, values: dict[str, object], grid_name: str | None
           ) -> SuiteEntry:
    """The entry for the merged ``values`` (each already checked on its own) of one pair."""
    run = {RUN_KEYS[k]: _run_value(k, v) for k, v in values.items() if k in RUN_KEYS}
    tol = {k.removeprefix("tol_"): v for k, v in values.items() if k in TOLERANCE_KEYS}
    own = {PAIR_KEYS[k]: v for k, v in values.items()
           if k in PAIR_KEYS and not (k == "ref_bs" and v == "auto")}
    try:
        pair = CompareOptions.of(caller="suite", **run, **own,
                                 tolerances=ToleranceOverrides.of(tol)).pair()
    except SpecError as exc:
        raise SpecError(f"{source}: {where}: {_in_suite_words(str(exc))}") from None
    name = _name(source, where, values, grid_name, pair)
    return SuiteEntry(name, pair, str(values.get("expect", "pass")), where)


def _command_entry(source: str, where: str, kind: str, defaults: dict[str, object],
                   item: dict[str, object]) -> SuiteEntry:
    """The entry of a [[pair]] of two commands. The run keys of [defaults] do not apply to it
    (lrcheck does not train it), but for ``deterministic``; its tolerances, ``expect`` and the
    defaults' tolerances do."""
    if kind != "pair":
        key = next(k for k in COMMAND_KEYS if k in item)
        raise SpecError(f"{source}: {where}, key {key!r}: commands belong in a [[pair]], "
                        "not a [[grid]]")
    for key in ("ref_command", "command"):
        if key not in item:
            raise SpecError(f"{source}: {where}: a pair of commands needs both 'ref_command' "
                            f"and 'command'; {key!r} is missing")
    for key in item:
        if (key in RUN_KEYS or key in PAIR_KEYS) and key not in OPTION_KEYS:
            raise SpecError(f"{source}: {where}, key {key!r}: a pair of commands runs the "
                            "commands as they are; it takes no run key (only name, expect, "
                            f"tol_* and lrcheck run's options: {', '.join(OPTION_KEYS)})")
    values = {**defaults, **item}
    tol = {k.removeprefix("tol_"): v for k, v in values.items() if k in TOLERANCE_KEYS}
    try:
        pair = command_pair({**item, "deterministic": values.get("deterministic", False)}, tol)
    except SpecError as exc:
        raise SpecError(f"{source}: {where}: {_in_suite_words(str(exc))}") from None
    name = str(item.get("name", "commands"))
    if not NAME.fullmatch(name):
        raise SpecError(f"{source}: {where}, key 'name': {name!r} cannot name a report folder; "
                        "use letters, digits, '.', '_' and '-' (at most 120)")
    return SuiteEntry(name, pair, str(values.get("expect", "pass")), where)


def _name(source: str, where: str, values: dict[str, object], grid_name: str | None,
          pair: PairSpec) -> str:
    """A grid's ``name`` is a template (``"sched-{scheduler}-a{accum}"``) or a prefix to the
    pair's own name; without one, the pair's own name."""
    name: str
    if grid_name is None:
        name = str(values.get("name", pair.name))
    elif "{" in grid_name:
        fill = {**values, **{k: getattr(pair.candidate, field) for k, field in RUN_KEYS.items()},
                "ref_bs": pair.reference.bs, "ref_nproc": pair.reference.world}
        try:
            name = grid_name.format_map(fill)
        except (KeyError, IndexError, ValueError) as exc:
            raise SpecError(f"{source}: {where}, key 'name': the template {grid_name!r} "
                            f"cannot be filled ({type(exc).__name__}: {exc}); use "
                            f"{{key}} with keys of the entry") from None
    else:
        name = f"{grid_name}-{pair.name}"
    if not NAME.fullmatch(name):
        raise SpecError(f"{source}: {where}, key 'name': {name!r} cannot name a report folder; "
                        "use letters, digits, '.', '_' and '-' (at most 120)")
    return name


def _check_keys(source: str, where: str, table: dict[str, object], *, lists: bool) -> None:
    for key, value in table.items():
        if key not in KEYS:
            raise SpecError(f"{source}: {where}: unknown key {key!r}{_hint(key, KEYS)}; "
                            f"known keys: {', '.join(KEYS)}")
        if isinstance(value, list) and _is_axis(key, value):
            if not lists:
                raise SpecError(f"{source}: {where}, key {key!r}: lists expand only in "
                                f"[[grid]], got {value!r}")
            if not value:
                raise SpecError(f"{source}: {where}, key {key!r}: an empty list gives no pairs")
            if key in META_KEYS:
                raise SpecError(f"{source}: {where}, key {key!r}: cannot be a list; "
                                f"a grid's name is a template such as 'sweep-{{accum}}'")
            for item in value:
                _check_value(source, where, key, item)
        else:
            _check_value(source, where, key, value)


def _check_value(source: str, where: str, key: str, value: object) -> None:
    """``value`` for ``key`` on its own, with the checks the command line applies to its flag."""
    def bad(message: str) -> SpecError:
        return SpecError(f"{source}: {where}, key {key!r}: {message}")

    if key in LOG_KEYS:
        return _check_logs(key, value, bad)
    if key in UPDATE_LIST_KEYS:
        items = value if isinstance(value, list) else [value]
        if not all(isinstance(k, int) and not isinstance(k, bool) for k in items):
            raise bad(f"expected update numbers, such as [3, 7] or 3, got {value!r}")
    elif key in BOOL_KEYS:
        if not isinstance(value, bool):
            raise bad(f"expected true or false, got {value!r}")
    elif isinstance(value, (bool, dict, list)):
        raise bad(f"expected a number or a string, got {value!r}")
    if key in ("ref_command", "command"):
        if not (isinstance(value, str) and value.strip()):
            raise bad(f"expected a command line, such as 'python train.py --bs 32', "
                      f"got {value!r}")
        try:
            shlex.split(value)
        except ValueError as exc:
            raise bad(f"{value!r} does not split as a shell would: {exc}") from None
    elif key == "samples_per_update":
        if not (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
            raise bad(f"must be a whole number >= 1 (samples per update), got {value!r}")
    elif key == "expect":
        if value not in EXPECTS:
            raise bad(f"{value!r} is not known; choose one of: {', '.join(EXPECTS)}")
    elif key == "name":
        if not isinstance(value, str):
            raise bad(f"expected a string, got {value!r}")
    elif key == "ref_bs":
        if value != "auto" and not (isinstance(value, int) and value >= 1):
            raise bad(f"must be a whole number >= 1 or \"auto\" (bs·accum·nproc), got {value!r}")
    elif key == "ref_framework":
        if value not in FRAMEWORKS:
            raise bad(f"{value!r} is not known; choose one of: {', '.join(FRAMEWORKS)}")
    elif key == "ref_nproc":
        if not (isinstance(value, int) and value >= 1):
            raise bad(f"must be a whole number >= 1, got {value!r}")
    elif key == "fast":
        pass  # a boolean, checked above
    elif key in OPTION_KEYS and key != "deterministic":
        try:
            check_option(key, value)
        except SpecError as exc:
            raise bad(_in_suite_words(_LEADING_FLAG.sub("", str(exc)))) from None
    else:
        try:  # a value of any type, checked by Tolerances and RunSpec as a flag's is
            if key in TOLERANCE_KEYS:
                tolerances: Callable[..., Tolerances] = Tolerances.for_dtype
                tolerances("float64", **{key.removeprefix("tol_"): value})
            else:
                for_value = NEEDS_FOR_VALUE.get((key, value), {}) if isinstance(value, str) else {}
                run: Callable[..., RunSpec] = RunSpec
                run(**{**NEEDS.get(key, {}), **for_value, RUN_KEYS[key]: _run_value(key, value)})
        except (SpecError, TypeError) as exc:
            raise bad(_in_suite_words(_LEADING_FLAG.sub("", str(exc)))) from None


def _check_logs(key: str, value: object, bad: Callable[[str], SpecError]) -> None:
    """``tags`` (a table of quantity = tag) or ``log_steps`` (a convention), as ``--tag`` and
    ``--log-steps`` check them."""
    from lrcheck.logs.read import reading

    if key == "tags" and not (isinstance(value, dict)
                              and all(isinstance(t, str) for t in value.values())):
        raise bad(f"expected a table of quantity = tag, such as {{lr = \"LearningRate\"}}, "
                  f"got {value!r}")
    if key == "log_steps" and not isinstance(value, str):
        raise bad(f"expected a convention such as \"updates-from-1\", got {value!r}")
    tags = value if key == "tags" and isinstance(value, dict) else None
    steps = value if key == "log_steps" and isinstance(value, str) else None
    try:
        reading(tags, steps)
    except SpecError as exc:
        raise bad(str(exc)) from None


def _is_axis(key: str, value: object) -> bool:
    """Whether ``value`` of ``key`` is a list of values (that a [[grid]] expands) rather than
    one value."""
    if key in UPDATE_LIST_KEYS:
        return isinstance(value, list) and any(isinstance(v, list) for v in value)
    return isinstance(value, list)


def _run_value(key: str, value: object) -> object:
    """The ``RunSpec`` field's value for the suite's ``value`` (``inject_overflow = 3`` is
    ``(3,)``)."""
    if key in UPDATE_LIST_KEYS:
        return tuple(value) if isinstance(value, list) else (value,)
    return value


def _check_unique(source: str, entries: list[SuiteEntry]) -> None:
    seen: dict[str, SuiteEntry] = {}
    for entry in entries:
        if entry.name in seen:
            raise SpecError(f"{source}: two pairs are named {entry.name!r} "
                            f"({seen[entry.name].origin} and {entry.origin}); give one a "
                            "different 'name'")
        seen[entry.name] = entry


def _in_suite_words(message: str) -> str:
    """``--ref-bs`` → ``ref_bs``, ``--world`` → ``nproc``: the message in the file's words."""
    def key(match: re.Match[str]) -> str:
        flag = match[1].replace("-", "_")
        return "nproc" if flag == "world" else flag

    return _FLAG.sub(key, message)


def _hint(word: str, choices: tuple[str, ...]) -> str:
    close = difflib.get_close_matches(word.replace("-", "_"), choices, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""
