"""NYU-Depth V2 (Silberman et al., ECCV 2012), the depth data set of the DivergenceRadius paper (Liu et al.,
arXiv:2604.14973, Table 4: 654 test images; App. F), read from disk — never downloaded here.

Two layouts of ``path``:

* the official labelled file ``nyu_depth_v2_labeled.mat`` (or a folder holding it): MATLAB v7.3, i.e. HDF5, read
  with h5py. MATLAB stores arrays column-major, so h5py sees the transposed shapes: ``images`` (N, 3, 640, 480)
  uint8 and ``depths`` (N, 640, 480) float32 metres for 1449 frames of 480 × 640; frame i is
  ``images[i].transpose(0, 2, 1)`` (3, 480, 640) and ``depths[i].T`` (480, 640). The official train/test split is
  the toolbox's ``splits.mat`` (MATLAB v5: ``trainNdxs`` 795 and ``testNdxs`` 654 one-based indices), looked for
  beside the .mat file (or ``split_file=``);
* an extracted folder: ``<path>/train`` and ``<path>/test``, each with ``rgb/<name>.png`` (8-bit RGB) and
  ``depth/<name>.png`` (16-bit, millimetres; 0 = no depth) of the same names.

A missing file or folder raises :class:`~src.data.torchvision_sets.DatasetNotFoundError` at once, naming it and the
fix (the download addresses), before anything else is built.

Each frame is cut to Eigen et al.'s crop (rows 45–470, columns 41–600 of 480 × 640: no white border, valid
Kinect depth; other frame sizes are not cropped), then to its centred square, and resized to ``image_size``
(images: bilinear with antialiasing; depth: nearest, so no depth is invented across edges). The training split
gives ``val_fraction`` of its frames (seeded) to validation; the test split is the official one.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from ..utils.checks import check_fraction, check_int
from ..utils.numerics import mix_seed
from .common import IndexedDataset, SplitsDataModule
from .depth import DepthTensors
from .torchvision_sets import DatasetNotFoundError

__all__ = [
    "EIGEN_CROP",
    "NYU_FILE",
    "NYUDepthV2DataModule",
    "SPLITS_FILE",
    "prepare_frame",
    "read_labeled_mat",
    "read_splits",
]

NYU_FILE = "nyu_depth_v2_labeled.mat"
SPLITS_FILE = "splits.mat"
NYU_URL = "http://horatio.cs.nyu.edu/mit/silberman/nyu_depth_v2/nyu_depth_v2_labeled.mat"
SPLITS_URL = "http://horatio.cs.nyu.edu/mit/silberman/indoor_seg_sup/splits.mat"
#: (top, bottom, left, right) of Eigen et al.'s evaluation crop of a 480 × 640 frame (NeurIPS 2014)
EIGEN_CROP = (45, 471, 41, 601)
FRAME = (480, 640)


def _fix(path: Path) -> str:
    return (
        f"Fix: download {NYU_FILE} (2.8 GB, {NYU_URL}) and {SPLITS_FILE} ({SPLITS_URL}) where there is network, put "
        f"them in one folder and pass data.path=<that folder or the .mat file> (now {path}); or pass an extracted "
        "folder with train/ and test/, each holding rgb/<name>.png and depth/<name>.png (16-bit millimetres)"
    )


def read_splits(path: str | Path) -> tuple[Tensor, Tensor]:
    """(train, test) zero-based frame indices of the toolbox's ``splits.mat`` (one-based ``trainNdxs`` /
    ``testNdxs``)."""
    from scipy.io import loadmat

    mat = loadmat(str(path))
    if "trainNdxs" not in mat or "testNdxs" not in mat:
        raise ValueError(f"{path} holds no trainNdxs / testNdxs (the NYU-Depth V2 toolbox's splits.mat): {sorted(mat)}")
    train, test = (
        torch.from_numpy(np.asarray(mat[k]).reshape(-1).astype(np.int64) - 1) for k in ("trainNdxs", "testNdxs")
    )
    return train, test


def read_labeled_mat(path: str | Path, indices: Tensor | list[int]) -> list[tuple[Tensor, Tensor]]:
    """Frames ``indices`` of ``nyu_depth_v2_labeled.mat`` as (RGB uint8 (3, H, W), depth float32 (H, W) metres)
    (the transposed HDF5 layout of the module docstring, undone)."""
    import h5py

    with h5py.File(str(path), "r") as f:
        for key in ("images", "depths"):
            if key not in f:
                raise ValueError(f"{path} has no {key!r} dataset: not NYU-Depth V2's labelled .mat ({sorted(f)})")
        images, depths = f["images"], f["depths"]
        n = images.shape[0]
        if images.ndim != 4 or images.shape[1] != 3 or depths.shape != (n, *images.shape[2:]):
            raise ValueError(
                f"{path}: expected images (N, 3, W, H) and depths (N, W, H) (MATLAB's transposed layout), got "
                f"{images.shape} and {depths.shape}"
            )
        out = []
        for i in (int(i) for i in indices):
            if not 0 <= i < n:
                raise ValueError(f"{path} holds {n} frames; frame index {i} (a split file of another data set?)")
            rgb = torch.from_numpy(np.asarray(images[i])).permute(0, 2, 1).contiguous()
            depth = torch.from_numpy(np.asarray(depths[i], dtype=np.float32)).T.contiguous()
            out.append((rgb, depth))
    return out


def _read_png_pair(rgb_file: Path, depth_file: Path) -> tuple[Tensor, Tensor]:
    from PIL import Image

    with Image.open(rgb_file) as im:
        rgb = torch.from_numpy(np.asarray(im.convert("RGB"), dtype=np.uint8).copy()).permute(2, 0, 1)
    with Image.open(depth_file) as im:
        depth = torch.from_numpy(np.asarray(im, dtype=np.float32) / 1000.0)  # 16-bit millimetres -> metres
    if depth.shape != rgb.shape[1:]:
        raise ValueError(f"{depth_file} is {tuple(depth.shape)}, its image {rgb_file} {tuple(rgb.shape[1:])}")
    return rgb, depth


def prepare_frame(rgb: Tensor, depth: Tensor, image_size: int, eigen_crop: bool = True) -> tuple[Tensor, Tensor]:
    """A frame → (uint8 (3, S, S), float32 (1, S, S)): Eigen et al.'s crop (480 × 640 frames, when ``eigen_crop``),
    the centred square, resized (image: bilinear, antialiased; depth: nearest)."""
    if eigen_crop and tuple(depth.shape) == FRAME:
        t, b, lft, r = EIGEN_CROP
        rgb, depth = rgb[:, t:b, lft:r], depth[t:b, lft:r]
    h, w = depth.shape
    side = min(h, w)
    top, left = (h - side) // 2, (w - side) // 2
    rgb, depth = rgb[:, top : top + side, left : left + side], depth[top : top + side, left : left + side]
    x = F.interpolate(rgb[None].float(), size=(image_size, image_size), mode="bilinear", antialias=True)
    z = F.interpolate(depth[None, None], size=(image_size, image_size), mode="nearest")
    return x[0].round().clamp(0, 255).to(torch.uint8), z[0]


class NYUDepthV2DataModule(SplitsDataModule):
    """NYU-Depth V2 (module docstring): the official 795 / 654 train / test split of the labelled frames (or an
    extracted folder's train/ and test/), ``val_fraction`` of the training frames held out for validation (seeded),
    frames prepared by :func:`prepare_frame` at ``image_size``. Batches ``(x, depth, index)``; depth in metres."""

    def __init__(
        self,
        path: str = "data/nyu_depth_v2",
        image_size: int = 224,
        split_file: str | None = None,
        val_fraction: float = 0.1,
        eigen_crop: bool = True,
        batch_size: int = 16,
        seed: int = 0,
        num_workers: int = 0,
    ) -> None:
        super().__init__()
        self.path = Path(path).expanduser()
        self.image_size = check_int(image_size, "data.image_size", 16, meaning="pixels per side")
        self.split_file = Path(split_file).expanduser() if split_file else None
        self.val_fraction = check_fraction(val_fraction, "data.val_fraction")
        self.eigen_crop = bool(eigen_crop)
        self.batch_size = batch_size
        self.seed = check_int(seed, "data.seed", fix="set seed=<integer> (data.seed follows it)")
        self.num_workers = num_workers

    def source(self) -> tuple[str, Path, Path | None]:
        """("mat", the .mat file, the splits file) or ("folder", the extracted folder, None); a missing file raises
        DatasetNotFoundError naming it and the fix."""
        p = self.path
        mat = p / NYU_FILE if p.is_dir() else p
        if p.is_dir() and not mat.is_file():
            if (p / "train").is_dir() and (p / "test").is_dir():
                return "folder", p, None
            raise DatasetNotFoundError(
                f"NYU-Depth V2: no {NYU_FILE} and no train/ + test/ folders in {p.resolve()}. {_fix(p)}"
            )
        if not mat.is_file():
            raise DatasetNotFoundError(
                f"NYU-Depth V2: {mat.resolve()} does not exist (neither {NYU_FILE} nor a folder holding it). {_fix(p)}"
            )
        splits = self.split_file or mat.parent / SPLITS_FILE
        if not splits.is_file():
            raise DatasetNotFoundError(
                f"NYU-Depth V2: the official split file {splits.resolve()} does not exist (the 795 / 654 train / test "
                f"frames of {NYU_FILE}). Fix: download {SPLITS_FILE} from {SPLITS_URL} beside the .mat file, or pass "
                "data.split_file=<its path>"
            )
        return "mat", mat, splits

    def _frames(self) -> dict[str, list[tuple[Tensor, Tensor]]]:
        kind, where, splits = self.source()
        if kind == "mat":
            train, test = read_splits(splits)
            return {"train": read_labeled_mat(where, train), "test": read_labeled_mat(where, test)}
        out = {}
        for split in ("train", "test"):
            rgb_dir, depth_dir = where / split / "rgb", where / split / "depth"
            files = sorted(rgb_dir.glob("*.png")) if rgb_dir.is_dir() else []
            if not files:
                raise DatasetNotFoundError(f"NYU-Depth V2: no images in {rgb_dir.resolve()}. {_fix(where)}")
            missing = [f.name for f in files if not (depth_dir / f.name).is_file()]
            if missing:
                raise DatasetNotFoundError(
                    f"NYU-Depth V2: {len(missing)} image(s) of {rgb_dir} have no depth map in {depth_dir} (e.g. "
                    f"{missing[0]}). {_fix(where)}"
                )
            out[split] = [_read_png_pair(f, depth_dir / f.name) for f in files]
        return out

    def setup(self, stage: str | None = None) -> None:
        """Read and prepare every frame once (idempotent); missing files fail here."""
        if self.train_dataset is not None:
            return
        frames = self._frames()
        prepared = {
            split: [prepare_frame(rgb, d, self.image_size, self.eigen_crop) for rgb, d in items]
            for split, items in frames.items()
        }
        train = prepared["train"]
        if len(train) < 2:
            raise ValueError(f"NYU-Depth V2: {len(train)} training frame(s); validation needs at least one of 2")
        perm = torch.randperm(len(train), generator=torch.Generator().manual_seed(mix_seed(self.seed, 0x4E59)))
        n_val = min(len(train) - 1, max(1, round(self.val_fraction * len(train))))
        parts = {"val": perm[:n_val].sort().values, "train": perm[n_val:].sort().values}
        stack = lambda items: DepthTensors(torch.stack([x for x, _ in items]), torch.stack([d for _, d in items]))  # noqa: E731
        self.train_dataset = IndexedDataset(stack([train[int(i)] for i in parts["train"]]))
        self.val_dataset = IndexedDataset(stack([train[int(i)] for i in parts["val"]]))
        self.test_dataset = IndexedDataset(stack(prepared["test"]))
