"""Writes notebooks/quickstart.ipynb (outputs stripped). Run: python notebooks/_build/make_quickstart.py"""
from pathlib import Path

import nbformat as nbf

md, code = nbf.v4.new_markdown_cell, nbf.v4.new_code_cell
cells = [
    md("# RepBench quickstart\n\nLoad a backbone, probe it on offline data, read the TensorBoard scalars back "
       "and plot them. Runs offline, top to bottom, on a CPU in about a minute."),
    code("import os, sys, tempfile\n"
         "from pathlib import Path\n"
         "# make the repository root importable (the notebook lives in notebooks/)\n"
         "ROOT = Path.cwd() if (Path.cwd() / 'src').is_dir() else Path.cwd().parent\n"
         "sys.path.insert(0, str(ROOT))\n"
         "os.environ.setdefault('HF_HUB_OFFLINE', '1')\n"
         "import torch\n"
         "torch.manual_seed(0)"),
    md("## 1. A backbone behind one protocol\n`create_backbone` returns an `nn.Module` whose `embed(x)` takes "
       "float `(N, 3, H, W)` images in `[0, 1]` (normalization happens inside)."),
    code("from src.backbones import create_backbone, list_backbones\n"
         "print(list_backbones('embedded'))\n"
         "bb = create_backbone('embedded:efficientnet_lite0').eval()   # real ImageNet weights, no download\n"
         "print(bb.name, bb.embed_dim, bb.input_size, bb.mean, bb.std)"),
    code("import skimage.data, timm\n"
         "from PIL import Image\n"
         "x = bb.eval_transform()(Image.fromarray(skimage.data.chelsea()))[None]   # resize + center crop, [0, 1]\n"
         "with torch.no_grad():\n"
         "    probs = bb.classify(x).softmax(-1)[0]\n"
         "    z = bb.embed(x)\n"
         "info = timm.data.ImageNetInfo()\n"
         "print('embedding', tuple(z.shape))\n"
         "for p, i in zip(*probs.topk(3)):\n"
         "    print(f'{info.index_to_description(int(i)):30s} {float(p):.3f}')"),
    md("## 2. Probe it: standard and ε-robust linear probing on digits\n"
       "The same run as `python -m src.train experiment=probe_digits`, composed from `configs/` in Python."),
    code("from hydra import compose, initialize_config_dir\n"
         "from omegaconf import open_dict\n"
         "from src.train import train\n"
         "out = Path(tempfile.mkdtemp(prefix='repbench_quickstart_'))\n"
         "with initialize_config_dir(version_base='1.3', config_dir=str(ROOT / 'configs')):\n"
         "    cfg = compose('train.yaml', overrides=['experiment=probe_digits', 'data.image_size=64', 'trainer.max_epochs=3',\n"
         "                                           'model.eval_epsilons=[0.05]', 'model.eval_attack.steps=3', 'callbacks.synbench=null', 'callbacks.divergence_radius=null',\n"
         "                                           'callbacks.rich_progress_bar=null', 'test=false'])\n"
         "with open_dict(cfg):  # outside a Hydra run, the ${hydra:...} paths are set by hand\n"
         "    cfg.paths.root_dir = str(ROOT)\n"
         "    cfg.paths.data_dir = str(ROOT / 'data')\n"
         "    cfg.paths.output_dir = str(out)\n"
         "    cfg.paths.log_dir = str(out)\n"
         "metrics, objs = train(cfg)\n"
         "print({k: round(v, 3) for k, v in sorted(metrics.items())})"),
    md("## 3. Read the TensorBoard scalars back and plot them"),
    code("from src.utils.tensorboard import read_scalars\n"
         "scalars = read_scalars(out / 'tensorboard')\n"
         "print(sorted(scalars))"),
    code("import matplotlib.pyplot as plt\n"
         "fig, axes = plt.subplots(1, 2, figsize=(9, 3.2))\n"
         "steps, loss = zip(*scalars['train/loss'])\n"
         "axes[0].plot(steps, loss); axes[0].set_xlabel('step'); axes[0].set_title('train/loss')\n"
         "for tag in ('val/acc', 'val/adv/acc_pgd3_l2_0p05'):\n"
         "    s, v = zip(*scalars[tag])\n"
         "    axes[1].plot(range(1, len(v) + 1), v, marker='o', label=tag)\n"
         "axes[1].set_xlabel('epoch'); axes[1].set_ylim(0, 1); axes[1].legend(); axes[1].set_title('accuracy')\n"
         "fig.tight_layout()"),
    code("assert scalars['val/acc'][-1][1] > 0.8, 'the lite0 probe should separate digits'"),
]
nb = nbf.v4.new_notebook(cells=cells, metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}})
path = Path(__file__).resolve().parents[1] / "quickstart.ipynb"
nbf.write(nb, path)
print("wrote", path)
