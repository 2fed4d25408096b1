import torch
import torch.distributed as dist


def solution(grad_fc1_1_lora_A: torch.Tensor, grad_fc1_2_lora_A: torch.Tensor, grad_fc2_lora_B: torch.Tensor,
             group: dist.ProcessGroup) -> None:
    """The gradient reduction at the end of an expert-parallel grouped-GEMM LoRA backward (VeOmni): the LoRA
    factors are shared by the experts of every rank of group, so each rank's backward leaves a partial
    gradient of each, grad_fc1_1_lora_A (R, N) and grad_fc1_2_lora_A (R, N) (the gate and up projections'
    A factors) and grad_fc2_lora_B (N, R) (the down projection's B factor). Every rank replaces each IN PLACE
    by its sum over the ranks of group, and returns None."""
    dist.all_reduce(grad_fc1_1_lora_A, op=dist.ReduceOp.SUM, group=group)
    dist.all_reduce(grad_fc1_2_lora_A, op=dist.ReduceOp.SUM, group=group)
    dist.all_reduce(grad_fc2_lora_B, op=dist.ReduceOp.SUM, group=group)
