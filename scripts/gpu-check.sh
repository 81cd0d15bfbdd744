#!/usr/bin/env bash
# The CUDA path on a GPU machine: the CUDA tests (no host-device sync per micro-batch, float64
# exactness), then lrcheck compare on the GPU as one process and as one process per GPU
# (nccl), in float64 and float32, printed as a small table; then --framework fsdp and deepspeed
# (nccl) against bs 32, a verdict line each; last, the floors of correct pairs in float32, TF32
# and bf16, each with and without --deterministic (scripts/floors.py: one process per row group,
# so that its environment variables apply from the start), as one table.
#   scripts/gpu-check.sh            (after `make venv`)
#   scripts/gpu-check.sh --dry-run  (no GPU: the floors' table on the CPU, 1 epoch, bf16 left out)
# Time on one H200, estimated (no run of it measured yet): the CUDA tests and the exactness
# tables 1-2 min, FSDP and DeepSpeed 1-2 min, the floors 2-3 min (6 processes, each some 10 s of
# torch import and CUDA start; 3 epochs of digits are ~140 updates a run, milliseconds each;
# DeepSpeed's engine start some 10-20 s per run): under 8 minutes. Each floors process is
# bounded by STEP_TIMEOUT (default 240 s) so that a hang cannot take the machine's whole time.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
STEP_TIMEOUT=${STEP_TIMEOUT:-240}

# The floors of correct pairs: float32, TF32 (TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1) and bf16
# (--framework deepspeed), each with the switch off and on.
floors() {
    local device=$1 epochs=$2 precisions=$3 header=--header
    echo
    for precision in $precisions; do
        for switch in "" "--deterministic"; do
            local env=() label=off
            [ "$precision" = tf32 ] && env=(TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1)
            [ -n "$switch" ] && label=on
            # shellcheck disable=SC2086
            env "${env[@]}" timeout "$STEP_TIMEOUT" "$PY" scripts/floors.py --device "$device" \
                --precision "$precision" --epochs "$epochs" $header $switch \
                || echo "| $precision | $label | (failed or timed out: exit $?) |"
            header=
        done
    done
}

if [ "${1:-}" = "--dry-run" ]; then
    floors cpu 1 "float32 tf32"
    echo
    echo "gpu-check --dry-run: the floors' table ran on the CPU (bf16 needs DeepSpeed on CUDA)"
    exit 0
fi
started=$SECONDS
GPUS=$("$PY" -c "import torch; print(torch.cuda.device_count())")
if [ "$GPUS" -lt 1 ]; then
    echo "gpu-check: no CUDA device visible to torch" >&2
    exit 2
fi
"$PY" -c "import torch; print('torch', torch.__version__, '·', torch.cuda.get_device_name(0), '·', torch.cuda.device_count(), 'GPU(s)')"
"$PY" -m pytest -q -m gpu tests/runner/test_cuda.py
worlds=1
[ "$GPUS" -gt 1 ] && worlds="1,$GPUS"
for dtype in float64 float32; do
    echo
    "$PY" scripts/exactness.py --device cuda --dtype "$dtype" --worlds "$worlds" --accums 1,2 \
        --epochs 2
done
# The sharding engines on CUDA: FSDP2 (float64, nccl) and DeepSpeed (float32, ZeRO 0 and 2, nccl),
# one process and one per GPU, each against bs 32 on data of whole windows; a verdict line each.
nprocs=1
[ "$GPUS" -gt 1 ] && nprocs="1 2"
echo
for nproc in $nprocs; do
    bs=$((16 / nproc))
    for run in "fsdp" "deepspeed --dtype float32 --zero-stage 0" \
               "deepspeed --dtype float32 --zero-stage 2"; do
        # shellcheck disable=SC2086
        "$PY" -m lrcheck compare --device cuda --framework $run --task synthetic --samples 1600 \
            --nproc "$nproc" --bs "$bs" --accum 2 --ref-bs 32 --epochs 2 --quiet \
            --out "lrcheck-reports/gpu-check-${run// /_}-nproc$nproc" \
            | sed "s/^/--framework $run --nproc $nproc: /" || true
    done
done
floors cuda 3 "float32 tf32 bf16"
echo
echo "gpu-check: $((SECONDS - started)) s"
