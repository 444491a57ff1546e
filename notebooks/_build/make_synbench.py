"""Writes notebooks/synbench.ipynb (outputs stripped). Run: python notebooks/_build/make_synbench.py"""
from pathlib import Path

import nbformat as nbf

md, code = nbf.v4.new_markdown_cell, nbf.v4.new_code_cell
cells = [
    md("# SynBench: the paper's Figures 2 and 3\n\n"
       "Ko et al., *What would Gauss say about representations?* (ICML 2024). Figure 2: the ε-robust Bayes classifier of "
       "a 2-D class-conditional Gaussian rotates as ε grows, trading accuracy for margin; the reference trade-off "
       "b(a) of Theorem 3.1 (iv). Figure 3: the expected-bound curves E(a_t) of real backbones against that reference. "
       "Runs offline on a CPU in about two minutes (a reduced budget: see the last cell for the full protocol)."),
    code("import os, sys\nfrom pathlib import Path\n"
         "ROOT = Path.cwd() if (Path.cwd() / 'src').is_dir() else Path.cwd().parent\n"
         "sys.path.insert(0, str(ROOT))\nos.environ.setdefault('HF_HUB_OFFLINE', '1')\n"
         "import numpy as np, torch, matplotlib.pyplot as plt\n"
         "from src.synbench.bayes import robust_bayes_direction\n"
         "from src.synbench.theory import expected_scaled_bound, reference_accuracy"),
    md("## Figure 2 (a): ε-robust Bayes classifiers of a 2-D Gaussian\n"
       "x | y ~ N(y·μ̃, Σ). The classifier is sign(xᵀw) with w = Σ⁻¹(μ̃ − z), z = argmin_{‖z‖≤ε} (μ̃−z)ᵀΣ⁻¹(μ̃−z), "
       "computed in closed form (a ridge-regularised LDA direction)."),
    code("mu = torch.tensor([1.0, 0.6], dtype=torch.float64)\n"
         "cov = torch.tensor([[1.0, 0.75], [0.75, 1.0]], dtype=torch.float64)\n"
         "g = torch.Generator().manual_seed(0)\n"
         "y = torch.randint(0, 2, (400,), generator=g) * 2 - 1\n"
         "x = y[:, None] * mu + torch.randn(400, 2, generator=g, dtype=torch.float64) @ torch.linalg.cholesky(cov).T\n"
         "fig, ax = plt.subplots(1, 2, figsize=(10, 4.2))\n"
         "ax[0].scatter(*x[y > 0].T, s=6, alpha=.5, label='y = +1'); ax[0].scatter(*x[y < 0].T, s=6, alpha=.5, label='y = -1')\n"
         "t = np.linspace(-4, 4, 2)\n"
         "for eps in [0.0, 0.3, 0.6, 0.9]:\n"
         "    w, z = robust_bayes_direction(mu, cov, eps, relative=False)\n"
         "    acc = float(reference_accuracy(float(mu @ w / torch.sqrt(w @ cov @ w))))\n"
         "    ax[0].plot(t, -w[0] / w[1] * t, label=f'ε = {eps}: accuracy {acc:.3f}')\n"
         "ax[0].set_xlim(-4, 4); ax[0].set_ylim(-4, 4); ax[0].legend(fontsize=7); ax[0].set_title('(a) ε-robust Bayes boundaries')\n"
         "a = np.linspace(0.55, 0.999, 200)\n"
         "ax[1].plot(a, expected_scaled_bound(a)); ax[1].set_yscale('log')\n"
         "ax[1].set_xlabel('accuracy a'); ax[1].set_ylabel('expected scaled bound b(a)')\n"
         "ax[1].set_title('(b) reference trade-off, Thm 3.1 (iv)'); fig.tight_layout()"),
    md("As ε grows the boundary rotates towards the direction of μ̃ (more margin for every sample) and the accuracy "
       "drops; b(a) falls towards 1 as the classes separate."),
    md("## Figure 3: E(a_t) curves of the embedded EfficientNet-Lite backbones\n"
       "`compare_backbones` runs `synbench()` (Algorithm 1) on each backbone. Reduced budget here: 32×32 synthetic "
       "images, 4 values of s, 1536 training + 256 test samples per s (more samples than the 1280 feature dimensions)."),
    code("from src.synbench.compare import compare_backbones\n"
         "budget = dict(s_values=[1.0, 2.0, 3.0, 4.9], n_train=1536, n_test=256, a_T=[0.7], "
         "eps=[0.0, 0.2, 0.4, 0.6, 0.8])\n"
         "report = compare_backbones(['embedded:efficientnet_lite0', 'embedded:efficientnet_lite1', "
         "'embedded:efficientnet_lite2'], budget, input_size=32)\n"
         "results = report.results  # {backbone: SynBenchResult}\n"
         "print(report.markdown)"),
    code("figs = report.figures()\nfigs['curves.png']"),
    code("figs['score_vs_eps.png']"),
    code("res = results['embedded:efficientnet_lite0']\n"
         "for e in res.eps:\n    assert 0.0 <= res.score(e) <= 1.0 + 1e-9\n"
         "print('per-s accuracy at eps=0:', dict(zip(res.s_values, res.accuracy[:, 0].numpy().round(3))))\n"
         "print('reference accuracy Phi(s):', dict(zip(res.s_values, res.ref_accuracy.numpy().round(3))))"),
    md("The full official protocol (49 values of s, 2048 + 2048 samples per s, each backbone at its native "
       "resolution) is one flag away: `python -m src.synbench full=true` (about an hour per backbone on 2 CPU cores)."),
]
nb = nbf.v4.new_notebook(cells=cells, metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}})
path = Path(__file__).resolve().parents[1] / "synbench.ipynb"
nbf.write(nb, path)
print("wrote", path)
