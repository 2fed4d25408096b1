"""What several tasks' PKB declarations share (contract/pkb.py, docs/pkb_compat.md): how pkb-env's function departs
from PKB's where a family departs alike."""

MOE_ROUTER = ("PKB's router is part of the function: a gate (its weight and bias) scores the tokens, then softmax and "
              "top-k pick the experts; pkb-env draws the routing jointly over the ranks and passes it (topk_idx, "
              "topk_weights, with idle ranks and empty experts as edge cases), and its experts are weight tensors "
              "rather than nn.Linear modules")
MOE_UNMAPPED = "PKB's gate weights cannot be made from a routing drawn before the call"

TOP_P = ("PKB's reference filters top-k and top-p in the logits' dtype with torch's sort, so ties at the cut and "
         "bfloat16 rounding decide which tokens survive; pkb-env filters in float32 and states the tie rule (the "
         "lower vocabulary index first), with tied logits drawn")
