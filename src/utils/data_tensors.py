"""Labelled image tensors from the training CLI's data modules, for the report CLIs (``python -m src.report``,
``src.divergence_radius``, ``src.task_prior``): one owner of "a ``configs/data`` option -> (images, labels)".

* :func:`load_data_config`: a ``configs/data/<name>.yaml`` option (or a mapping with a ``_target_``) instantiated
  as the training CLI does (Hydra), with the CLI's ``seed``, ``paths`` and ``image_size``. Unset mandatory keys
  (the image folder's ``root``) are refused naming the key and the fix.
* :func:`open_splits` / :func:`dataset_tensors` / :func:`split_tensors`: the data module's split datasets, then
  (N, 3, S, S) float images in [0, 1] and int64 labels; :func:`data_images`: N seeded images of one split of an
  option (the Task-Prior images of ``python -m src.task_prior data=...`` and of the report's ``tp_data``). Missing files fail here (the data modules raise
  ``DatasetNotFoundError`` naming the folder and the fix), i.e. before any backbone is built.

Lives in ``utils`` (the lowest layer) because the method packages' CLIs (``src/<method>/__main__.py``) may not import
the ``data`` layer; it imports no data-module class (Hydra instantiates them by their ``_target_``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import Tensor

from .checks import check_int
from .resources import config_dir

__all__ = ["data_images", "data_options", "dataset_tensors", "load_data_config", "open_splits", "split_tensors"]


def data_options() -> list[str]:
    """The option names of the ``configs/data`` group (``digits``, ``cifar10``, ``imagefolder``, ...)."""
    return sorted(p.stem for p in (config_dir() / "data").glob("*.yaml"))


def _option_node(name: Any, key: str) -> Any:
    """The OmegaConf node of ``configs/data/<name>.yaml``."""
    from omegaconf import OmegaConf

    path = config_dir() / "data" / f"{name}.yaml"
    if not isinstance(name, str) or not path.is_file():
        raise ValueError(
            f"{key}: no data config {name!r}; choose one of {data_options()} (configs/data/), or give a mapping: "
            "{option: <one of those>, <key>: <value>, ...} or {_target_: <data module class>, ...}"
        )
    return OmegaConf.load(path)


def _data_node(data: str | Mapping[str, Any], key: str) -> Any:
    """The OmegaConf node of ``data``: a ``configs/data`` option name; a mapping ``{option: <name>, **overrides}``
    (that option with some of its keys replaced, e.g. an image folder's ``root``); or a full data-module mapping with
    a ``_target_``."""
    from omegaconf import OmegaConf

    if isinstance(data, str):
        return _option_node(data, key)
    if not (isinstance(data, Mapping) or OmegaConf.is_dict(data)):
        raise TypeError(
            f"{key} must be a configs/data option name or a mapping ({{option: <name>, ...}} or {{_target_: ...}}), "
            f"got {type(data).__name__}"
        )
    given = OmegaConf.to_container(data) if OmegaConf.is_config(data) else dict(data)
    if "_target_" in given:
        if "option" in given:
            raise ValueError(f"{key}: give either option: <configs/data name> or _target_: <class>, not both")
        return OmegaConf.create(given)
    if "option" not in given:
        raise ValueError(
            f"{key}: a data mapping needs option: <configs/data name> (one of {data_options()}) or a _target_ (a data "
            f"module class, e.g. repbench.data.TorchvisionDataModule); got the keys {sorted(given)}"
        )
    option = given.pop("option")
    return OmegaConf.merge(_option_node(option, key), given)


def _missing_message(data: Any, missing: list[str], key: str) -> str:
    """What is unset and how to set it: ``{key}.<k>=...`` for a composed group node (``data=imagefolder``), else the
    ``{option: ..., <k>: ...}`` mapping form (a name in a list such as ``downstream.sets``)."""
    if isinstance(data, str) or "option" in data:
        option = data if isinstance(data, str) else data["option"]
        sets = ", ".join(f"{k}: <value>" for k in missing)
        return f"data config {option!r} leaves {missing} unset; set them: {{option: {option}, {sets}}}"
    return f"the data config leaves {missing} unset; set them: " + " ".join(f"{key}.{k}=<value>" for k in missing)


def load_data_config(
    data: str | Mapping[str, Any],
    seed: int,
    image_size: int | None = None,
    *,
    paths: Mapping[str, Any] | None = None,
    key: str = "data",
) -> Any:
    """The data module of ``data`` (a ``configs/data`` option name such as ``"cifar10"``, ``{option: <name>,
    **overrides}`` or a mapping with a ``_target_``), instantiated as in the training CLI: ``${seed}`` is ``seed``, ``${paths.*}`` are ``paths`` (the CLI's
    ``paths`` group: cifar10's root is ``${paths.data_dir}``), and ``image_size`` (when not None) replaces the
    option's own. ``key`` names the setting in errors (``data``, ``downstream.sets``). Nothing is read from disk
    here: :func:`open_splits` opens the files."""
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    node = OmegaConf.merge({"seed": seed, "paths": dict(paths or {})}, {"data": _data_node(data, key)})
    if image_size is not None and "image_size" in node.data:
        node.data.image_size = image_size
    missing = sorted(k for k in node.data if OmegaConf.is_missing(node.data, k))
    if missing:
        raise ValueError(f"{key}: {_missing_message(data, missing, key)}")
    try:
        return instantiate(node.data, _convert_="all")
    except Exception as exc:  # an interpolation the CLI cannot resolve, a bad option of the data module
        cause = exc.__cause__ or exc
        raise ValueError(f"{key}: cannot build data module {node.data.get('_target_')!r}: {cause}") from exc


def open_splits(datamodule: Any, splits: Sequence[str], *, key: str = "data") -> dict[str, Any]:
    """{split: dataset} of a data module after ``prepare_data`` and ``setup`` (``splits`` among train, val, test).
    Missing files raise the data module's own error (``DatasetNotFoundError``: the folder and the fix), prefixed by
    ``key``; a split the module does not have is a ValueError."""
    for split in splits:
        if split not in ("train", "val", "test"):
            raise ValueError(f"{key}: split must be 'train', 'val' or 'test', got {split!r}")
    try:
        datamodule.prepare_data()
        for stage in {"train": "fit", "val": "fit", "test": "test"}.values():
            datamodule.setup(stage)
    except FileNotFoundError as exc:
        raise type(exc)(f"{key}: {exc}") from None
    out = {}
    for split in splits:
        dataset = getattr(datamodule, f"{split}_dataset", None)
        if dataset is None:
            raise ValueError(f"{key}: data module {type(datamodule).__name__} has no {split} split; choose another")
        out[split] = dataset
    return out


def dataset_tensors(
    dataset: Any, count: int | None = None, *, seed: int = 0, key: str = "max_items", minimum: int = 0
) -> tuple[Tensor, Tensor]:
    """(images float (N, C, H, W), labels int64 (N,)) of a map-style dataset of ``(x, y, ...)`` items; targets that
    are tensors of one or more dimensions (a depth data module's (1, H, W) maps) are stacked as float (N, 1, H, W).

    ``count``: None = every item, in order; else exactly ``count`` items drawn uniformly without replacement by
    ``seed`` (a class-sorted image folder's first items would be one class), in the dataset's order. A ``count``
    outside [``minimum``, the dataset's size] is refused (ValueError naming ``key``), never silently clamped."""
    n = len(dataset)
    if count is None:
        index = range(n)
    else:
        count = check_int(count, key, minimum, n, meaning="the images of that split")
        perm = torch.randperm(n, generator=torch.Generator().manual_seed(check_int(seed, "seed")))[:count]
        index = sorted(perm.tolist())
    xs, ys = [], []
    for i in index:
        item = dataset[i]
        xs.append(torch.as_tensor(item[0]))
        ys.append(torch.as_tensor(item[1]))
    if not xs:
        return torch.empty(0), torch.empty(0, dtype=torch.long)
    if ys[0].dim() > 0:  # per-pixel targets (depth maps)
        return torch.stack(xs).float(), torch.stack(ys).float()
    return torch.stack(xs).float(), torch.tensor([int(y) for y in ys], dtype=torch.long)


def split_tensors(
    datamodule: Any,
    splits: Sequence[str] = ("train", "test"),
    max_items: int | Mapping[str, int | None] | None = None,
    *,
    seed: int = 0,
    key: str = "data",
) -> dict[str, tuple[Tensor, Tensor]]:
    """{split: (images, labels)} of a data module (:func:`open_splits`, then :func:`dataset_tensors`).
    ``max_items``: None = every item of each split; an int or {split: int | None} = that many seeded items per
    split (more than a split holds is refused)."""
    datasets = open_splits(datamodule, splits, key=key)
    counts = max_items if isinstance(max_items, Mapping) else dict.fromkeys(splits, max_items)
    return {
        split: dataset_tensors(ds, counts.get(split), seed=seed, key=f"{key}: the number of {split} images")
        for split, ds in datasets.items()
    }


def data_images(
    data: str | Mapping[str, Any],
    count: int,
    *,
    image_size: int,
    seed: int,
    split: str = "train",
    paths: Mapping[str, Any] | None = None,
    key: str = "data",
    count_key: str | None = None,
) -> Tensor:
    """(count, 3, S, S) images in [0, 1] of the ``split`` split of ``data`` (as :func:`load_data_config`), built at
    ``image_size`` with ``seed``, drawn uniformly without replacement by ``seed`` (:func:`dataset_tensors`: a
    class-sorted image folder's first images would be one class). A missing folder fails here, naming it; more
    images than the split holds are refused, never clamped. ``key`` / ``count_key`` name the setting and its count
    in errors."""
    dm = load_data_config(data, seed, image_size, paths=paths, key=key)
    dataset = open_splits(dm, (split,), key=f"{key} ({split} split)")[split]
    count_key = count_key or f"{key}: the number of images (of its {split} split)"
    return dataset_tensors(dataset, count, seed=seed, key=count_key, minimum=2)[0]
