"""A schedule factory with a common multi-GPU mistake, for ``lrcheck trace``.

It sizes the schedule from the data set as one process would see it —
``num_samples / (micro_batch_size · accum_steps)`` updates per epoch, which is what
``len(train_loader) // accum`` gives before the loader is sharded across processes — and so
forgets the world size. On N processes each update consumes N times as many samples, the run
makes N times fewer updates, and the schedule only gets through 1/N of its decay:

    lrcheck trace --scheduler examples/schedules/forgets_world.py:make \
        --bs 4 --accum 8 --nproc 64 --ref-bs 2048 --samples 200000000

reports the ``lr`` check failed and the candidate's schedule about 64× too slow (the reference
runs on one process, where the mistake does not show). The fix is to use ``ctx.total_steps``.
"""

import math

from torch.optim.lr_scheduler import LambdaLR


def make(optimizer, ctx):
    updates_per_epoch = ctx.num_samples // (ctx.micro_batch_size * ctx.accum_steps)  # no world
    total = updates_per_epoch * ctx.epochs
    warmup = max(1, total // 10)

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / (warmup + 1)
        progress = min(1.0, (step - warmup) / max(1, total - warmup))
        return 0.5 * (1.0 + math.cos(math.pi * progress))

    return LambdaLR(optimizer, factor)
