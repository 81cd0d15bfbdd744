"""Lockstep for two recorded commands run side by side (``lrcheck run``), inside each process,
at the optimizer's step hooks of ``record.process``. Only the first optimizer of a process
takes part.

The reference's rank 0 streams, after each update k, the gradient the update used (read after
the user's clipping), its parameters and its optimizer state into the exchange folder
(``ref-{k}.pt``, written whole, then renamed). Each rank of the candidate, after its own update
k, reads that file, measures per tensor how far its gradient and its parameters are from the
reference's (``record.gaps``; both started update k from the same state), writes those numbers
as one line of its ``lockstep-rank{R}.jsonl``, and loads the reference's parameters and
optimizer state into its own tensors, in place: update k+1 starts again from the reference's
state. The candidate's LR, scheduler, data, loss, GradScaler and clipping stay its own.

Memory and disk stay O(model): the reference writes update k only once every candidate rank
has read update k - DEPTH, and removes what they all have read. Before its first update the
reference sizes that (``need``: the initial parameters and DEPTH + 1 states of parameters,
gradients and optimizer state) and puts the states where they fit with a margin (``place``: the
exchange folder, in ``/dev/shm`` where there is one, else the spare folder ``lrcheck run`` made
on its report's disk), or switches lockstep off saying so. A side that ends leaves a
marker (``reference.ended``, ``candidate.ended``: written by its processes at exit, and by
``lrcheck run`` when the command is gone however it ended), which releases the other side's
waits; every wait has a deadline (``WAIT_S``, ``roles.ENV_WAIT``). Nothing here may break the
user's program: every call from ``record.process`` runs inside its lockstep guard
(``record.guard``): a failure (a full disk among them) switches lockstep off with the reason in
the lockstep file, and training goes on."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch

from lrcheck.procs.owner import identity
from lrcheck.record import exchange
from lrcheck.record.exchange import DEPTH as DEPTH  # read by record.process
from lrcheck.record.gaps import NOISE_CAP, NOISE_UNITS, gaps
from lrcheck.record.precision import EPS, coarsest
from lrcheck.record.roles import CANDIDATE, ENV_SPARE, REFERENCE, ended
from lrcheck.stepwise import COLUMNS, LINES

END = 1 << 62  # a candidate rank's progress once it follows no more
def _save(obj: Any, path: Path) -> None:
    """``obj`` written whole, then renamed into place; without the CRC32 of each record (a
    quarter of the save, and the exchange lives in memory), switched off for this save only:
    the user's own saves keep theirs."""
    part = path.with_name(path.name + ".part")
    crc = torch.serialization.get_crc32_options()
    torch.serialization.set_crc32_options(False)
    try:
        torch.save(obj, part)
    finally:
        torch.serialization.set_crc32_options(crc)
    os.replace(part, path)


def _write_text(path: Path, text: str) -> None:
    part = path.with_name(path.name + ".part")
    part.write_text(text, encoding="utf-8")
    os.replace(part, path)


def _cpu(tensors: list[torch.Tensor | None]) -> list[torch.Tensor | None]:
    """The tensors as ``torch.save`` takes them: detached, on the CPU (copied only from
    another device: a CPU tensor is written out by the save itself)."""
    return [None if t is None else exchange.dense(t.detach()) if t.device.type == "cpu" else
            exchange.dense(t.detach()).to("cpu") for t in tensors]


def _state(optimizer: torch.optim.Optimizer, params: list[torch.Tensor]) -> list[dict[str, Any]]:
    out = []
    for p in params:
        entry = {}
        for key, value in optimizer.state.get(p, {}).items():
            entry[key] = _cpu([value])[0] if torch.is_tensor(value) else value
        out.append(entry)
    return out


def dtype_of(params: list[torch.Tensor]) -> str:
    """The floating-point type of ``params`` (``float32``; two joined by ``+`` where mixed)."""
    kinds = sorted({str(p.dtype).removeprefix("torch.") for p in params
                    if p.is_floating_point()})
    return "+".join(kinds) or "none"


