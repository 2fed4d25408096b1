import torch
import torch.distributed as dist


def _rotations(quats):
    """Unit quaternions (w, x, y, z) to rotation matrices (..., 3, 3)."""
    w, x, y, z = (quats / quats.norm(dim=-1, keepdim=True)).unbind(-1)
    return torch.stack([1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y),
                        2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x),
                        2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)], -1).reshape(*w.shape, 3, 3)


def _project(means, quats, scales, viewmats, Ks, width, height, eps2d, near_plane, far_plane):
    """gsplat's projection of N Gaussians into C pinhole cameras (every step in the inputs' dtype): radii (C, N, 2),
    means2d (C, N, 2), depths (C, N), conics (C, N, 3), and which pairs are visible (C, N)."""
    M = _rotations(quats) * scales[:, None, :]
    covars = M @ M.transpose(-1, -2)                                             # (N, 3, 3)
    R, t = viewmats[:, :3, :3], viewmats[:, :3, 3]
    means_c = torch.einsum("cij,nj->cni", R, means) + t[:, None, :]             # (C, N, 3)
    covars_c = torch.einsum("cij,njk,clk->cnil", R, covars, R)
    tx, ty, tz = means_c.unbind(-1)
    fx, fy, cx, cy = (v[:, None] for v in (Ks[:, 0, 0], Ks[:, 1, 1], Ks[:, 0, 2], Ks[:, 1, 2]))
    tan_x, tan_y = 0.5 * width / fx, 0.5 * height / fy
    cx_tz = tz * torch.minimum(torch.maximum(tx / tz, -(cx / fx + 0.3 * tan_x)), (width - cx) / fx + 0.3 * tan_x)
    cy_tz = tz * torch.minimum(torch.maximum(ty / tz, -(cy / fy + 0.3 * tan_y)), (height - cy) / fy + 0.3 * tan_y)
    zero = torch.zeros_like(tz)
    J = torch.stack([fx / tz, zero, -fx * cx_tz / (tz * tz), zero, fy / tz, -fy * cy_tz / (tz * tz)],
                    -1).reshape(*tz.shape, 2, 3)
    cov2d = J @ covars_c @ J.transpose(-1, -2) + eps2d * torch.eye(2, dtype=means.dtype, device=means.device)
    a, b, c = cov2d[..., 0, 0], (cov2d[..., 0, 1] + cov2d[..., 1, 0]) / 2, cov2d[..., 1, 1]
    det = (a * c - cov2d[..., 0, 1] * cov2d[..., 1, 0]).clamp(min=1e-10)
    conics = torch.stack([c / det, -b / det, a / det], -1)
    means2d = torch.stack([fx * tx / tz + cx, fy * ty / tz + cy], -1)
    radii = torch.ceil(3.33 * torch.sqrt(torch.stack([a, c], -1)))
    visible = (tz > near_plane) & (tz < far_plane) & (means2d + radii > 0).all(-1) \
        & (means2d[..., 0] - radii[..., 0] < width) & (means2d[..., 1] - radii[..., 1] < height)
    return radii, means2d, tz, conics, visible


@torch.no_grad()
def solution(means, quats, scales, opacities, colors, viewmats, Ks, image_width, image_height, eps2d=0.3,
             near_plane=0.01, far_plane=1e10, camera_model="pinhole", group=None):
    """gsplat's distributed projection: every rank of `group` holds N Gaussians and one camera; every rank
    projects its Gaussians into every rank's camera and sends each camera's owner the Gaussians visible there.

    means (N, 3), quats (N, 4), scales (N, 3), opacities (N,), colors (N, 3): this rank's Gaussians (global ids
    rank * N + i); viewmats (1, 4, 4), Ks (1, 3, 3): its camera. The projection runs in float64 from the
    inputs, so visibility (depth in (near_plane, far_plane), the radius box overlapping the image) and the
    radii (ceil(3.33 sqrt(diag of the 2D covariance + eps2d))) are well defined. Every rank returns, for its
    own camera, the visible Gaussians of every rank, ordered by global id: camera_ids (n,) int32 (always 0,
    this rank's camera), gaussian_ids (n,) int32, radii (n, 2) int32, means2d (n, 2), depths (n,), conics
    (n, 3) float32, opacities (n,), colors (n, 3) in the inputs' dtype. The counts are read on the host.
    """
    world, me = dist.get_world_size(group), dist.get_rank(group)
    n, device = means.shape[0], means.device
    cameras = viewmats.new_empty((world, 4, 4))
    intrinsics = Ks.new_empty((world, 3, 3))
    dist.all_gather_into_tensor(cameras, viewmats.contiguous(), group=group)
    dist.all_gather_into_tensor(intrinsics, Ks.contiguous(), group=group)
    radii, means2d, depths, conics, visible = _project(
        means.double(), quats.double(), scales.double(), cameras.double(), intrinsics.double(),
        image_width, image_height, eps2d, near_plane, far_plane)

    camera, gaussian = torch.where(visible)                           # camera-major: grouped by destination rank
    ids = torch.stack([torch.zeros_like(gaussian), gaussian + me * n, *radii[camera, gaussian].long().unbind(-1)],
                      -1).int()
    floats = torch.cat([means2d[camera, gaussian], depths[camera, gaussian, None], conics[camera, gaussian],
                        opacities[gaussian, None].double(), colors[gaussian].double()], -1).float()
    send = torch.bincount(camera, minlength=world)
    recv = torch.empty_like(send)
    dist.all_to_all_single(recv, send, group=group)
    send, recv = send.tolist(), recv.tolist()
    got_ids = ids.new_empty((sum(recv), ids.shape[1]))
    got_floats = floats.new_empty((sum(recv), floats.shape[1]))
    dist.all_to_all_single(got_ids, ids, recv, send, group=group)
    dist.all_to_all_single(got_floats, floats, recv, send, group=group)
    return (got_ids[:, 0].contiguous(), got_ids[:, 1].contiguous(), got_ids[:, 2:].contiguous(),
            got_floats[:, 0:2].contiguous(), got_floats[:, 2].contiguous(), got_floats[:, 3:6].contiguous(),
            got_floats[:, 6].to(opacities.dtype), got_floats[:, 7:10].to(colors.dtype))
