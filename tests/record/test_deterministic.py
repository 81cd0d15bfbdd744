"""``lrcheck record --deterministic``: the environment variables in the command's environment
(a user's own kept), the flags set by the recorder's boot once the process imports torch, and
what each process's description, run.json and a diff's result.json say of them."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

from lrcheck.api import diff, record
from lrcheck.record.launch import BOOT, environment
from lrcheck.record.startup import ENV_DETERMINISTIC
from lrcheck.spec.determinism import ENV_VARIABLES, NO_CUDA

USER_SCRIPT = textwrap.dedent("""
    import json, os, torch
    print("SEEN", json.dumps({"deterministic": torch.are_deterministic_algorithms_enabled(),
                              "env": {k: os.environ.get(k) for k in NAMES}}))
    torch.set_float32_matmul_precision("high")  # the user's own, after lrcheck's
    model = torch.nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(2):
        opt.zero_grad()
        model(torch.ones(4, 3)).sum().backward()
        opt.step()
""").replace("NAMES", repr(list(ENV_VARIABLES)))


def test_the_commands_environment_gets_the_variables_and_keeps_the_users(tmp_path):
    env = environment(tmp_path, None, 0, base={"NCCL_ALGO": "Ring"}, deterministic=True)
    assert env[ENV_DETERMINISTIC] == "1"
    assert env["NCCL_ALGO"] == "Ring"  # the user's, kept
    assert {k: env[k] for k in ENV_VARIABLES if k != "NCCL_ALGO"} == {
        k: v for k, v in ENV_VARIABLES.items() if k != "NCCL_ALGO"}
    off = environment(tmp_path, None, 0, base={}, deterministic=False)
    assert ENV_DETERMINISTIC not in off and not set(ENV_VARIABLES) & set(off)


@pytest.mark.slow
def test_the_boot_gives_the_variables_to_a_process_that_got_only_the_python_ones(tmp_path):
    # DeepSpeed's multi-node runner passes on PYTHON* variables only.
    path = os.pathsep.join([str(BOOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": path,
           "PYTHON_LRCHECK_RECORD_DIR": str(tmp_path), ENV_DETERMINISTIC: "1",
           "PYTHON_LRCHECK_RECORD_LIB": str(BOOT.parents[2])}
    code = ("import json, os; print(json.dumps({k: os.environ.get(k) for k in "
            f"{list(ENV_VARIABLES)!r}}}))")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=60, check=True)
    seen = json.loads(out.stdout)
    assert seen.pop("PYTHONHASHSEED") is None  # only a process's start reads it
    assert seen == {k: v for k, v in ENV_VARIABLES.items() if k != "PYTHONHASHSEED"}


@pytest.mark.slow
def test_a_recorded_command_trains_deterministic_and_its_record_says_what_was_in_effect(
        tmp_path, monkeypatch):
    script = tmp_path / "train.py"
    script.write_text(USER_SCRIPT)
    monkeypatch.setenv("PYTHONHASHSEED", "5")  # the user's own
    out = tmp_path / "rec"
    run = record([sys.executable, str(script)], out, deterministic=True, capture=True)
    assert run.exit_code == 0, run.tail
    seen = json.loads(next(line for line in run.tail if line.startswith("SEEN"))[5:])
    assert seen["deterministic"] is True  # set by the boot, before the user's code ran
    assert seen["env"] == {**ENV_VARIABLES, "PYTHONHASHSEED": "5"}
    described = json.loads((out / "run.json").read_text())
    assert described["deterministic"] is True
    entry = described["processes"][0]["deterministic"]
    assert entry == json.loads((out / "rank0.json").read_text())["deterministic"]
    assert entry["torch.use_deterministic_algorithms"] is True
    assert entry["CUBLAS_WORKSPACE_CONFIG"] == NO_CUDA
    assert entry["PYTHONHASHSEED"] == ("'5', set by the command or its caller "
                                       "(--deterministic's: '0')")
    assert entry["torch.set_float32_matmul_precision"] == (
        "'high', set by the command or its caller (--deterministic's: 'highest')")
    assert diff(out, out).to_dict()["environment"]["deterministic"] == entry
