"""The teardown abort of docs/multiprocess.md in a plain torchrun script, without lrcheck.

    for i in $(seq 40); do torchrun --nproc-per-node 2 scripts/gloo_teardown.py; done 2>&1 \
        | grep -c "terminate called"
    for i in $(seq 40); do torchrun --nproc-per-node 2 scripts/gloo_teardown.py --exit-now; done \
        2>&1 | grep -c "terminate called"

Two ranks train a small DDP model on gloo and leave the process group; rank 1 returns at once
while rank 0 is still at work (as a worker does when rank 0 goes on to train the reference).
Returning normally finalises the interpreter while gloo's worker threads may still hold a
finished collective's work object, whose destructor needs the GIL: now and then rank 1 aborts
with "terminate called without an active exception". With ``--exit-now`` each rank leaves
through ``os._exit``, as lrcheck's processes do (``lrcheck.procs.marks.exit_now``).
"""

import os
import sys
import time

import torch
import torch.distributed as dist

rank = int(os.environ["RANK"])
dist.init_process_group("gloo")
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 2).double())
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(5):
    model(torch.randn(3, 4, dtype=torch.float64)).sum().backward()
    optimizer.step()
    optimizer.zero_grad()
dist.destroy_process_group()  # the DDP model still holds the group, and its threads run on
if rank == 0:
    time.sleep(2)  # still at work
if "--exit-now" in sys.argv:
    sys.stdout.flush()
    os._exit(0)
