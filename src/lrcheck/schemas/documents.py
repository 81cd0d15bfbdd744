"""The three documents: ``result.json`` (a report), ``suite.json`` (a suite) and ``run.json``
(a record folder's description), each as the code writes it. A key that only some files have is
in the ``optional`` half of its object; a key added beside the others is one line there."""

from __future__ import annotations

from lrcheck.plan.judging import Judging
from lrcheck.result import Kind, Verdict
from lrcheck.schemas import parts
from lrcheck.schemas.build import (
    BOOLEAN,
    INTEGER,
    MEASURED,
    NUMBER,
    STRING,
    Schema,
    array,
    closed,
    const,
    document,
    fields_of,
    mapping,
    nullable,
    ref,
    words,
)
from lrcheck.suite.outcome import PairStatus, Regression

SCHEMA_VERSION = const(1)
EXPECT = words([Verdict.PASS.value, Verdict.FAIL.value])


def result() -> Schema:
    """``result.json``: ``Report.to_dict()`` or ``IncompleteResult.to_dict()``, with the files
    the report wrote (``reports.files.result_json``)."""
    body = closed({
        "schema_version": SCHEMA_VERSION,
        "verdict": words(Verdict, "fail if any check failed, else pass; incomplete: what an "
                                  "interrupted comparison had recorded"),
        "mode": words(Kind, "what the report compares: two trained runs, two schedules, or "
                            "two records"),
        "pair": {"anyOf": [ref("pair"), ref("file_pair")]},
        "checks": array(ref("check")),
        "runs": closed({"reference": ref("run"), "candidate": ref("run")}),
        "environment": {"anyOf": [ref("environment"), parts.EMPTY],
                        "description": f"where it ran, {parts.OR_EMPTY} (interrupted before "
                                       "it was known)"},
        "files": array(STRING, description="the files the report wrote in its folder"),
    }, {
        "judging": words(Judging, "how the effects were judged, for a pair lrcheck trained"),
        "notes": array(ref("note")),
        "incomplete": {**STRING, "description": "why the comparison was interrupted"},
        "logs": array(ref("log_finding"), description="each run's own log held against its "
                      "record (logs.truth), where one was read; never read by the verdict"),
    })
    body["allOf"] = [
        {"if": {"properties": {"verdict": const(Verdict.INCOMPLETE.value)}},
         "then": {"required": ["incomplete"], "properties": {"checks": {"maxItems": 0}}},
         "else": {"not": {"required": ["incomplete"]}}},
        {"if": {"properties": {"mode": const(Kind.DIFF.value)}},
         "then": {"properties": {"pair": ref("file_pair"), "notes": False, "judging": False}},
         "else": {"required": ["notes"], "properties": {"pair": ref("pair")}}},
    ]
    defs = {**parts.shared(), **parts.trace_parts(),
            "pair": closed({"name": STRING, **parts.PAIR_KEYS},
                           description="the pair lrcheck trained (PairSpec) and its name"),
            "file_pair": closed({"name": STRING, **parts.FILE_PAIR_KEYS},
                                description="the two records a diff compared, by path"),
            "log_finding": log_finding()}
    return document("lrcheck result.json", "A comparison's report: result.Report.to_dict(), "
                    "schema_version 1 (docs/design.md, \"result.json (schema_version 1)\").",
                    body, defs)


def log_finding() -> Schema:
    """One finding of a run's log against its record: ``logs.truth.LogFinding.to_dict()``
    (result.json's ``logs``, a record folder's logs.json)."""
    from lrcheck.logs.model import Quantity
    from lrcheck.logs.truth import Agreement

    return closed({"side": STRING, "quantity": nullable(words(Quantity)),
                   "status": words(Agreement),
                   "says": STRING, "first_update": nullable(INTEGER), "path": STRING},
                  description="LogFinding: what one quantity of a run's log holds against "
                              "its record (docs/logs.md)")


