"""The synthetic depth scenes (src/images/depth_scenes.py): exact depth against the pinhole closed form, seeded
and prefix-stable, in NYU's range, seconds to make."""

from __future__ import annotations

import torch

from src.images.depth_scenes import MAX_SCENE_DEPTH, depth_scenes, pinhole_floor_depth, render_scenes, scene_parameters


def test_empty_room_depth_is_the_pinhole_closed_form() -> None:
    """Without spheres and boxes, the centre column's lower rows see the floor at z = h / v and its upper rows the
    back wall at z = z_wall (the side walls are 1.5 m+ away sideways, hit only beyond 3·S metres there). Rendered in
    float32: equal to 1e-5 relative."""
    s = 32
    params = scene_parameters(3, seed=5)
    params["sphere_on"][:] = False
    params["box_on"][:] = False
    _, depth = render_scenes(params, s, supersample=1)
    col = s // 2
    for b in range(3):
        h, z_wall = float(params["height"][b]), float(params["z_wall"][b])
        for row in range(s):
            floor = pinhole_floor_depth(h, row, s)
            expect = min(floor, z_wall)
            assert abs(float(depth[b, 0, row, col]) - expect) <= 1e-5 * expect, (b, row)


def test_scenes_are_seeded_prefix_stable_and_in_range() -> None:
    """Scene i depends on (seed, i) only: the first 4 of 10 scenes are the 4 scenes; another seed differs. Images in
    [0, 1], depths finite in (0, 9.5] (the room encloses every ray)."""
    x10, z10 = depth_scenes(10, 24, seed=2)
    x4, z4 = depth_scenes(4, 24, seed=2, chunk=3)
    assert torch.equal(x10[:4], x4) and torch.equal(z10[:4], z4)
    assert not torch.equal(depth_scenes(4, 24, seed=3)[1], z4)
    assert x10.shape == (10, 3, 24, 24) and z10.shape == (10, 1, 24, 24)
    assert float(x10.min()) >= 0.0 and float(x10.max()) <= 1.0
    assert bool(torch.isfinite(z10).all()) and float(z10.min()) > 0.0 and float(z10.max()) <= MAX_SCENE_DEPTH + 1e-4
    assert float(z10.std()) > 0.5  # scenes hold depth structure, not one plane
