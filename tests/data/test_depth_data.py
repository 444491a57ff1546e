"""Depth data modules (issue 28): the synthetic scenes, and NYU-Depth V2 read from a tiny file written in the official
layout (nyu_depth_v2_labeled.mat is MATLAB v7.3 = HDF5; MATLAB is column-major, so h5py sees images (N, 3, W, H)
uint8 and depths (N, W, H) float32; splits.mat is MATLAB v5 with one-based trainNdxs / testNdxs), from an extracted
folder, and failing fast naming the missing file."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
from scipy.io import savemat

from src.data import DatasetNotFoundError, NYUDepthV2DataModule, SyntheticDepthDataModule
from src.data.nyu_depth import EIGEN_CROP, prepare_frame, read_labeled_mat, read_splits
from src.images.depth_scenes import depth_scenes
from src.utils.numerics import mix_seed

H, W, N = 6, 8, 5  # tiny frames (not 480 x 640: no Eigen crop), 5 of them


def _frames() -> tuple[torch.Tensor, torch.Tensor]:
    """Frames whose every value tells its (frame, channel, row, column): a transposition shows."""
    n, c, r, q = torch.meshgrid(torch.arange(N), torch.arange(3), torch.arange(H), torch.arange(W), indexing="ij")
    rgb = (n * 50 + c * 10 + r * W + q).to(torch.uint8)  # < 256
    depth = 0.5 + n[:, 0].float() + r[:, 0].float() / 10 + q[:, 0].float() / 100
    return rgb, depth


def _write_official(folder: Path, train=(1, 3, 4), test=(2, 5)) -> Path:
    """nyu_depth_v2_labeled.mat as MATLAB writes it (HDF5, each frame transposed) and splits.mat (one-based column
    vectors, as MATLAB saves them)."""
    rgb, depth = _frames()
    mat = folder / "nyu_depth_v2_labeled.mat"
    with h5py.File(mat, "w") as f:
        f["images"] = rgb.permute(0, 1, 3, 2).numpy()  # (N, 3, W, H)
        f["depths"] = depth.transpose(1, 2).numpy().astype(np.float32)  # (N, W, H)
    savemat(
        folder / "splits.mat",
        {"trainNdxs": np.array(train, float)[:, None], "testNdxs": np.array(test, float)[:, None]},
    )
    return mat


def test_labeled_mat_reads_back_the_frames(tmp_path: Path) -> None:
    rgb, depth = _frames()
    mat = _write_official(tmp_path)
    got = read_labeled_mat(mat, [4, 0])
    assert got[0][0].shape == (3, H, W) and got[0][1].shape == (H, W)
    assert torch.equal(got[0][0], rgb[4]) and torch.equal(got[1][0], rgb[0])
    assert torch.equal(got[0][1], depth[4]) and torch.equal(got[1][1], depth[0])
    train, test = read_splits(tmp_path / "splits.mat")
    assert train.tolist() == [0, 2, 3] and test.tolist() == [1, 4]  # one-based -> zero-based


def test_module_serves_the_official_test_split(tmp_path: Path) -> None:
    """The test split is the frames of testNdxs, each prepared as prepare_frame does (6 x 6 centre square resized to
    16 px); the training frames split into train + val (1 of 3 with val_fraction 0.3)."""
    rgb, depth = _frames()
    _write_official(tmp_path)
    dm = NYUDepthV2DataModule(path=str(tmp_path), image_size=16, val_fraction=0.3, batch_size=2)
    dm.setup()
    assert len(dm.test_dataset) == 2 and len(dm.train_dataset) == 2 and len(dm.val_dataset) == 1
    for k, frame in enumerate((1, 4)):
        x, z, index = dm.test_dataset[k]
        want_x, want_z = prepare_frame(rgb[frame], depth[frame], 16)
        assert index == k and torch.equal(x, want_x.float() / 255) and torch.equal(z, want_z)
    x, z, idx = next(iter(dm.test_dataloader()))
    assert x.shape == (2, 3, 16, 16) and z.shape == (2, 1, 16, 16) and x.dtype == z.dtype == torch.float32


def test_prepare_frame_crops_eigen_then_centre() -> None:
    """A 480 x 640 frame: Eigen's crop [45:471, 41:601] (426 x 560), then the centred 426 x 426 square (columns
    41 + 67 ... ), resized; nearest for depth keeps the corner values."""
    depth = torch.zeros(480, 640)
    t, b, lft, r = EIGEN_CROP
    side = b - t
    left = lft + (r - lft - side) // 2
    depth[t:b, left : left + side] = 2.0  # exactly the square that remains
    rgb = torch.zeros(3, 480, 640, dtype=torch.uint8)
    x, z = prepare_frame(rgb, depth, 32)
    assert x.shape == (3, 32, 32) and z.shape == (1, 32, 32) and bool((z == 2.0).all())


def test_missing_files_fail_fast_naming_them(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    with pytest.raises(DatasetNotFoundError, match=r"nyu_depth_v2_labeled\.mat.*Fix: download"):
        NYUDepthV2DataModule(path=str(missing)).setup()
    _write_official(tmp_path)
    (tmp_path / "splits.mat").unlink()
    with pytest.raises(DatasetNotFoundError, match=r"splits\.mat does not exist.*data\.split_file"):
        NYUDepthV2DataModule(path=str(tmp_path / "nyu_depth_v2_labeled.mat")).setup()


def test_extracted_folder_layout(tmp_path: Path) -> None:
    """train/ and test/ with rgb/<name>.png and depth/<name>.png (16-bit millimetres): depth in metres."""
    from PIL import Image

    rgb, depth = _frames()
    for split, frames in (("train", (0, 1, 2)), ("test", (3,))):
        for sub in ("rgb", "depth"):
            (tmp_path / split / sub).mkdir(parents=True)
        for i in frames:
            Image.fromarray(rgb[i].permute(1, 2, 0).numpy()).save(tmp_path / split / "rgb" / f"{i:04d}.png")
            mm = (depth[i] * 1000).round().numpy().astype(np.uint16)
            Image.fromarray(mm).save(tmp_path / split / "depth" / f"{i:04d}.png")
    dm = NYUDepthV2DataModule(path=str(tmp_path), image_size=16, val_fraction=0.3)
    dm.setup()
    x, z, _ = dm.test_dataset[0]
    want_x, want_z = prepare_frame(rgb[3], depth[3], 16)
    assert torch.equal(x, want_x.float() / 255) and torch.allclose(z, want_z, atol=5e-4)  # millimetre rounding


def test_synthetic_module_splits_are_seeded_scene_streams() -> None:
    dm = SyntheticDepthDataModule(image_size=16, num_train=6, num_val=3, num_test=2, batch_size=4, seed=7)
    dm.setup()
    x, z = dm.test_dataset.base.tensors
    want_x, want_z = depth_scenes(2, 16, mix_seed(7, 2))
    assert torch.equal(x, want_x) and torch.equal(z, want_z)
    xb, zb, idx = next(iter(dm.train_dataloader()))
    assert xb.shape == (4, 3, 16, 16) and zb.shape == (4, 1, 16, 16) and idx.dtype == torch.int64
    assert dm.probe_images("val").shape == (3, 3, 16, 16)
