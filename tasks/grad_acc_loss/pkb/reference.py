from pkb_env.tasks.grad_acc_loss import reference


def solution(loss, local_valid_tokens, global_valid_tokens, grad_normalized_loss, grad_loss_sum):
    """PKB 23 as PKB states it: the task's function (tasks/grad_acc_loss/reference.py), its three outputs returned
    in the loss's dtype as PKB's reference returns them. PKB's reference computes in that dtype; this computes in
    fp32 and rounds once, the answer nearest the exact one, and PKB's tolerance (1e-2) takes either."""
    return tuple(out.to(loss.dtype) for out in reference.solution(
        loss, local_valid_tokens, global_valid_tokens, grad_normalized_loss, grad_loss_sum))
