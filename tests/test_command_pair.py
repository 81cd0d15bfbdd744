"""``command_pair.run_commands`` with its ``RunOptions``: what Ctrl-C keeps (nothing runs: the
recording is replaced by one that is interrupted at once)."""

import pytest

from lrcheck import api
from lrcheck.errors import Interrupted
from lrcheck.spec import DIFF_DTYPE, Tolerances


@pytest.mark.parametrize("free", [False, True])
def test_ctrl_c_keeps_what_was_recorded_with_the_options_tolerances(tmp_path, monkeypatch, free):
    from lrcheck import command_pair as pairs

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(pairs, "record_together", interrupted)
    monkeypatch.setattr(pairs, "record_command", interrupted)
    tolerances = Tolerances.for_dtype(DIFF_DTYPE, lr=1e-3)
    with pytest.raises(Interrupted) as info:
        api.run_commands("python a.py", "python b.py", tmp_path, tolerances=tolerances,
                         free=free)
    result = info.value.result
    assert result.pair.tolerances == tolerances
    assert result.pair.candidate == str(tmp_path / "candidate")
    assert info.value.how == "interrupted (Ctrl-C)"