def _suite_pair() -> Schema:
    """One pair of ``suite.json``: ``PairOutcome.to_dict()``."""
    return closed({
        "name": STRING, "origin": STRING, "expect": EXPECT,
        "verdict": words(dict.fromkeys([*(v.value for v in Verdict),
                                        *(s.value for s in PairStatus)])),
        "status": words(PairStatus), "met": BOOLEAN, "reason": STRING,
        "folder": nullable(STRING), "checks": array(ref("check")),
        "deltas": closed({"max_abs_dlr": MEASURED, "accuracy": nullable(NUMBER),
                          "f1_macro": nullable(NUMBER)}),
        "metrics": nullable(ref("metrics")),
        "baseline": words(["compared", "new", "none"]),
        "regressions": array(closed(fields_of(Regression))),
        "error": nullable(STRING), "shared_reference": BOOLEAN, "seconds": NUMBER,
        "pair": ref("suite_pair_spec"),
    }, description="PairOutcome: one pair of the suite after it ran (suite/outcome.py)")


def _shard() -> Schema:
    """``suite.json``'s ``shard``: ``ShardInfo.to_dict()`` and each pair's exit code."""
    plan = closed({"name": STRING, "shard": INTEGER, "origin": STRING, "expect": EXPECT,
                   "noise_floor": BOOLEAN, "pair": ref("suite_pair_spec"),
                   "notes": array(ref("note"))})
    return closed({"index": INTEGER, "count": INTEGER, "suite_digest": STRING,
                   "plan": array(plan), "exit_codes": mapping(INTEGER, "by pair name")})


def suite() -> Schema:
    """``suite.json``: ``SuiteResult.to_dict()``."""
    body = closed({
        "schema_version": SCHEMA_VERSION,
        "kind": const("lrcheck-suite"),
        "suite": {**STRING, "description": "the suite file's path"},
        "verdict": words(Verdict),
        "exit_code": INTEGER,
        "interrupted": nullable(STRING),
        "counts": closed({"pairs": INTEGER, **{s.value: INTEGER for s in PairStatus}}),
        "baseline": nullable(STRING),
        "baseline_missing": array(STRING),
        "pairs": array(ref("suite_pair")),
        "environment": {"anyOf": [ref("environment"), parts.EMPTY]},
        "seconds": NUMBER,
    }, {
        "shard": _shard(),
        "merge": closed({"shards": mapping(STRING, "each shard's folder, by k/n"),
                         "missing": array(STRING)}),
    })
    defs: dict[str, Schema] = {**parts.shared(), "suite_pair": _suite_pair(),
            "suite_pair_spec": {"anyOf": [closed(parts.PAIR_KEYS), ref("command_pair")]}}
    return document("lrcheck suite.json", "A suite's outcome: suite.outcome.SuiteResult."
                    "to_dict(), schema_version 1 (docs/suite.md).", body, defs)


def _layout() -> Schema:
    """Where an optimizer's DTensors lie on their device meshes (``record.placements``)."""
    mesh = closed({"shape": array(INTEGER), "names": array(STRING),
                   "coord": nullable(array(INTEGER))})
    tensor = nullable(array({"type": ["integer", "string"]},
                            description="a tensor's mesh (its index) and its placement on each "
                                        "of the mesh's dimensions, S, R or P; null: not a "
                                        "DTensor"))
    return closed({"feeds": BOOLEAN}, {"meshes": array(mesh), "tensors": array(tensor),
                                       "data_world": INTEGER, "stage": array(INTEGER),
                                       "names": array(STRING), "paths": STRING},
                  description="per mesh its shape, its dimensions' names and this rank's "
                              "coordinate; per tensor its placements; the data-parallel ranks "
                              "(data_world); the pipeline stage this rank's optimizer steps "
                              "(stage: its index and the number of stages; names: the "
                              "parameters' names in its module, else in the model's, in a run "
                              "of several processes; paths: model where those are the whole "
                              "model's paths) and whether this rank feeds "
                              "rows of its own (feeds: not a tensor-parallel rank other than "
                              "the first, nor a pipeline stage other than 0)")


