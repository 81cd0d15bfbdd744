"""The definitions result.json and suite.json share, each built from the code that writes it:
a spec's fields from its dataclass, the words from their enums and registries. Adding a key
beside the others is one line in the object that holds it (docs/contributing.md, "Schemas")."""

from __future__ import annotations

from lrcheck.checks.status import CheckResult
from lrcheck.environment import Environment
from lrcheck.experiments.tasks import TASKS
from lrcheck.plan.frameworks import FRAMEWORKS
from lrcheck.plan.policies import POLICIES
from lrcheck.plan.steps import ScheduleContext
from lrcheck.schemas.build import (
    BOOLEAN,
    INTEGER,
    MEASURED,
    NUMBER,
    STRING,
    Schema,
    array,
    closed,
    fields_of,
    nullable,
    ref,
    words,
)
from lrcheck.spec import Note, RunSpec, Tolerances
from lrcheck.spec.determinism import DETERMINISM
from lrcheck.spec.interrupt import SIGNALS
from lrcheck.trace import EpochMetrics, Metrics, RecordedCommand, Resumed, SkippedStep, UpdateRecord

EMPTY: Schema = {"type": "object", "maxProperties": 0}
# Where the writer has no value at all, it writes {} (a run with no ScheduleContext, a report
# that does not know where it ran).
OR_EMPTY = "or {} where there is none"


def run_spec() -> Schema:
    """``RunSpec.to_dict()``: every field, a choice as its word, the task, policy and framework
    among the registries' names."""
    return closed(fields_of(RunSpec, overrides={
        "task": words(TASKS), "policy": words(POLICIES), "framework": words(FRAMEWORKS)}),
        description="RunSpec: one training configuration (spec/run.py)")


# PairSpec.to_dict(); result.json's pair adds its name.
PAIR_KEYS: dict[str, Schema] = {"reference": ref("run_spec"), "candidate": ref("run_spec"),
                                "tolerances": ref("tolerances")}
FILE_PAIR_KEYS: dict[str, Schema] = {"reference": STRING, "candidate": STRING,
                                     "tolerances": ref("tolerances")}
COMMAND_PAIR_KEYS: dict[str, Schema] = {"kind": {"const": "commands"}, "ref_command": STRING,
                                        "command": STRING, "samples": nullable(INTEGER),
                                        "tolerances": ref("tolerances")}


def deterministic() -> Schema:
    """``--deterministic``'s entry (``spec.determinism.described``): every setting of
    ``DETERMINISM``, always, each the value in effect (true or false for most flags) or a
    string (an environment variable's value, ``not applicable: ...``, or a value that is not
    lrcheck's with lrcheck's beside it)."""
    return closed({s.name: {"type": ["boolean", "string"], "description": s.does}
                   for s in DETERMINISM},
                  description="each setting of --deterministic as in effect "
                              "(docs/checks.md, \"Deterministic runs\")")


def environment() -> Schema:
    """``Environment.to_dict()``: lrcheck's version and the device always, the other fields
    where known (never null), and each framework's version under its module's name."""
    known = fields_of(Environment, leave_out=["frameworks"], none_left_out=True)
    modules = {f.module: {**STRING, "description": f"the version of {f.module}"}
               for f in FRAMEWORKS.values() if f.module is not None}
    required = {name: known.pop(name) for name in ("lrcheck", "device")}
    known["deterministic"] = ref("deterministic")
    return closed(required, {**known, **modules},
                  description="where a comparison ran (environment.py)")


def run_trace() -> Schema:
    """``RunTrace.to_dict()``: what one run recorded."""
    return closed({
        "spec": {"anyOf": [ref("run_spec"), STRING],
                 "description": "the RunSpec, or the path of the file or record folder a run "
                                "lrcheck did not train was read from"},
        "updates": array(ref("update")),
        "metrics": nullable(ref("metrics")),
        "epochs": array(ref("epoch")),
        "planned_updates": INTEGER,
        "schedule_context": {"anyOf": [ref("schedule_context"), EMPTY],
                             "description": f"the ScheduleContext, {OR_EMPTY}"},
        "not_comparable": array(STRING),
        "stopped": nullable(STRING),
        "seconds": NUMBER,
    }, {
        "resumed": ref("resumed"),
        "skipped": array(ref("skipped_step")),
        "scheduler_steps": INTEGER,
        "warnings": array(STRING),
        "wall_seconds": NUMBER,
        "launch": STRING,
        "lockstep": INTEGER,
        "command": ref("recorded_command"),
        "updates_stored": closed({"total": INTEGER, "stored": INTEGER, "selection": STRING}),
        "lr_digest": {"type": "string", "pattern": "^sha256:[0-9a-f]{64}$"},
    }, description="RunTrace: what one run recorded (trace.py)")


def shared() -> dict[str, Schema]:
    """The definitions result.json and suite.json both use, by name."""
    return {
        "run_spec": run_spec(),
        "tolerances": closed(fields_of(Tolerances)),
        "note": closed({**fields_of(Note), "note": STRING},
                       description="a setting a run was given and trains with otherwise"),
        "check": closed(fields_of(CheckResult, overrides={
            "max_abs_diff": MEASURED, "max_rel_diff": MEASURED}),
            description="CheckResult (checks/status.py)"),
        "metrics": closed(fields_of(Metrics)),
        "environment": environment(),
        "deterministic": deterministic(),
        "command_pair": closed(COMMAND_PAIR_KEYS, {
            "deterministic": BOOLEAN, "tags": array(STRING), "log_steps": STRING,
            "fingerprint_every": INTEGER, "free": BOOLEAN, "strict": BOOLEAN,
            "timeout": nullable(NUMBER), "ref_logs": STRING, "logs": STRING,
            "interrupt": closed({"at": INTEGER, "resume": STRING, "signal": words(SIGNALS),
                                 "grace": NUMBER}, {"micro": INTEGER},
                                description="lrcheck run --interrupt-at's options "
                                            "(docs/resume.md)")},
                               description="a suite's pair of a user's own commands"),
    }


def trace_parts() -> dict[str, Schema]:
    """The definitions of a run's record (result.json's ``runs``)."""
    return {
        "run": run_trace(),
        "update": closed(fields_of(UpdateRecord, overrides={
            "lr": array(MEASURED), "loss": MEASURED})),
        "epoch": closed(fields_of(EpochMetrics)),
        "schedule_context": closed(fields_of(ScheduleContext)),
        "resumed": closed(fields_of(Resumed)),
        "skipped_step": closed(fields_of(SkippedStep)),
        "recorded_command": closed(fields_of(RecordedCommand)),
    }

