"""What every ``LrcheckCallback`` shares (``integrations/core.CallbackBase``): its arguments
checked when it is made, and the Recorder file it opens written and closed."""

import json

import pytest
import torch

from lrcheck.integrations.core import CallbackBase


def test_a_callback_needs_a_path_or_a_sink():
    with pytest.raises(ValueError, match="needs a path to write to"):
        CallbackBase()
    with pytest.raises(ValueError, match="every must be a whole number >= 1, got 0"):
        CallbackBase("run.jsonl", every=0)
    with pytest.raises(ValueError, match="got 1.5"):
        CallbackBase("run.jsonl", every=1.5)  # type: ignore[arg-type]


def test_the_file_it_opens_is_written_and_closed(tmp_path):
    net = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.5)
    path = tmp_path / "run.jsonl"
    callback = CallbackBase(path)
    tap = callback.open_tap(net.parameters, (1, 0), None)
    loss = net(torch.ones(3, 2)).mean()
    tap.micro_batch(loss, 3, 3, [0, 1, 2])
    loss.backward()
    tap.before_step(optimizer)
    optimizer.step()
    tap.end_update()
    callback.close_sink()
    line = json.loads(path.read_text().splitlines()[0])
    assert line["lr"] == [0.5] and line["samples_seen"] == 3
    assert line["loss"] == pytest.approx(float(loss.detach()))


def test_a_sink_it_is_given_is_used_as_it_is():
    class Sink:
        def __init__(self):
            self.updates = []

        def before_step(self, optimizer, scheduler_steps):
            pass

        def update(self, loss, samples, epoch, window):
            self.updates.append((loss, samples, [m.ids.tolist() for m in window]))

    sink = Sink()
    callback = CallbackBase(sink=sink)
    tap = callback.open_tap(lambda: [], (1, 0), None)
    tap.micro_batch(torch.tensor(2.0, requires_grad=True), 4, 4, [7, 8, 9, 10])
    tap.end_update(0)
    callback.close_sink()
    assert sink.updates == [(2.0, 4, [[7, 8, 9, 10]])]