class Streamer:
    """The reference's side, in its rank 0: the initial parameters, then one file an update."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.store = folder  # where the states go (``place``)
        self.off = False

    def _refuse(self, why: str) -> None:
        self.off = True
        _write_text(self.folder / "reference.json", json.dumps({"off": why}))

    def start(self, params: list[torch.Tensor], sharded: bool,
              born: list[float] | None = None, compute: dict[str, Any] | None = None,
              optimizer: torch.optim.Optimizer | None = None) -> None:
        """Before update 0 (``born``: the parameters' fingerprint when the optimizer was
        made; ``compute``: the precision update 0 computed in, ``record.precision``): the
        states' place, sized from the model (``need``, ``place``)."""
        if sharded:  # a shard per rank: nothing whole to load
            return self._refuse("the reference's parameters are sharded over its ranks (ZeRO "
                                "or FSDP)")
        spare = os.environ.get(ENV_SPARE, "")
        free = exchange.free_space([self.folder, *([Path(spare)] if spare else [])])
        needed = exchange.need(params, exchange.state_bytes(optimizer))
        store = exchange.place(needed, free)
        if store is None:
            rooms = ", ".join(f"{folder} has {room / 2**30:.3g}" for folder, room in free)
            return self._refuse(f"the exchange needs {needed * exchange.MARGIN / 2**30:.3g} "
                                f"GiB with its margin (the model's {DEPTH + 1} states): {rooms}")
        self.store = store
        if store != self.folder:
            store.mkdir(parents=True, exist_ok=True)
        _save({"params": _cpu(list(params))}, store / "ref-init.pt")
        _write_text(self.folder / "reference.json", json.dumps(
            {"tensors": len(params), "shapes": [list(p.shape) for p in params],
             "dtype": dtype_of(params), "born": born, "store": str(store),
             "need": needed, "process": identity(), "compute": compute}))

    def stop(self, why: str) -> None:
        """Lockstep off (its guard tripped): the states removed, the candidate told why."""
        self.off = True
        for old in self.store.glob("ref-*"):
            old.unlink(missing_ok=True)
        _write_text(self.folder / "reference.off", why)
        ended(self.folder, REFERENCE).touch()

    def after(self, k: int, optimizer: torch.optim.Optimizer, params: list[torch.Tensor]) -> None:
        if self.off:
            return
        if _progress(self.folder) == END:  # every candidate rank stopped following
            self.off = True
            return
        release = ended(self.folder, CANDIDATE)
        if k >= DEPTH:
            def caught_up() -> bool:
                done = _progress(self.folder)
                return done is not None and k - done <= DEPTH
            read = _progress(self.folder)  # -1 or None: the candidate has read no update yet
            if not exchange.wait(caught_up, release, f"the candidate to read update "
                                 f"{k - DEPTH}", started=read is not None and read >= 0):
                self.off = True  # the candidate is gone: go on alone
                return
        _save({"grads": _cpu([p.grad for p in params]), "params": _cpu(list(params)),
               "state": _state(optimizer, params)}, self.store / f"ref-{k}.pt")
        done = _progress(self.folder)
        if done is not None:
            for old in self.store.glob("ref-*.pt"):
                stem = old.stem[4:]
                if stem.isdigit() and int(stem) <= done:
                    old.unlink(missing_ok=True)


    def close(self) -> None:
        ended(self.folder, REFERENCE).touch()


