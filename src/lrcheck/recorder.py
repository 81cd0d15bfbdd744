"""Record your own training's schedule, whatever framework runs it, for ``lrcheck diff``.

Importable without torch: ``Recorder`` only reads ``optimizer.param_groups`` and calls
``float()`` on the loss.

    rec = lrcheck.Recorder("cand.jsonl")
    ...
    rec.record(optimizer, loss=loss, samples=bs * accum * world)   # just before optimizer.step()
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import operator
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any, SupportsFloat

from lrcheck.errors import SpecError
from lrcheck.hparams import read_settings

REQUIRED = ("step", "samples_seen", "lr")
# What ``lrcheck record`` adds to a line: the scheduler.step() calls and the GradScaler-skipped
# steps since the previous update, and (with a fingerprint) the squared gradient norm (per
# tensor too, ``grad_sqs``, for DTensors: ``record.placements``); the cadence (``record.process.
# count_calls``): the calls since the previous update of backward, zero_grad, the clipping,
# GradScaler.update and the EMA, the backward passes since the last zero_grad (``reached``), and
# the numbers: the last clip's max_norm / clip_value, its pre-clip norm, the optimizer state's
# step counter; ``loss_backward``, ``loss_micro`` (``record.losses``); ``rng*`` (``record.stages``).
COUNTS = ("scheduler_steps", "skipped", "backward", "reached", "zero_grad", "clip_grad_norm",
          "clip_grad_value", "scaler_update", "ema_update")
NUMBERS = ("max_norm", "clip_value", "clip_norm", "opt_step")

# JSON has no NaN or infinity (Python's json writes them as bare NaN and Infinity, which other
# readers refuse): a Recorder file holds them as these strings, and read_records reads them back.
NOT_FINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


class Recorder:
    """Writes one JSON line per optimizer update: ``step``, ``samples_seen`` (samples behind all
    updates so far, this one included, over all processes), ``lr`` (one value per param group,
    as the optimizer is about to use it) and ``loss`` (a loss that is not finite as the string
    "NaN", "Infinity" or "-Infinity", which ``read_records`` reads back as the float, so that
    the file stays JSON). Each line is flushed as it is written, so a crash loses nothing
    recorded. The file is started afresh unless ``append`` (for a resumed run). With
    ``enabled=False`` (other ranks than 0, say) it records nothing."""

    def __init__(self, path: str | Path, *, append: bool = False, enabled: bool = True) -> None:
        self.path = Path(path)
        self.enabled = enabled
        self.step = 0
        self.samples_seen = 0
        self._file: IO[str] | None = None
        self._pending: tuple[Any, list[float], int, Any, Any] | None = None
        if enabled:
            if append and self.path.exists():
                last = _last_record(self.path)
                if last is not None:
                    self.step, self.samples_seen = last["step"] + 1, last["samples_seen"]
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = self.path.open("a" if append else "w", encoding="utf-8")

    def record(self, optimizer: Any, *, samples: int, loss: SupportsFloat | None = None,
               model: Any = None) -> None:
        """Call just before ``optimizer.step()``: ``samples`` is this update's global batch, a
        whole number >= 1 (any integer type: ``int``, numpy's, a one-element integer tensor).
        Anything else raises ``lrcheck.SpecError`` at once and writes nothing, rather than a
        file ``lrcheck diff`` would reject later. With ``model`` (a ``torch.nn.Module``), the
        line is written once the step is done, with a fingerprint of the model's parameters
        after it (``fingerprint``), which ``lrcheck diff`` checks as ``params``; a step that
        never happens (a GradScaler's skip) is written at the next call or ``close``."""
        lr = [float(g["lr"]) for g in optimizer.param_groups]
        if model is None:
            self.log(lr=lr, samples=samples, loss=loss)
            return
        count = _samples(samples)
        self._write_pending()

        def after(*_: object) -> None:
            self._write_pending()

        handle = optimizer.register_step_post_hook(after)
        self._pending = (handle, lr, count, loss, model)

    def _write_pending(self) -> None:
        if self._pending is None:
            return
        handle, lr, count, loss, model = self._pending
        self._pending = None
        handle.remove()
        self.log(lr=lr, samples=count, loss=loss, fingerprint=fingerprint(model.parameters()))

    def log(self, *, lr: Sequence[float], samples: int, loss: SupportsFloat | None = None,
            fingerprint: Sequence[float] | None = None,
            extra: Mapping[str, object] | None = None) -> None:
        """The same as ``record`` for code that has the LRs already (a framework's callback);
        ``fingerprint``: the parameters after the update, in brief
        (``integrations.core.fingerprint``), which ``lrcheck diff`` checks as ``params``;
        ``extra``: more keys of the line (``lrcheck record``'s ``EXTRA``)."""
        count = _samples(samples)
        if not self.enabled or self._file is None:
            return
        self.samples_seen += count
        line: dict[str, object] = {"step": self.step, "samples_seen": self.samples_seen,
                "lr": [json_number(v) for v in lr],
                "loss": None if loss is None else json_number(loss)}
        if fingerprint is not None:
            line["fingerprint"] = [json_number(v) for v in fingerprint]
        line.update(extra or {})
        self._file.write(json.dumps(line, allow_nan=False) + "\n")
        self._file.flush()
        self.step += 1

    def close(self) -> None:
        self._write_pending()
        if self._file is not None:
            self._file.close()
            self._file = None

    def __enter__(self) -> Recorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def fingerprint(params: Iterable[Any]) -> list[float]:
    """Two numbers per parameter tensor, flat: its sum (accumulated in float64) and its largest
    absolute value. Moving any one element by ``d`` moves its tensor's sum by ``d``; comparing
    the sums relative to the largest absolute value is the ``params`` check's ``max|Δp| /
    max|p|`` for such a move. Two reductions per tensor, no copy, memory O(tensors)."""
    import torch

    with torch.no_grad():
        tensors = [p.detach() for p in params]
        if not tensors:
            return []
        sums = torch.stack([t.sum(dtype=torch.float64) for t in tensors])
        peaks = torch.stack([torch.linalg.vector_norm(t, float("inf")).to(torch.float64)
                             if t.numel() else torch.zeros((), dtype=torch.float64,
                                                           device=t.device)
                             for t in tensors])
        return torch.stack([sums, peaks.to(sums.device)], dim=1).flatten().tolist()


def _samples(samples: Any) -> int:
    """``samples`` as a whole number >= 1; a ``SpecError`` naming it otherwise."""
    try:
        count = None if isinstance(samples, bool) else operator.index(samples)
    except TypeError:
        count = None
    if count is None or count < 1:
        raise SpecError(f"Recorder.record: samples must be a whole number >= 1, got {samples!r} "
                        "(the samples behind this update over all processes: bs·accum·world)")
    return count


def json_number(value: SupportsFloat) -> float | str:
    """``float(value)`` as JSON holds it: a number, or a ``NOT_FINITE`` string."""
    number = float(value)
    if math.isfinite(number):
        return number
    return "NaN" if math.isnan(number) else ("Infinity" if number > 0 else "-Infinity")


def _read_number(value: object) -> float | None:
    """A number of a record (a ``NOT_FINITE`` string included) as a float; else None."""
    if isinstance(value, str):
        return NOT_FINITE.get(value)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return None


def _last_record(path: Path) -> dict[str, Any] | None:
    if not path.read_text(encoding="utf-8").strip():
        return None
    return read_records(path)[-1]


def read_records(path: str | Path) -> list[dict[str, Any]]:
    """The records of a Recorder file; a malformed line is a ``SpecError`` naming file and line."""
    path = Path(path)
    try:
        raw_bytes = path.read_bytes()
    except OSError as exc:
        raise SpecError(f"cannot read {str(path)!r}: {exc.strerror or exc}") from None
    try:
        text = raw_bytes.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw_bytes[:exc.start].count(b"\n") + 1
        raise SpecError(f"{path}:{line}: not UTF-8 text (byte 0x{raw_bytes[exc.start]:02x}); a "
                        "Recorder file holds JSON lines written by lrcheck.Recorder") from None
    records: list[dict[str, Any]] = []
    last_line = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        where = f"{path}:{number}"
        try:
            item = json.loads(raw)
        except json.JSONDecodeError as exc:
            if not records:
                _not_a_recorder_file(path, text)
            raise SpecError(f"{where}: not JSON ({exc.msg}); each line must be one record "
                            "written by lrcheck.Recorder") from None
        if not isinstance(item, dict) or any(key not in item for key in REQUIRED):
            if not records:
                _not_a_recorder_file(path, text)
            raise SpecError(f"{where}: a record needs the keys {', '.join(REQUIRED)}")
        record = _record(item, where)
        if records and item["samples_seen"] <= records[-1]["samples_seen"]:
            before = records[-1]["samples_seen"]
            how = "goes back" if item["samples_seen"] < before else "does not grow"
            raise SpecError(
                f"{where}: 'samples_seen' {how}: {item['samples_seen']} after {before} on line "
                f"{last_line}; a Recorder file holds one run, whose samples_seen grows with "
                "every update (two runs written into one file? Record each into its own: "
                "Recorder(path) starts the file afresh, append=True only resumes a run)")
        records.append(record)
        last_line = number
    if not records:
        raise SpecError(f"{str(path)!r} holds no records")
    return records


def _record(item: dict[str, Any], where: str) -> dict[str, Any]:
    """One line's record, its values checked (``where``: the file and line, for the error)."""
    lr = item["lr"]
    lrs = [_read_number(v) for v in (lr if isinstance(lr, list) else [lr])]
    if not lrs or not all(v is not None and math.isfinite(v) for v in lrs):
        raise SpecError(f"{where}: 'lr' must be a number or a list of numbers, got {lr!r}")
    for key in ("step", "samples_seen"):
        if not isinstance(item[key], int) or isinstance(item[key], bool) or item[key] < 0:
            raise SpecError(f"{where}: {key!r} must be a whole number >= 0, got {item[key]!r}")
    loss = item.get("loss")
    loss_value = None if loss is None else _read_number(loss)
    if loss is not None and loss_value is None:
        raise SpecError(f"{where}: 'loss' must be a number, null, or one of "
                        f"{', '.join(map(repr, NOT_FINITE))}, got {loss!r}")
    fingerprint = item.get("fingerprint")
    if fingerprint is not None and (
            not isinstance(fingerprint, list) or len(fingerprint) % 2
            or not all(isinstance(v, (int, float)) and not isinstance(v, bool)
                       and math.isfinite(v) for v in fingerprint)):
        raise SpecError(f"{where}: 'fingerprint' must be a list of numbers, two per "
                        f"parameter tensor (integrations.core.fingerprint), or absent")
    record = {"step": item["step"], "samples_seen": item["samples_seen"],
              "lr": lrs, "loss": loss_value}
    if fingerprint is not None:
        record["fingerprint"] = [float(v) for v in fingerprint]
    for key in COUNTS:
        if key in item:
            if not isinstance(item[key], int) or isinstance(item[key], bool) or item[key] < 0:
                raise SpecError(f"{where}: {key!r} must be a whole number >= 0, "
                                f"got {item[key]!r}")
            record[key] = item[key]
    for key in NUMBERS:
        if key in item:
            value = _read_number(item[key])
            if value is None or (key == "opt_step" and not (math.isfinite(value) and value >= 0)):
                raise SpecError(f"{where}: {key!r} must be a number"
                                f"{' >= 0' if key == 'opt_step' else ''}, got {item[key]!r}")
            record[key] = value
    for key, many in (("grad_sq", False), ("grad_sqs", True)):  # see COUNTS' comment
        given = item.get(key, [] if many else 0.0)
        read = [_read_number(v) for v in (given if isinstance(given, list) else [given])]
        if isinstance(given, list) != many or not all(v is not None and not v < 0 for v in read):
            raise SpecError(f"{where}: {key!r} must hold numbers >= 0, got {given!r}")
        record.update({key: read if many else read[0]} if key in item else {})
    if "fed" in item:
        record.update(_fed(item, where))
    record.update(_losses(item, where))
    record.update(read_settings(item, where))
    return {**record, **{k: v for k, v in item.items() if k.startswith("rng") and type(v) is int}}


def _losses(item: dict[str, Any], where: str) -> dict[str, Any]:
    """A line's losses differentiated (``record.losses``): ``loss_backward``, a number, and
    ``loss_micro`` (``grad_dots``: record.probes), lists of numbers or nulls; router_terms."""
    terms = item.get("router_terms")
    out: dict[str, Any] = {"router_terms": terms} if isinstance(terms, dict) else {}
    if "loss_backward" in item:
        value = _read_number(item["loss_backward"])
        if value is None:
            raise SpecError(f"{where}: 'loss_backward' must be a number, got "
                            f"{item['loss_backward']!r}")
        out["loss_backward"] = value
    for key in (k for k in ("loss_micro", "grad_dots") if k in item):
        micro = item[key]
        read = ([None if v is None else _read_number(v) for v in micro]
                if isinstance(micro, list) else None)
        if read is None or any(v is not None and r is None
                               for v, r in zip(micro, read, strict=True)):
            raise SpecError(f"{where}: {key!r} must be a list of numbers or nulls, got "
                            f"{micro!r}")
        out[key] = read
    return out


def pack_fed(ids: Sequence[Sequence[int]], weights: Sequence[Sequence[float] | None]
             ) -> dict[str, Any]:
    """A line's samples (``lrcheck record``'s ``record.taps``) as it stores them: per
    micro-batch its samples' identities as the base64 of their little-endian int64 (11
    characters a sample, against 20 as decimals), and their weights as one number where all are
    equal, else the base64 of their float64, or null where not measured."""
    import numpy as np

    def weighed(w: Sequence[float] | None) -> float | str | None:
        if w is None:
            return None
        values = np.asarray(w, dtype="<f8")
        if len(values) and bool(np.all(values == values[0])) and math.isfinite(values[0]):
            return float(values[0])
        return base64.b64encode(values.tobytes()).decode("ascii")

    return {"fed": [base64.b64encode(np.asarray(i, dtype="<i8").tobytes()).decode("ascii")
                    for i in ids],
            "fed_weights": [weighed(w) for w in weights]}


def _fed(item: dict[str, Any], where: str) -> dict[str, Any]:
    """A line's samples (``pack_fed``), read back and checked: ``fed``, per micro-batch its
    samples' identities; ``fed_weights``, per micro-batch each sample's weight or None;
    ``fed_why`` and ``fed_dtype``, strings. Lists of numbers are read too."""
    import numpy as np

    def unpacked(value: object, kind: str, count: int | None) -> list[Any]:
        if isinstance(value, list):
            return value
        if isinstance(value, (int, float)) and not isinstance(value, bool) and count is not None:
            return [float(value)] * count
        if not isinstance(value, str):
            raise ValueError(value)
        found: list[Any] = np.frombuffer(base64.b64decode(value, validate=True),
                                         dtype=kind).tolist()
        return found

    weights = item.get("fed_weights")
    try:
        fed = [unpacked(ids, "<i8", None) for ids in item["fed"]]
        if not all(isinstance(i, int) and not isinstance(i, bool) for ids in fed for i in ids):
            raise ValueError(fed)
    except (TypeError, ValueError, binascii.Error):
        raise SpecError(f"{where}: 'fed' must hold, per micro-batch, its sample identities "
                        "(lrcheck.recorder.pack_fed)") from None
    if weights is None:
        weights = [None] * len(fed)
    try:
        if not isinstance(weights, list) or len(weights) != len(fed):
            raise ValueError(weights)
        read = [None if w is None else unpacked(w, "<f8", len(ids))
                for ids, w in zip(fed, weights, strict=True)]
        if any(w is not None and (len(w) != len(ids) or not all(
                isinstance(v, (int, float)) and not isinstance(v, bool) for v in w))
               for ids, w in zip(fed, read, strict=True)):
            raise ValueError(read)
    except (TypeError, ValueError, binascii.Error):
        raise SpecError(f"{where}: 'fed_weights' must hold, per micro-batch of 'fed', one "
                        "number per sample, or null") from None
    out: dict[str, Any] = {"fed": fed, "fed_weights": read}
    if item.get("fed_tokens") is not None:  # read where the ranks merge (record.tokens.read)
        out["fed_tokens"] = item["fed_tokens"]
    for key in ("fed_why", "fed_dtype"):
        if isinstance(item.get(key), str):
            out[key] = item[key]
    return out


def _not_a_recorder_file(path: Path, text: str) -> None:
    """A ``SpecError`` saying what ``path`` is instead, when it is a file lrcheck writes that
    is not a Recorder file: a report's result.json, a suite's suite.json, a suite baseline."""
    try:
        data = json.loads(text)
    except ValueError:
        return
    if not isinstance(data, dict) or "schema_version" not in data:
        return
    kind = data.get("kind")
    if isinstance(data.get("runs"), dict) and "checks" in data:
        runs = data["runs"]
        specs = [runs.get(side, {}).get("spec") if isinstance(runs.get(side), dict) else None
                 for side in ("reference", "candidate")]
        if data.get("mode") == "diff" and all(isinstance(s, str) for s in specs):
            instead = f"the Recorder files it compared: lrcheck diff {specs[0]} {specs[1]}"
        else:
            instead = ("the Recorder files (JSON lines) that two runs wrote through "
                       "lrcheck.Recorder or an integration's LrcheckCallback; this report "
                       "already holds the comparison of its own two runs")
        what = "a report's result.json (what lrcheck compare, trace and diff write with --out)"
    elif kind == "lrcheck-suite":
        what, instead = "a suite's suite.json", "the Recorder files two runs wrote"
    elif kind == "lrcheck-baseline":
        what, instead = "a suite baseline", "the Recorder files two runs wrote"
    else:
        return
    raise SpecError(f"{path} is {what}, not a Recorder file: pass {instead}")
