from pkb_env.tasks.gnn_negative_scoring import reference


def solution(pos_score, neg_score, group):
    """PKB 69 as PKB states it: pkb-env's function, which is PKB's wherever nothing ties (the variant's
    inputs never tie: tasks/_pkb.py, `without_ties`)."""
    return reference.solution(pos_score, neg_score, group)