def _progress(folder: Path) -> int | None:
    """The last update every candidate rank has read (-1: none yet; ``END``: none follows any
    more; None: the candidate has not said how many ranks it has)."""
    try:
        world = int((folder / "candidate.world").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    done = []
    for rank in range(world):
        try:
            text = (folder / f"candidate-rank{rank}.done").read_text(encoding="utf-8")
        except OSError:
            return -1
        done.append(END if text == "end" else int(text or -1))
    return min(done)


class Follower:
    """A candidate rank's side: compares each update with the reference's and loads its state."""

    def __init__(self, folder: Path, record_folder: Path, rank: int, world: int) -> None:
        self.folder, self.rank = folder, rank
        self.store = folder  # where the reference puts its states (its ``reference.json``)
        self.at = 0  # the update it follows next
        self.peer: str | None = None
        self.off: str | None = None
        self.start_params: list[torch.Tensor] | None = None
        self.noise = 0.0  # a coordinate's share of its tensor's largest gradient, at most
        self.lines = (record_folder / LINES.format(rank=rank)).open("w", encoding="utf-8")
        self.header: dict[str, Any] = {}
        if rank == 0:
            _write_text(folder / "candidate.world", str(world))

    def _mark(self, k: int | str) -> None:
        _write_text(self.folder / f"candidate-rank{self.rank}.done", str(k))

    def stop(self, why: str) -> None:
        """Lockstep off (its guard tripped), at the update it was following."""
        self._stop(why, self.at)

    def _stop(self, why: str, k: int | None) -> None:
        if self.off is None:
            self.off = why
            self._write({"off": why, "at": k})
            self._mark("end")

    def _write(self, line: dict[str, Any]) -> None:
        self.lines.write(json.dumps(line, allow_nan=False) + "\n")
        self.lines.flush()

    def start(self, params: list[torch.Tensor], names: list[str], sharded: bool,
              born: list[float] | None = None, compute: dict[str, Any] | None = None) -> None:
        """Before update 0: the weights compared with the reference's, as the step is about
        to use them and (``born``) when the optimizer was made; ``compute``: the precision
        update 0 computed in."""
        release = ended(self.folder, REFERENCE)
        info_path = self.folder / "reference.json"
        self.header = {"names": names, "dtype": dtype_of(params), "columns": list(COLUMNS),
                       "sizes": [p.numel() for p in params], "compute": compute}
        if sharded:
            self._write(self.header)
            return self._stop("the candidate's parameters are sharded over its ranks (ZeRO's "
                              "partitions, or DTensors: FSDP, tensor parallel): no whole state "
                              "to load", None)
        if not exchange.wait(info_path.exists, release, "the reference's first update", False):
            self._write(self.header)
            return self._stop("the reference ended before its first update", 0)
        info = json.loads(info_path.read_text(encoding="utf-8"))
        if "off" in info:
            self._write(self.header)
            return self._stop(info["off"], None)
        shapes = [list(p.shape) for p in params]
        if shapes != info["shapes"]:
            self._write(self.header)
            return self._stop(f"the models differ: {len(params)} parameter tensors in the "
                              f"candidate, {info['tensors']} in the reference, or of other "
                              "shapes", None)
        self.store = Path(info.get("store") or self.folder)
        self.peer = info.get("process")  # the reference's rank 0: a wait ends if it does
        init = _read(self.store / "ref-init.pt")
        ref = init["params"]
        with torch.no_grad():
            gap = max((float(torch.max(torch.abs(p.detach().cpu().double() - r.double())))
                       for p, r in zip(params, ref, strict=True) if p.numel()), default=0.0)
            scale = max((float(torch.max(torch.abs(r.double()))) for r in ref if r.numel()),
                        default=0.0)
        theirs = info.get("born")
        theirs_compute = info.get("compute")
        kinds = [str(c.get("precision")) for c in (compute, theirs_compute) if c]
        self.noise = min(NOISE_UNITS * EPS[coarsest(kinds or info["dtype"].split("+"))],
                         NOISE_CAP)
        self.header.update({"init_gap": gap, "init_scale": scale,
                            "reference_dtype": info["dtype"],
                            "reference_compute": theirs_compute, "noise_share": self.noise,
                            "born_equal": None if born is None or theirs is None
                            else born == theirs})
        self._write(self.header)
        self.start_params = ref

    def after(self, k: int, optimizer: torch.optim.Optimizer, params: list[torch.Tensor]) -> None:
        if self.off is not None or self.start_params is None:
            return
        self.at = k
        path = self.store / f"ref-{k}.pt"
        if not exchange.wait(path.exists, ended(self.folder, REFERENCE),
                             f"the reference's update {k}", peer=self.peer):
            said = self.folder / "reference.off"
            return self._stop(f"the reference switched lockstep off: {exchange.text_of(said)}"
                              if said.exists() else f"the reference ended after {k} update(s)",
                              k)
        ref = _read(path)
        self._write({"step": k, "gaps": gaps(params, ref["grads"], ref["params"], self.start_params,
                                              self.noise)})
        problem = _load(optimizer, params, ref)
        if problem:
            return self._stop(problem, k)
        self.start_params = ref["params"]
        self._mark(k)

    def close(self) -> None:
        if self.off is None:
            self._mark("end")
        self.lines.close()


def _read(path: Path) -> dict[str, Any]:
    """A state the reference wrote, mapped rather than read (the exchange is in memory): its
    tensors are views of the file's pages, which stay valid once the file is removed."""
    found: dict[str, Any] = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    return found


def _load(optimizer: torch.optim.Optimizer, params: list[torch.Tensor],
          ref: dict[str, Any]) -> str | None:
    """The reference's parameters and optimizer state copied into the candidate's own tensors;
    the reason it cannot be, or None."""
    states = ref["state"]
    for p, theirs in zip(params, states, strict=True):
        mine = optimizer.state.get(p, {})
        if set(mine) != set(theirs):
            return (f"the optimizers' states differ ({', '.join(sorted(mine)) or 'none'} in the "
                    f"candidate, {', '.join(sorted(theirs)) or 'none'} in the reference): not "
                    "the same optimizer")
    with torch.no_grad():
        for p, p_r, theirs in zip(params, ref["params"], states, strict=True):
            p.copy_(p_r)
            mine = optimizer.state[p]
            for key, value in theirs.items():
                held = mine[key]
                if torch.is_tensor(value) and torch.is_tensor(held) and held.shape == value.shape:
                    held.copy_(value)
                else:
                    mine[key] = value
    return None
