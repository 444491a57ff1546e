"""Downstream classifiers under perturbation and the robustness → ACC_p regression.

Liu et al., "Robustness of Vision Foundation Models to Common Perturbations" (arXiv:2604.14973), §5:
* §5.1, classifiers g ∘ f on a frozen foundation model f: a linear probe trained on clean embeddings, and — for
  CLIP-style backbones — zero-shot classification against text embeddings of class-name prompts
  ("a photo of a {c}.", the CLIP prompt);
* §5.2, predicting an image's ACC_p from its robustness value (R_dr or R_cs) with a linear regression trained on
  the first half of the images and scored (mean squared error) on the second half (Figs. 10, 11; for depth, RMSE_p
  the same way, App. F, Fig. 9);
* App. F, the quartile groups of Figs. 5 / 8: images ranked by robustness, cut into 4 equal groups, the mean
  robustness and mean score of each (:func:`quartile_means`).
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

__all__ = [
    "LinearClassifier",
    "fit_linear_probe",
    "knn_predict",
    "ZeroShotClassifier",
    "zero_shot_weights",
    "open_clip_zero_shot",
    "zero_shot_head",
    "fit_line",
    "quartile_means",
    "regression_mse",
    "DEFAULT_TEMPLATES",
    "CLASS_NAME_LISTS",
    "DIGIT_NAMES",
    "prompt_class_names",
]

F64 = torch.float64
DEFAULT_TEMPLATES = ("a photo of a {c}.",)
#: the class names of the digits, for zero-shot prompts
DIGIT_NAMES = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
#: the class-name lists a zero-shot head can be given by name (label i = name i): ``imagenet`` is OpenAI's 1000
#: ImageNet names as open_clip ships them (``open_clip.zero_shot_metadata.IMAGENET_CLASSNAMES``), in the order of the
#: WordNet ids sorted, i.e. of an ImageNet folder's class sub-folders (``n01440764`` ... ``n15075141``)
CLASS_NAME_LISTS = {"imagenet": "open_clip.zero_shot_metadata:IMAGENET_CLASSNAMES"}
#: a WordNet id (ImageNet's folder names): a prompt "a photo of a n01440764." carries no class meaning
_WNID = re.compile(r"n\d{8}")


def prompt_class_names(
    names: Sequence[str] | str, *, from_folders: bool = False, key: str = "class_names"
) -> list[str]:
    """The class names of zero-shot prompts (label i = name i; CLIP's §3.1.4 prompts "a photo of a {c}."):

    * a list of names, used as given;
    * the name of a bundled list (:data:`CLASS_NAME_LISTS`: ``"imagenet"``);
    * ``from_folders=True``: names read from a data set's class folders; an underscore reads as a space
      (Food101's ``apple_pie`` → ``apple pie``, the names CLIP's own Food101 prompts use), the digits' ``"0"`` ..
      ``"9"`` become ``"zero"`` .. ``"nine"`` (words a text tower reads).

    A ValueError names the fix for an empty name, an unknown list name, and WordNet-id folder names (ImageNet's
    layout: ``class_names=imagenet``), which would make every prompt meaningless without any error downstream."""
    if isinstance(names, str):
        if names not in CLASS_NAME_LISTS:
            raise ValueError(
                f"{key} must be a list of names (label i = name i) or one of {sorted(CLASS_NAME_LISTS)}, got the "
                f"string {names!r}"
            )
        module, _, attr = CLASS_NAME_LISTS[names].partition(":")
        return [str(n) for n in getattr(importlib.import_module(module), attr)]
    out = [str(n) for n in names]
    if not out or any(not n.strip() for n in out):
        raise ValueError(f"{key} must be non-empty names, one per label, got {out}")
    if from_folders:
        wnids = [n for n in out if _WNID.fullmatch(n)]
        if wnids:
            raise ValueError(
                f"the data's class folders are WordNet ids ({wnids[:3]} ...), which make meaningless prompts; set "
                f"{key}=imagenet for ImageNet's folders (OpenAI's names in sorted-id order) or {key}=[...] (one name "
                "per label)"
            )
        if out == [str(d) for d in range(10)]:
            return list(DIGIT_NAMES)
        out = [n.replace("_", " ") for n in out]
    return out


class LinearClassifier(nn.Module):
    """scores = z Wᵀ + b (a frozen linear head)."""

    def __init__(self, weight: Tensor, bias: Tensor) -> None:
        super().__init__()
        self.register_buffer("weight", weight.detach().to(torch.float32))
        self.register_buffer("bias", bias.detach().to(torch.float32))

    def forward(self, z: Tensor) -> Tensor:
        return z.to(self.weight.dtype) @ self.weight.T.to(z.device) + self.bias.to(z.device)


def fit_linear_probe(z: Tensor, y: Tensor, *, C: float = 1.0, max_iter: int = 2000) -> LinearClassifier:
    """Multinomial logistic regression (scikit-learn, L2 penalty ``C``) on standardised clean embeddings (N, D) with
    integer labels (N,); the standardisation is folded into the returned head, which takes raw embeddings."""
    from sklearn.linear_model import LogisticRegression

    if z.dim() != 2 or y.shape != (z.shape[0],):
        raise ValueError(f"need embeddings (N, D) and labels (N,), got {tuple(z.shape)} and {tuple(y.shape)}")
    if len(torch.unique(y)) < 2:
        raise ValueError("a linear probe needs at least two classes in the training labels")
    x = z.detach().cpu().to(F64).numpy()
    mu, sd = x.mean(0), x.std(0) + 1e-12
    clf = LogisticRegression(C=C, max_iter=max_iter).fit((x - mu) / sd, y.cpu().numpy())
    W = clf.coef_ / sd
    b = clf.intercept_ - W @ mu
    if W.shape[0] == 1:  # binary: sklearn keeps one row; scores (−s, s) give the same argmax
        W, b = np.concatenate([-W, W]) / 2, np.concatenate([-b, b]) / 2
    return LinearClassifier(torch.from_numpy(W), torch.from_numpy(b))


@torch.no_grad()
def knn_predict(
    train_z: Tensor,
    train_y: Tensor,
    test_z: Tensor,
    *,
    k: int = 20,
    temperature: float = 0.07,
    num_classes: int | None = None,
    chunk: int = 1024,
) -> Tensor:
    """Weighted k-nearest-neighbour labels of ``test_z`` (M, D) from ``train_z`` (N, D) with integer ``train_y`` (N,):
    cosine similarity s to the k most similar training embeddings, each voting for its label with weight
    exp(s / temperature), the label of the largest total (ties: the smaller label). The k-NN monitor of
    self-supervised learning (Wu et al., "Unsupervised Feature Learning via Non-Parametric Instance Discrimination",
    CVPR 2018, eq. 7: k = 200, T = 0.07; solo-learn's online k-NN: k = 20). Float64 similarities, ``chunk`` test rows
    at a time (memory O(chunk·N)). ``k`` larger than N uses all N."""
    if train_z.dim() != 2 or test_z.dim() != 2 or train_z.shape[1] != test_z.shape[1]:
        raise ValueError(f"need (N, D) and (M, D) embeddings, got {tuple(train_z.shape)} and {tuple(test_z.shape)}")
    if train_y.shape != (train_z.shape[0],):
        raise ValueError(f"train_y must have shape ({train_z.shape[0]},), got {tuple(train_y.shape)}")
    if isinstance(k, bool) or int(k) < 1 or not float(temperature) > 0:
        raise ValueError(f"k must be >= 1 and temperature > 0, got k={k!r}, temperature={temperature!r}")
    n_cls = int(num_classes) if num_classes is not None else int(train_y.max()) + 1
    a = nn.functional.normalize(train_z.to(F64), dim=1)
    y = train_y.to(a.device).long()
    k = min(int(k), a.shape[0])
    out = []
    for start in range(0, test_z.shape[0], chunk):
        b = nn.functional.normalize(test_z[start : start + chunk].to(F64).to(a.device), dim=1)
        sim, idx = (b @ a.T).topk(k, dim=1)
        votes = torch.zeros(b.shape[0], n_cls, dtype=F64, device=a.device)
        votes.scatter_add_(1, y[idx], (sim / float(temperature)).exp())
        out.append(votes.argmax(1))
    return torch.cat(out) if out else torch.zeros(0, dtype=torch.long)


class ZeroShotClassifier(nn.Module):
    """CLIP zero-shot head: scores = scale · cos(z, t_c) against one unit text embedding t_c per class."""

    def __init__(self, text_weights: Tensor, logit_scale: float = 100.0) -> None:
        super().__init__()
        if text_weights.dim() != 2:
            raise ValueError(f"text_weights must be (num_classes, D), got {tuple(text_weights.shape)}")
        self.register_buffer("text_weights", nn.functional.normalize(text_weights.detach().float(), dim=-1))
        self.logit_scale = float(logit_scale)

    def forward(self, z: Tensor) -> Tensor:
        z = nn.functional.normalize(z.float(), dim=-1)
        return self.logit_scale * z @ self.text_weights.T.to(z.device)


@torch.no_grad()
def zero_shot_weights(
    encode_text: Callable[[Tensor], Tensor],
    tokenize: Callable[[list[str]], Tensor],
    class_names: Sequence[str],
    templates: Sequence[str] = DEFAULT_TEMPLATES,
) -> Tensor:
    """(C, D) unit class embeddings: for each class, the normalised mean of the normalised text embeddings of its
    prompts ``template.format(c=name)`` (CLIP's prompt ensembling; one template by default)."""
    if not class_names:
        raise ValueError("class_names is empty")
    if not templates or any("{c}" not in t for t in templates):
        raise ValueError(f"every template needs a '{{c}}' placeholder for the class name, got {list(templates)}")
    rows = []
    for name in class_names:
        t = encode_text(tokenize([tpl.format(c=name) for tpl in templates])).float()
        t = nn.functional.normalize(t, dim=-1).mean(0)
        rows.append(nn.functional.normalize(t, dim=-1))
    return torch.stack(rows)


def open_clip_zero_shot(
    arch: str,
    class_names: Sequence[str],
    *,
    pretrained: str | None = None,
    templates: Sequence[str] = DEFAULT_TEMPLATES,
    model: nn.Module | None = None,
    create_kwargs: Mapping[str, Any] | None = None,
) -> ZeroShotClassifier:
    """Zero-shot head for an ``open_clip:<arch>`` backbone: its text tower (the same ``pretrained`` weights; or a
    given open_clip ``model``) embeds the prompts; the logit scale is the model's own. ``create_kwargs``: further
    ``open_clip.create_model`` options (those the backbone was created with)."""
    import open_clip

    if model is None:
        from ..backbones.open_clip_backbone import _resolve_pretrained

        weights = _resolve_pretrained(arch, pretrained) if pretrained else None
        model = open_clip.create_model(arch, pretrained=weights, **dict(create_kwargs or {}))
    model.eval()
    tokenizer = (
        open_clip.get_tokenizer(arch) if arch in open_clip.list_models() else open_clip.get_tokenizer("ViT-B-32")
    )
    w = zero_shot_weights(model.encode_text, tokenizer, class_names, templates)
    scale = float(model.logit_scale.detach().exp()) if hasattr(model, "logit_scale") else 100.0
    return ZeroShotClassifier(w, scale)


def fit_line(x: Tensor, y: Tensor) -> tuple[float, float]:
    """Least-squares line y ≈ a·x + b in closed form (float64): a = cov(x, y)/var(x), b = ȳ − a·x̄.

    A constant x (var = 0) gives the best constant predictor a = 0, b = ȳ."""
    x, y = torch.as_tensor(x, dtype=F64).reshape(-1), torch.as_tensor(y, dtype=F64).reshape(-1)
    if x.numel() != y.numel() or x.numel() < 1:
        raise ValueError(f"fit_line needs equally many x and y values (>= 1), got {x.numel()} and {y.numel()}")
    if not bool(torch.isfinite(x).all() and torch.isfinite(y).all()):
        raise ValueError("fit_line: x and y must be finite")
    xc, yc = x - x.mean(), y - y.mean()
    sxx = float((xc * xc).sum())
    a = float((xc * yc).sum()) / sxx if sxx > 0 else 0.0
    return a, float(y.mean()) - a * float(x.mean())


def regression_mse(x: Tensor, y: Tensor) -> tuple[float, float, float]:
    """§5.2: fit y ≈ a·x + b on the first half of the pairs (in the given order), return (test MSE on the second
    half, a, b). Needs at least 2 pairs."""
    x, y = torch.as_tensor(x, dtype=F64).reshape(-1), torch.as_tensor(y, dtype=F64).reshape(-1)
    if x.numel() < 2:
        raise ValueError(f"regression_mse needs at least 2 (robustness, ACC_p) pairs, got {x.numel()}")
    h = x.numel() // 2
    a, b = fit_line(x[:h], y[:h])
    mse = float(((a * x[h:] + b - y[h:]) ** 2).mean())
    return mse, a, b


def quartile_means(x: Tensor, y: Tensor, groups: int = 4) -> tuple[Tensor, Tensor]:
    """App. F (Figs. 5, 8): rank the pairs (x_i, y_i) by x (ties in the given order), cut them into ``groups``
    consecutive groups of equal size (sizes differing by at most one, the larger first, as ``numpy.array_split``)
    and return each group's mean x and mean y, float64 (groups,). Needs at least ``groups`` pairs."""
    x, y = torch.as_tensor(x, dtype=F64).reshape(-1), torch.as_tensor(y, dtype=F64).reshape(-1)
    if x.numel() != y.numel() or x.numel() < groups or groups < 1:
        raise ValueError(
            f"quartile_means needs equally many x and y, at least groups={groups}, got {x.numel()}, {y.numel()}"
        )
    order = torch.sort(x, stable=True).indices
    parts = torch.tensor_split(order, groups)  # sizes ⌈n/g⌉ first, as numpy.array_split
    return torch.stack([x[p].mean() for p in parts]), torch.stack([y[p].mean() for p in parts])


#: create_open_clip's weight options (the text tower loads the same); ``projection`` is the image tower's own option
_SPEC_WEIGHTS = ("pretrained", "checkpoint_path")


def zero_shot_head(
    spec: Any,
    class_names: Sequence[str],
    *,
    templates: Sequence[str] = DEFAULT_TEMPLATES,
    seed: int = 0,
    fix: str = "use a linear probe for it",
) -> ZeroShotClassifier:
    """The CLIP zero-shot head (§5.1) of an ``open_clip:<arch>`` backbone spec (a name or ``{name: ..., **options}``,
    as :func:`~src.backbones.spec.build_backbone` takes it, or a built Backbone carrying its ``spec``): the text tower of
    the same weights (``checkpoint_path`` or ``pretrained`` tag / file) and create options embeds ``templates`` for each
    class name (:func:`open_clip_zero_shot`). A random-weight spec (no weights) gets a random text tower drawn from
    ``seed`` (a control, not a CLIP number). A ValueError, ending with ``fix``, for a non-open_clip spec, a
    pre-projection embedding (``projection: false``: not the joint space) or a Backbone without the spec it was built
    from (its text tower's weights would be unknown)."""
    from ..backbones.base import Backbone

    if isinstance(spec, Backbone):  # a built Backbone: the spec that built it
        built = getattr(spec, "spec", None)
        if built is None:
            raise ValueError(
                f"a zero-shot head loads the text tower of the backbone's weights, but the Backbone {spec.name!r} "
                f"carries no spec; pass it as {{name: ..., pretrained: ...}} (or build it with build_backbone), or {fix}"
            )
        spec = built
    opts = {"name": spec} if isinstance(spec, str) else dict(spec)
    name = str(opts.pop("name", ""))
    if not name.startswith("open_clip:"):
        raise ValueError(
            f"zero-shot accuracy needs an open_clip backbone (its text tower), got backbone {name!r}; {fix}"
        )
    if opts.pop("projection", True) is False:
        raise ValueError(
            f"zero-shot accuracy needs the joint image-text embedding, but backbone {name!r} has projection: false; "
            f"use projection: true or {fix}"
        )
    weights = opts.get("checkpoint_path") or opts.get("pretrained")
    create = {k: v for k, v in opts.items() if k not in _SPEC_WEIGHTS}
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(seed))  # only a random-weight text tower depends on it
        return open_clip_zero_shot(
            name.split(":", 1)[1], list(class_names), pretrained=weights, templates=templates, create_kwargs=create
        )
