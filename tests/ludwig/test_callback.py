"""``lrcheck.integrations.ludwig.LrcheckCallback`` on a user's own Ludwig run: Recorder lines
that ``lrcheck diff`` reads."""

import json
import logging

import numpy as np
import pandas as pd
import pytest
from ludwig.api import LudwigModel
from sklearn.datasets import load_wine

import lrcheck
from lrcheck.integrations.ludwig import LrcheckCallback
from lrcheck.recorder import read_records

pytestmark = [pytest.mark.slow,  # trains through Ludwig
              pytest.mark.filterwarnings("ignore:The 'default' attribute of fields")]


def wine() -> pd.DataFrame:
    x, y = load_wine(return_X_y=True)
    frame = pd.DataFrame(x, columns=[f"f{i}" for i in range(x.shape[1])])
    frame["cultivar"] = [f"c{v}" for v in y]
    return frame


def train(path, bs: int, accum: int, *, frame: pd.DataFrame | None = None,
          callback: LrcheckCallback | None = None) -> None:
    config = {"input_features": [{"name": f"f{i}", "type": "number"} for i in range(13)],
              "output_features": [{"name": "cultivar", "type": "category"}],
              "combiner": {"type": "concat", "output_size": 16, "num_fc_layers": 1},
              "trainer": {"batch_size": bs, "gradient_accumulation_steps": accum, "epochs": 2,
                          "learning_rate": 0.01, "skip_all_evaluation": True,
                          "learning_rate_scheduler": {"decay": "linear",
                                                      "warmup_fraction": 0.2}}}
    model = LudwigModel(config, logging_level=logging.ERROR,
                        callbacks=[callback or LrcheckCallback(path)],
                        backend={"type": "local", "cache_dir": str(path.parent)})
    model.train(training_set=wine() if frame is None else frame, skip_save_model=True,
                skip_save_progress=True, skip_save_log=True, skip_save_processed_input=True,
                skip_save_training_description=True, skip_save_training_statistics=True,
                output_directory=str(path.parent / "ludwig"), random_seed=1)


def test_the_callback_writes_recorder_lines_that_diff_reads(tmp_path):
    ref, same, cand = tmp_path / "bs32.jsonl", tmp_path / "bs32-again.jsonl", tmp_path / "x2.jsonl"
    train(ref, 32, 1)
    train(same, 32, 1)
    train(cand, 16, 2)
    records = read_records(ref)
    # 178 samples: 6 updates an epoch (5 of 32, one of 18), each with a fingerprint.
    assert len(records) == 12
    assert [r["samples_seen"] for r in records[4:7]] == [160, 178, 210]
    lines = [json.loads(line) for line in ref.read_text().splitlines()]
    # Two numbers per parameter tensor: the combiner's layer and the decoder, weight and bias.
    assert all(len(line["fingerprint"]) == 2 * 4 for line in lines)
    assert lrcheck.diff(ref, same).ok
    report = lrcheck.diff(ref, cand)
    lr = report.check("lr")
    assert lr.status == "fail" and lr.first_divergence == 0, lr.detail


def test_the_sample_ids_are_the_rows_of_the_training_set(tmp_path):
    """Each micro-batch's ids are the rows Ludwig's batcher fetched: a feature holding the row
    number, seen through the wrapped loss, gives them back."""
    seen: list[tuple[np.ndarray, np.ndarray]] = []

    class Peek(LrcheckCallback):
        def on_trainer_train_setup(self, trainer, save_path, is_coordinator):
            super().on_trainer_train_setup(trainer, save_path, is_coordinator)
            forward = trainer.dist_model.forward

            def peek(inputs, *args, **kwargs):
                if isinstance(inputs, tuple) and self._ids is not None:
                    seen.append((self._ids.copy(), inputs[0]["f0"].numpy().copy()))
                return forward(inputs, *args, **kwargs)

            trainer.dist_model.forward = peek

    frame = wine()
    frame["f0"] = np.arange(len(frame), dtype=np.float64)
    train(tmp_path / "rows.jsonl", 16, 2, frame=frame,
          callback=Peek(tmp_path / "rows.jsonl"))
    assert seen
    for ids, f0 in seen:
        # f0 is z-scored by Ludwig: its order is the row order.
        assert np.array_equal(np.argsort(ids), np.argsort(f0))
