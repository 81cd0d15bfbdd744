#!/usr/bin/env bash
# The CUDA path on a GPU machine: the CUDA tests (no host-device sync per micro-batch, float64
# exactness), then lrcheck compare on the GPU as one process and as one process per GPU
# (nccl), in float64 and float32, printed as a small table; then --framework fsdp and deepspeed
# (nccl) against bs 32, a verdict line each.
#   scripts/gpu-check.sh            (after `make venv`)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
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
