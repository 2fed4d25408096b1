import torch
import torch.distributed as dist

FP8_MAX = 448.0  # float8_e4m3fn's largest finite value


def solution(flat_param_shard: torch.Tensor, amax_history: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """FP8 parameter all-gather with delayed scaling (Transformer Engine style, as FSDP's float8 all-gather
    ships it). Every rank holds its shard (P,) of the flat parameters (W*P,) and the bf16 history of its
    shard's past amaxes (16,), oldest first. The history is rolled one place to the front and its last
    entry set to max|flat_param_shard| (rounded to bf16); the scale is s = max(max(history), 1e-12) / 448
    in fp32; the shard travels as the fp8 codes q = float8_e4m3fn(x / s) with its scale. Every rank returns
    the full parameters (W*P,) in the shard's dtype, block r being rank r's q * s, and its updated history."""
    history = amax_history.roll(-1)
    history[-1] = flat_param_shard.abs().max()
    scale = history.max().float().clamp(min=1e-12) / FP8_MAX
    codes = (flat_param_shard.float() / scale).to(torch.float8_e4m3fn)
    world = dist.get_world_size()
    all_codes = torch.empty(world * codes.numel(), dtype=torch.uint8, device=codes.device)
    dist.all_gather_into_tensor(all_codes, codes.view(torch.uint8))     # gloo has no fp8: move the bytes
    all_scales = scale.new_empty(world)
    dist.all_gather_into_tensor(all_scales, scale.reshape(1))
    values = all_codes.view(torch.float8_e4m3fn).view(world, -1).float() * all_scales.unsqueeze(1)
    return values.flatten().to(flat_param_shard.dtype), history
