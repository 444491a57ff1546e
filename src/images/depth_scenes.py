"""Procedurally generated indoor-like scenes with their exact per-pixel depth: the offline stand-in for NYU-Depth V2
in the DivergenceRadius depth task (Liu et al., "Robustness of Vision Foundation Models to Common Perturbations",
arXiv:2604.14973, App. D–F), its data module, tests and smoke runs.

A scene is ray-traced through a pinhole camera at the origin looking along +z (image rows go down = +y, focal length
``FOCAL`` image widths, i.e. a 53° field of view): a floor (the plane y = h, the camera h above it), a back wall
(z = z_wall) and two side walls (x = −x_left, x = x_right) — a room whose walls enclose every ray, so every pixel has a
finite depth — and up to ``SPHERES`` spheres and ``BOXES`` axis-aligned boxes standing on the floor. Every surface
carries a solid 3-D checker texture of its own tile size and two colours, and Lambertian shading from one directional
light plus ambient light: the perspective shrinking of the floor's tiles, the shading of the spheres and boxes and
the occlusions are the depth cues a network can learn. The depth of a pixel is the z coordinate of the nearest
surface along its ray (z-depth, metres, as NYU-Depth V2's), at most ``Z_WALL[1]`` = 9.5 < 10 m (NYU's range).

Images are rendered at ``supersample`` × the size and averaged ``supersample`` × ``supersample`` (anti-aliasing);
the depth map is averaged likewise (a pixel on an edge gets the mean depth of its sub-pixels). Scene i of a seed is a
pure function of (seed, i) (its own generator, :func:`~src.utils.numerics.mix_seed`), so the first k scenes of a
larger set are those of a smaller one; rendering is batched (``chunk`` scenes at a time): 1000 scenes of 64 px take
1.7 s on an idle 2-core machine.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from ..utils.checks import check_image_size, check_int
from ..utils.numerics import mix_seed

__all__ = [
    "BOXES",
    "FOCAL",
    "MAX_SCENE_DEPTH",
    "SPHERES",
    "depth_scenes",
    "pinhole_floor_depth",
    "render_scenes",
    "scene_parameters",
]

#: focal length in image widths (pixel rays (u, v, 1) with u, v in [−1/(2·FOCAL), 1/(2·FOCAL)])
FOCAL = 1.0
#: object slots per scene (each present with probability ``PRESENT``)
SPHERES, BOXES, PRESENT = 3, 2, 0.75
#: ranges (metres) of the camera height above the floor, the back wall and the side walls
HEIGHT, Z_WALL, X_WALL = (1.0, 1.8), (6.0, 9.5), (1.5, 3.5)
#: the largest depth a scene can hold: the farthest back wall encloses every ray
MAX_SCENE_DEPTH = Z_WALL[1]


def _uniform(g: torch.Generator, lo: float, hi: float, *shape: int) -> Tensor:
    return lo + (hi - lo) * torch.rand(*shape, generator=g, dtype=torch.float64)


def scene_parameters(n: int, seed: int = 0) -> dict[str, Tensor]:
    """The random draws of scenes 0 … n − 1 of ``seed`` (scene i from a generator seeded by (seed, i)): room
    (``height``, ``z_wall``, ``x_left``, ``x_right``), light direction ``light`` (unit, towards the light, from
    above), and per surface slot (floor, back wall, left wall, right wall, then the spheres, then the boxes) its
    ``tile`` size and two ``colors``; spheres (``sphere_center``, ``sphere_radius``, ``sphere_on``) resting on the
    floor; boxes (``box_lo``, ``box_hi`` corners, ``box_on``) standing on it, all in front of the camera. float64."""
    n = check_int(n, "n", 0, meaning="scenes")
    keys = ("height", "z_wall", "x_left", "x_right", "light", "tile", "colors", "sphere_center", "sphere_radius",
            "sphere_on", "box_lo", "box_hi", "box_on")  # fmt: skip
    out: dict[str, list[Tensor]] = {k: [] for k in keys}
    slots = 4 + SPHERES + BOXES
    for i in range(n):
        g = torch.Generator().manual_seed(mix_seed(seed, i))
        h = _uniform(g, *HEIGHT, 1)
        out["height"].append(h)
        out["z_wall"].append(_uniform(g, *Z_WALL, 1))
        out["x_left"].append(_uniform(g, *X_WALL, 1))
        out["x_right"].append(_uniform(g, *X_WALL, 1))
        light = torch.cat([_uniform(g, -1.0, 1.0, 1), _uniform(g, -1.6, -0.6, 1), _uniform(g, -1.0, 0.2, 1)])
        out["light"].append(light / light.norm())
        out["tile"].append(_uniform(g, 0.25, 0.9, slots))
        out["colors"].append(_uniform(g, 0.12, 0.95, slots, 2, 3))
        r = _uniform(g, 0.25, 0.8, SPHERES)
        cz = _uniform(g, 2.0, 6.0, SPHERES)
        cx = _uniform(g, -0.4, 0.4, SPHERES) * cz  # inside the field of view (|x / z| < 0.5)
        out["sphere_center"].append(torch.stack([cx, h - r, cz], -1))  # resting on the floor y = h
        out["sphere_radius"].append(r)
        out["sphere_on"].append(torch.rand(SPHERES, generator=g) < PRESENT)
        size = _uniform(g, 0.4, 1.3, BOXES, 3)
        z0 = _uniform(g, 1.8, 5.5, BOXES)
        x0 = _uniform(g, -0.45, 0.35, BOXES) * z0
        lo = torch.stack([x0, h.expand(BOXES) - size[:, 1], z0], -1)  # standing on the floor
        out["box_lo"].append(lo)
        out["box_hi"].append(torch.stack([x0 + size[:, 0], h.expand(BOXES), z0 + size[:, 2]], -1))
        out["box_on"].append(torch.rand(BOXES, generator=g) < PRESENT)
    if n == 0:
        return {k: torch.zeros(0) for k in keys}
    scalars = ("height", "z_wall", "x_left", "x_right")  # drawn as (1,): one value per scene
    return {k: torch.cat(v) if k in scalars else torch.stack(v) for k, v in out.items()}


def _rays(size: int) -> Tensor:
    """(size², 3) float32 rays (u, v, 1) through the pixel centres, row-major; t along a ray is the z-depth."""
    c = (torch.arange(size, dtype=torch.float64) + 0.5) / size - 0.5
    v, u = torch.meshgrid(c / FOCAL, c / FOCAL, indexing="ij")
    return torch.stack([u.reshape(-1), v.reshape(-1), torch.ones(size * size, dtype=torch.float64)], -1).float()


def _plane(d: Tensor, axis: int, offset: Tensor) -> Tensor:
    """t (B, P) where rays d (P, 3) meet the plane coordinate[axis] = offset (B,), inf where behind or parallel."""
    t = offset[:, None] / d[None, :, axis]
    return torch.where(t > 1e-6, t, torch.inf)


def _sphere(d: Tensor, center: Tensor, radius: Tensor, on: Tensor) -> Tensor:
    """Nearest positive t (B, P) of |t·d − c|² = r² (inf where missed or the slot is empty)."""
    dd = (d * d).sum(-1)[None]  # (1, P)
    dc = (center[:, None, :] * d[None]).sum(-1)  # (B, P); elementwise, so a scene does not depend on its batch
    disc = dc * dc - dd * ((center * center).sum(-1) - radius * radius)[:, None]
    t = (dc - disc.clamp_min(0).sqrt()) / dd
    return torch.where((disc >= 0) & (t > 1e-6) & on[:, None], t, torch.inf)


def _slabs(inv: Tensor, lo: Tensor, hi: Tensor) -> tuple[Tensor, Tensor]:
    """Entry and exit distances (broadcast shape, last axis x, y, z) of rays with inverse directions ``inv`` through
    the slabs lo <= coordinate <= hi of each axis (NaN, from 0 · inf on a slab boundary, counts as inside)."""
    t1, t2 = lo * inv, hi * inv
    near = torch.nan_to_num(torch.minimum(t1, t2), nan=-torch.inf)
    far = torch.nan_to_num(torch.maximum(t1, t2), nan=torch.inf)
    return near, far


def _box(inv: Tensor, lo: Tensor, hi: Tensor, on: Tensor) -> Tensor:
    """Slab test: entry t (B, P) of each box (inf where missed or the slot is empty)."""
    near, far = _slabs(inv[None], lo[:, None], hi[:, None])
    t_near = near.amax(-1)
    hit = (t_near <= far.amin(-1)) & (t_near > 1e-6) & on[:, None]
    return torch.where(hit, t_near, torch.inf)


def render_scenes(params: dict[str, Tensor], image_size: int = 64, supersample: int = 2) -> tuple[Tensor, Tensor]:
    """Ray-trace :func:`scene_parameters` → (images (B, 3, S, S) float32 in [0, 1], depth (B, 1, S, S) float32
    z-depth in metres), rendered at ``supersample`` · S and averaged down (module docstring). A z-buffer over the
    surfaces keeps each ray's nearest hit and its surface slot; normals, texture and shading are computed once, for
    the winning slot."""
    image_size = check_image_size(image_size)
    supersample = check_int(supersample, "supersample", 1, meaning="sub-pixels per side")
    size = image_size * supersample
    p = {k: v.float() if v.is_floating_point() else v for k, v in params.items()}
    d = _rays(size)  # (P, 3)
    inv = 1.0 / d  # u or v = 0 gives ±inf, which the slabs handle
    b = p["height"].shape[0]
    hits = [
        _plane(d, 1, p["height"]),  # floor (y points down)
        _plane(d, 2, p["z_wall"]),  # back wall
        _plane(d, 0, -p["x_left"]),  # left wall
        _plane(d, 0, p["x_right"]),  # right wall
    ]
    hits += [
        _sphere(d, p["sphere_center"][:, s], p["sphere_radius"][:, s], p["sphere_on"][:, s]) for s in range(SPHERES)
    ]
    hits += [_box(inv, p["box_lo"][:, k], p["box_hi"][:, k], p["box_on"][:, k]) for k in range(BOXES)]
    best, slot = torch.stack(hits).min(0)  # (B, P): nearest surface (the room encloses every ray: finite)
    point = best[..., None] * d[None]  # (B, P, 3)
    # normals of the winning surfaces: the room's planes, the spheres' radial ones, the boxes' entered faces
    rows = torch.arange(b)[:, None]
    plane_n = torch.tensor([[0.0, -1.0, 0.0], [0.0, 0.0, -1.0], [1.0, 0.0, 0.0], [-1.0, 0.0, 0.0]])
    normal = plane_n[slot.clamp_max(3)]
    s_idx = (slot - 4).clamp(0, SPHERES - 1)
    center, radius = p["sphere_center"][rows, s_idx], p["sphere_radius"][rows, s_idx]
    is_sphere = (slot >= 4) & (slot < 4 + SPHERES)
    normal = torch.where(is_sphere[..., None], (point - center) / radius[..., None], normal)
    k_idx = (slot - 4 - SPHERES).clamp(0, BOXES - 1)
    near, _ = _slabs(inv[None], p["box_lo"][rows, k_idx], p["box_hi"][rows, k_idx])
    axis = near.argmax(-1)  # the face the ray entered through
    face = F.one_hot(axis, 3).float() * -torch.sign(d[None].expand(b, -1, -1)).gather(-1, axis[..., None])
    normal = torch.where((slot >= 4 + SPHERES)[..., None], face, normal)
    tile = p["tile"].gather(1, slot)[..., None]
    parity = torch.floor(point / tile).sum(-1).remainder(2).long()  # solid 3-D checker
    colors = p["colors"][rows, slot, parity]  # (B, P, 3)
    lambert = (normal * p["light"][:, None]).sum(-1).clamp_min(0.0)
    rgb = colors * (0.35 + 0.65 * lambert)[..., None]
    image = rgb.reshape(b, size, size, 3).permute(0, 3, 1, 2)
    depth = best.reshape(b, 1, size, size)
    if supersample > 1:
        image, depth = F.avg_pool2d(image, supersample), F.avg_pool2d(depth, supersample)
    return image.clamp(0.0, 1.0).contiguous(), depth.contiguous()


def depth_scenes(
    n: int, image_size: int = 64, seed: int = 0, *, supersample: int = 2, chunk: int = 64
) -> tuple[Tensor, Tensor]:
    """``n`` scenes of ``seed`` (module docstring): (images (n, 3, S, S) float32 in [0, 1], depth (n, 1, S, S)
    float32 metres in (0, 9.5]), rendered ``chunk`` scenes at a time."""
    n = check_int(n, "n", 0, meaning="scenes")
    chunk = check_int(chunk, "chunk", 1, meaning="scenes rendered at once")
    params = scene_parameters(n, seed)
    images, depths = [], []
    for start in range(0, n, chunk):
        part = {k: v[start : start + chunk] for k, v in params.items()}
        x, z = render_scenes(part, image_size, supersample)
        images.append(x)
        depths.append(z)
    if not images:
        s = check_image_size(image_size)
        return torch.zeros(0, 3, s, s), torch.zeros(0, 1, s, s)
    return torch.cat(images), torch.cat(depths)


def pinhole_floor_depth(height: float, row: int, image_size: int) -> float:
    """Closed form of the floor's depth at pixel row ``row`` (0 = top) of an ``image_size`` image: the ray
    (u, v, 1) with v = ((row + 0.5) / S − 0.5) / FOCAL meets y = height at z = height / v (for v > 0). The check of
    the renderer (tests)."""
    v = ((row + 0.5) / image_size - 0.5) / FOCAL
    return height / v if v > 0 else math.inf
