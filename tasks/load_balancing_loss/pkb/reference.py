from pkb_env.tasks.load_balancing_loss import reference


def solution(gate_logits, num_experts, top_k):
    """PKB 24 as PKB states it: pkb-env's function, which is PKB's wherever nothing ties (the variant's
    inputs never tie: tasks/_pkb.py, `without_ties`)."""
    return reference.solution(gate_logits, num_experts, top_k)
