"""``record.optimizers.real_steps``: the step torch.distributed.checkpoint's ``get_state_dict`` /
``set_state_dict`` make on a fresh optimizer to build its state (zero gradients, LR 0) is no
update: the hooks do not see it; the user's own steps they do."""

import torch
from torch.distributed.checkpoint.state_dict import _init_optim_state

from lrcheck.record.optimizers import real_steps


def test_the_step_that_makes_a_fresh_optimizers_state_for_a_checkpoint_is_not_seen():
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    seen: list[str] = []
    pre, post = real_steps(lambda *args: seen.append("pre"), lambda *args: seen.append("post"))
    optimizer.register_step_pre_hook(pre)
    optimizer.register_step_post_hook(post)
    _init_optim_state(optimizer)
    assert seen == [] and optimizer.state  # its state made, no update seen
    model(torch.ones(1, 3)).sum().backward()
    optimizer.step()
    assert seen == ["pre", "post"]