def _process() -> Schema:
    """A recorded process's own description (``rankR.json``, ``record.process``)."""
    optimizer = closed({
        "index": INTEGER, "file": STRING, "class": STRING, "wrapper": nullable(STRING),
        "tensors": INTEGER, "sharded": BOOLEAN, "partitioned": BOOLEAN, "updates": INTEGER,
        "phantom_steps": INTEGER, "dtype": STRING,
        "stochastic": array(closed({"module": STRING, "kind": STRING, "p": NUMBER})),
    }, {"layout": _layout()})
    standing = closed({"opt_step": nullable(NUMBER), "sched_epoch": nullable(INTEGER),
                       "fingerprint": array(NUMBER)}, {
        "scale": nullable(NUMBER),
        "cut": closed({"update": INTEGER, "backward": INTEGER, "fed": array(array(INTEGER))},
                      description="end: the window lrcheck run --interrupt-at cut "
                                  "(record.interrupt): its update, the backward passes made "
                                  "into it, the samples fed (row hashes)"),
        "carried_gradients": {**INTEGER, "description": "start, of a resumed process: the "
                                                        "tensors with a gradient before its "
                                                        "first backward pass"},
        "resumed": {"type": "boolean", "description": "start, of a process of the command "
                                                      "lrcheck run --resume started"}},
                      description="where the first optimizer's training stood before the "
                                  "process's first update (start) or at its end "
                                  "(record.stages)")
    return closed({"pid": INTEGER, "rank": INTEGER, "world": INTEGER, "argv": array(STRING),
                   "torch": STRING, "optimizers": array(optimizer), "dropout_calls": INTEGER,
                   "lockstep": nullable(STRING)},
                  {"deterministic": nullable(ref("deterministic")),
                   "logs": array(closed({"framework": STRING, "folder": STRING}),
                                 description="the folders a Trainer of the process logs into "
                                             "(record.modules.log_folders)"),
                   "recording_off": nullable(closed(
                       {"reason": STRING, "after": INTEGER},
                       description="why the process's recording was switched off by its guard "
                                   "(record.guard: an error in a hook; the training went on) "
                                   "and after how many updates of its first optimizer")),
                   "started": {**NUMBER, "description": "when the process started (Unix time): "
                                                        "a rank's processes join in this order"},
                   "start": nullable(standing), "end": nullable(standing)})


def run() -> Schema:
    """``run.json``: ``record.launch.finish_folder``'s description of a record folder."""
    unreadable = closed({"file": STRING, "unreadable": const(True)},
                        description="a process's description that could not be read")
    body = closed({
        "kind": const("lrcheck-record"),
        "schema_version": SCHEMA_VERSION,
        "command": array(STRING),
        "exit_code": {**INTEGER, "description": "negative: ended by that signal"},
        "ended": STRING,
        "interrupted": BOOLEAN,
        "seconds": NUMBER,
        "samples_per_update": nullable(INTEGER),
        "fingerprint_every": INTEGER,
        "world_size": INTEGER,
        "updates": mapping(INTEGER, "the updates of each Recorder file, by its name"),
        "torch_processes": INTEGER,
        "processes": array({"anyOf": [ref("process"), unreadable]}),
        "versions": closed({"python": STRING, "lrcheck": STRING, "torch": nullable(STRING)}),
    }, {"deterministic": {**BOOLEAN, "description": "whether --deterministic was on"}})
    return document("lrcheck run.json", "A record folder's description: what `lrcheck record` "
                    "ran and what its processes left, schema_version 1 (docs/own-training.md).",
                    body, {"process": _process(), "deterministic": parts.deterministic()})


DOCUMENTS = {"result": result, "suite": suite, "run": run}
