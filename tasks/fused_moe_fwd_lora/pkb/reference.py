from pkb_env.tasks._pkb_moe import forward


def solution(hidden_states, gate_weight, gate_bias, w_gate, b_gate, w_up, b_up, w_down, b_down, lora_gate_A,
             lora_gate_B, lora_up_A, lora_up_B, lora_down_A, lora_down_B, num_experts, top_k, group):
    """PKB 32 as PKB states it (tasks/_pkb_moe.py): as PKB 31, each rank's MLP with a LoRA adapter on its three
    projections."""
    w = {"w_gate": w_gate, "b_gate": b_gate, "w_up": w_up, "b_up": b_up, "w_down": w_down, "b_down": b_down,
         "lora_gate_A": lora_gate_A, "lora_gate_B": lora_gate_B, "lora_up_A": lora_up_A, "lora_up_B": lora_up_B,
         "lora_down_A": lora_down_A, "lora_down_B": lora_down_B}
    return forward(hidden_states, gate_weight, gate_bias, w, num_experts, top_k, group, lora=True)
