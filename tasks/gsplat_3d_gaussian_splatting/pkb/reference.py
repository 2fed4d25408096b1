import torch.distributed as dist

from pkb_env.tasks.gsplat_3d_gaussian_splatting import reference


def solution(means, quats, scales, opacities, colors, viewmats, Ks, image_width, image_height, eps2d=0.3,
             near_plane=0.01, far_plane=1e10, camera_model="pinhole", group=None):
    """PKB 61 as PKB states it (tasks/gsplat_3d_gaussian_splatting/pkb/spec.py): the task's projection
    (tasks/gsplat_3d_gaussian_splatting/reference.py) with PKB's gaussian_ids, each Gaussian's index on the rank
    holding it plus this rank's offset (rank * N), in the task's row order."""
    out = reference.solution(means, quats, scales, opacities, colors, viewmats, Ks, image_width, image_height, eps2d,
                             near_plane, far_plane, camera_model, group)
    n = means.shape[0]
    return (out[0], out[1] % n + dist.get_rank(group) * n, *out[2:])
