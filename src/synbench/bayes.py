"""The ε-robust Bayes-optimal linear classifier of SynBench and its evaluation (ICML 2024 paper, §3.2-3.3,
Theorem 3.1 (i)-(ii), Appendix A.5 (ℓp, singular Σ), A.6 (class prior) and Algorithm 1 lines 12-16).

Conventions (DESIGN.md, "SynBench conventions"):
* Labels are {0, 1}; 1 ↔ +μ̃ (the paper's y = +1). μ̃ = (μ₁ − μ₀)/2, midpoint m = (μ₁ + μ₀)/2.
* Σ is used through its eigendecomposition; eigenvalues ≤ ``eig_tol`` (default 1e-6, absolute, as the
  official code) are dropped: Σ⁻¹ is the pseudo-inverse on the retained eigenvectors F (Remark in A.5).
  Components of μ̃ outside span(F) are discarded (w ∈ span(F)); the ℓ2 z_Σ has none either.
* Relative ε (official code): budget = ε·‖Fᵀμ̃‖₂ for ℓ2 (the *projected* μ̃, as ``get_bound_rep``) and
  ε·‖μ̃‖∞ for ℓ∞. Absolute ε: budget = ε. Allowed: finite ε ≥ 0, and ε < 1 in relative mode (ε ≥ 1 makes
  z = μ̃ feasible, so w = 0 for every representation); anything else raises ValueError.
* Degenerate classifier (w = 0: constant features, μ̃ = 0 or μ̃ ⟂ span(F)): every sample lies on the
  boundary. A tie counts as half a correct prediction (a fair coin) with scaled bound 0, so the classifier
  reports accuracy 0.5 and mean scaled bound 0 (never above a threshold a_T > 0.5: it adds 0 to the score),
  and a warning is issued. No NaN is produced. (With a prior threshold q/2 ≠ 0, w = 0 predicts the majority
  class for every sample - the Bayes decision without information - and A.3 (ii) gives scaled bound 1.)
* Statistics are sums (class counts, shifted class sums, shifted sum of outer products; test: correct count,
  sum of scaled bounds over correct samples, total) so they can be merged by addition / DDP sum-reduction.
"""

from __future__ import annotations

import contextlib
import math
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch
from scipy.optimize import lsq_linear

Tensor = torch.Tensor
F64 = torch.float64


def check_eps(eps: Any, eps_mode: str = "relative") -> Tensor:
    """Validate an ε grid (see module docstring) and return it as a float64 vector."""
    if eps_mode not in ("relative", "absolute"):
        raise ValueError(f"eps_mode must be 'relative' or 'absolute', got {eps_mode!r}")
    t = torch.as_tensor(eps, dtype=F64).reshape(-1).cpu()
    if t.numel() == 0:
        raise ValueError("eps list is empty")
    if not torch.isfinite(t).all():
        raise ValueError(f"eps must be finite, got {t.tolist()}")
    if (t < 0).any():
        raise ValueError(f"eps must be >= 0, got {t.tolist()}")
    if eps_mode == "relative" and (t >= 1).any():
        raise ValueError(f"relative eps must be < 1 (eps >= 1 makes w = 0 for every representation), got {t.tolist()}")
    return t


@contextlib.contextmanager
def torch_threads(n: int | None) -> Iterator[None]:
    """Temporarily set torch's intra-op CPU thread count (None: unchanged); restored on exit.

    Used for SynBench's own small linear algebra: multithreaded BLAS/LAPACK synchronises at every step and
    collapses on loaded / oversubscribed CPUs (measured on 2 busy cores: a (2×256)@(256×16) float64 matmul
    16 ms with 2 threads vs 2 µs with 1; eigh of D = 1280 up to 23 s vs 0.34 s), while 1 thread costs little
    when the CPU is idle (eigh 0.34 s vs 0.22 s). Not thread-safe against concurrent torch use.
    """
    before = torch.get_num_threads()
    if n is None or n == before:
        yield
        return
    torch.set_num_threads(int(n))
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _blas_threads(n: int) -> Any:
    """Limit numpy/scipy's BLAS threads like :func:`torch_threads` (threadpoolctl if installed, else no-op)."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - threadpoolctl comes with scikit-learn
        return contextlib.nullcontext()
    return threadpool_limits(limits=n, user_api="blas")


def retained_eig(cov: Tensor, eig_tol: float = 1e-6, threads: int | None = None) -> tuple[Tensor, Tensor]:
    """Eigenpairs (σ_k, F) of the symmetrised float64 Σ with σ_k > eig_tol (official pseudo-inverse rule).
    ``threads``: CPU threads for the eigendecomposition (see :func:`torch_threads`; None: unchanged)."""
    c = torch.as_tensor(cov, dtype=F64)
    sym = 0.5 * (c + c.T)
    with torch_threads(threads if c.device.type == "cpu" else None):
        try:
            evals, evecs = torch.linalg.eigh(sym)
        except torch.linalg.LinAlgError:
            # LAPACK's divide-and-conquer (syevd) can fail to converge on ill-conditioned covariances of real
            # backbones (seen: EfficientNet-Lite2 features); the relatively robust representation driver does not.
            from scipy.linalg import eigh as scipy_eigh

            w, v = scipy_eigh(sym.cpu().numpy(), driver="evr")
            evals, evecs = torch.from_numpy(w).to(c.device), torch.from_numpy(v).to(c.device)
    keep = evals > eig_tol
    return evals[keep], evecs[:, keep]


def _l2_solve(mu_r: Tensor, sig: Tensor, budgets: Tensor) -> tuple[Tensor, Tensor]:
    """ℓ2 z_Σ in Σ's retained eigenbasis (Theorem 3.1, convex problem argmin_{‖z‖≤β} (μ̃−z)ᵀΣ⁺(μ̃−z)).

    KKT: z_k = μ_k/(1 + λσ_k), λ ≥ 0 with ‖z(λ)‖ = β, i.e. w_k = μ_k/(1/λ + σ_k): a ridge-LDA direction.
    1/‖z(λ)‖ is concave increasing in λ (the Moré-Sorensen secular equation), so Newton started at the lower
    bracket end (‖μ‖/β − 1)/σ_max increases monotonically to the root; the bracket [.., (‖μ‖/β − 1)/σ_min]
    and a geometric-mean bisection safeguard it. All budgets are solved at once. Returns (Z, W), (E, r).
    """
    e, r = budgets.numel(), mu_r.numel()
    z_out = torch.zeros(e, r, dtype=F64, device=mu_r.device)
    w_out = torch.zeros(e, r, dtype=F64, device=mu_r.device)
    norm = torch.linalg.vector_norm(mu_r)
    if r == 0 or norm == 0:
        return z_out, w_out
    zero, degen = budgets == 0, budgets >= norm
    w_out[zero] = mu_r / sig
    z_out[degen] = mu_r
    inner = ~(zero | degen)
    if inner.any():
        beta = budgets[inner]
        m2 = mu_r * mu_r
        ratio = norm / beta - 1.0
        lo, hi = ratio / sig.max(), ratio / sig.min()
        lam = lo.clone()
        for _ in range(200):
            d = 1.0 + lam[:, None] * sig[None, :]
            zz = (m2 / d**2).sum(1)
            phi = zz.rsqrt() - 1.0 / beta
            dphi = zz.pow(-1.5) * (m2 * sig / d**3).sum(1)
            lo = torch.where(phi <= 0, lam, lo)
            hi = torch.where(phi >= 0, lam, hi)
            new = lam - phi / dphi
            bad = ~torch.isfinite(new) | (new < lo) | (new > hi)
            new = torch.where(bad, torch.sqrt(lo * hi), new)
            done = (new - lam).abs() <= 1e-15 * lam
            lam = new
            if bool(done.all()):
                break
        d = 1.0 + lam[:, None] * sig[None, :]
        z_out[inner] = mu_r / d
        w_out[inner] = mu_r / (1.0 / lam[:, None] + sig[None, :])
    return z_out, w_out


def _pdas_box_qp(
    p: Tensor, b: Tensor, beta: float, z0: Tensor, c: float, rank: int, max_iter: int = 100
) -> Tensor | None:
    """Primal-dual active set (Hintermüller, Ito & Kunisch 2002) for min ½zᵀPz − bᵀz s.t. |z_i| ≤ β.

    With w = b − Pz (= Σ⁺(μ̃ − z), the classifier) the KKT conditions are: w_i = 0 where |z_i| < β and
    w_i z_i ≥ 0 at the bounds. Each iteration takes the bound set from a projected-gradient step z + c·w
    (c = 1/λ_max(P)) and solves the free block exactly; it stops when a set repeats. z is returned only if
    the KKT conditions hold to rounding (so it is the exact optimum), else None.
    """
    z = z0.clamp(-beta, beta)
    w = b - p @ z
    seen: set[bytes] = set()
    for _ in range(max_iter):
        t = z + c * w
        up, lo = t > beta, t < -beta
        key = (up.to(torch.int8) - lo.to(torch.int8)).cpu().numpy().tobytes()
        if key in seen:
            break
        seen.add(key)
        free = ~(up | lo)
        z = torch.zeros_like(b)
        z[up], z[lo] = beta, -beta
        if free.any():
            pf = p[free][:, free]
            rhs = (b[free] - p[free][:, ~free] @ z[~free])[:, None]
            if int(free.sum()) <= rank:
                z[free] = torch.linalg.solve(pf, rhs)[:, 0]
            else:  # P = Σ⁺ has rank r: the free block is singular, take the minimum-norm solution
                z[free] = torch.linalg.lstsq(pf, rhs, driver="gelsd" if p.device.type == "cpu" else None).solution[:, 0]
        w = b - p @ z
    tol = 1e-8 * float(b.abs().max())
    up, lo = z >= beta * (1 - 1e-12), z <= -beta * (1 - 1e-12)
    inner = ~(up | lo)
    ok = (
        float(z.abs().max()) <= beta * (1 + 1e-12)
        and bool((w[inner].abs() <= tol).all())
        and bool((w[up] >= -tol).all())
        and bool((w[lo] <= tol).all())
    )
    return z if ok else None


def _linf_solve(
    mu: Tensor, sig: Tensor, f: Tensor, budgets: list[float], diag: Tensor | None
) -> list[tuple[Tensor, Tensor]]:
    """ℓ∞ z_Σ = argmin_{‖z‖∞≤β} (μ̃−z)ᵀΣ⁺(μ̃−z) (Appendix A.5, p = ∞; ICLR submission App. B for Σ = I),
    for every budget β; returns [(z, w)] with w = Σ⁺(μ̃ − z).

    Diagonal Σ (incl. Σ = I): the problem separates, z = clip(μ̃, −β, β), w = Σ⁺(μ̃ − z) (soft-thresholding).
    General Σ: a box-constrained convex QP in z (P = Σ⁺ = FΛ⁻¹Fᵀ, b = Pμ̃). Continuation from β = ‖μ̃‖∞
    (where z = μ̃) down the budgets, each solved by the primal-dual active-set method ``_pdas_box_qp``
    warm-started at the previous solution and accepted only if its KKT conditions hold (exact to rounding;
    a few O(D³) block solves per budget, ~1 s for 9 budgets at D = 1280 on one core). Otherwise the
    bounded-variable least-squares form min ‖Λ^{-1/2}Fᵀ(z − μ̃)‖₂ is solved by scipy's active-set BVLS (exact
    and finite, but one O(D³) least-squares solve per active-set change: tens of seconds at D ≈ 500).
    """
    out: list[tuple[Tensor, Tensor]] = []
    if diag is not None:
        keep = diag > 0
        for beta in budgets:
            z = mu.clamp(-beta, beta)
            w = torch.where(keep, (mu - z) / torch.where(keep, diag, torch.ones_like(diag)), torch.zeros_like(mu))
            out.append((z, w))
        return out
    p = (f / sig) @ f.T
    b = p @ mu
    whitened = lambda v: torch.linalg.vector_norm((f.T @ v) / sig.sqrt())  # noqa: E731 - ‖Λ^{-1/2}Fᵀv‖
    z = mu.clone()  # the solution for β ≥ ‖μ̃‖∞
    results: dict[float, Tensor] = {}
    for beta in sorted(set(budgets), reverse=True):
        if beta == 0 or sig.numel() == 0:
            z = torch.zeros_like(mu)
        elif beta < float(mu.abs().max()):
            z_new = _pdas_box_qp(p, b, beta, z, float(sig.min()), sig.numel())
            if z_new is None:
                a = (f / sig.sqrt()).T.cpu().numpy()
                with _blas_threads(torch.get_num_threads()):
                    x = lsq_linear(a, a @ mu.cpu().numpy(), bounds=(-beta, beta), method="bvls", tol=1e-13).x
                z_new = torch.as_tensor(x, dtype=F64, device=mu.device)
            z = z_new
        results[beta] = z
    for beta in budgets:
        z = results[beta] if beta < float(mu.abs().max()) else mu.clone()
        w = f @ ((f.T @ (mu - z)) / sig)
        if whitened(mu - z) <= 1e-12 * whitened(mu):  # objective 0: z = μ̃ up to the null space -> w = 0
            w = torch.zeros_like(mu)
        out.append((z, w))
    return out


def robust_bayes_directions(
    mu_tilde: Tensor,
    cov: Tensor | None,
    eps_list: Any,
    relative: bool = True,
    *,
    eig: tuple[Tensor, Tensor] | None = None,
    eig_tol: float = 1e-6,
    norm: str = "l2",
) -> tuple[Tensor, Tensor]:
    """Batched :func:`robust_bayes_direction` over an ε list: (W, Z), each (E, D) float64.

    Pass ``eig=(evals, evecs)`` (e.g. from :func:`retained_eig`) to reuse one eigendecomposition for all ε;
    eigenvalues ≤ eig_tol are dropped either way. ``cov`` may then be None (ℓ2 only needs ``eig``).
    """
    if norm not in ("l2", "linf"):
        raise ValueError(f"norm must be 'l2' or 'linf', got {norm!r}")
    eps = check_eps(eps_list, "relative" if relative else "absolute")
    mu = torch.as_tensor(mu_tilde, dtype=F64).reshape(-1)
    if not torch.isfinite(mu).all() or (cov is not None and not torch.isfinite(torch.as_tensor(cov)).all()):
        raise ValueError("mu_tilde / cov contain NaN or inf")
    if eig is None:
        if cov is None:
            raise ValueError("give cov or eig=(evals, evecs)")
        sig, f = retained_eig(cov, eig_tol)
    else:
        sig, f = (torch.as_tensor(t, dtype=F64, device=mu.device) for t in eig)
        keep = sig > eig_tol
        sig, f = sig[keep], f[:, keep]
    eps = eps.to(mu.device)
    if norm == "l2":
        mu_r = f.T @ mu
        budgets = eps * torch.linalg.vector_norm(mu_r) if relative else eps
        z_r, w_r = _l2_solve(mu_r, sig, budgets)
        return w_r @ f.T, z_r @ f.T
    c = None if cov is None else torch.as_tensor(cov, dtype=F64, device=mu.device)
    diag = None
    if c is not None and torch.count_nonzero(c - torch.diag(torch.diagonal(c))) == 0:
        diag = torch.where(torch.diagonal(c) > eig_tol, torch.diagonal(c), torch.zeros_like(mu))
    scale = float(mu.abs().max()) if relative else 1.0
    pairs = _linf_solve(mu, sig, f, [float(e) * scale for e in eps], diag)
    return torch.stack([p[1] for p in pairs]), torch.stack([p[0] for p in pairs])


def robust_bayes_direction(
    mu_tilde: Tensor,
    cov: Tensor | None,
    eps: float,
    relative: bool = True,
    *,
    eig: tuple[Tensor, Tensor] | None = None,
    eig_tol: float = 1e-6,
    norm: str = "l2",
) -> tuple[Tensor, Tensor]:
    """(w, z) of the ε-robust Bayes classifier sign((x − m)ᵀw), Theorem 3.1 (i) / eq. 4.

    z = z_Σ(μ̃) = argmin_{‖z‖ ≤ β} (μ̃ − z)ᵀΣ⁺(μ̃ − z), w = Σ⁺(μ̃ − z), β = ε‖Fᵀμ̃‖ (relative, ℓ2) or ε.
    ℓ2 is solved in closed form up to a 1-D root (see ``_l2_solve``): ε = 0 gives plain LDA w = Σ⁺μ̃;
    β ≥ ‖Fᵀμ̃‖ gives z = Fᵀμ̃ projected back, w = 0 (degenerate, module docstring). ``norm="linf"`` solves
    the ‖z‖∞ ≤ β problem exactly (``_linf_solve``).
    """
    w, z = robust_bayes_directions(mu_tilde, cov, [eps], relative, eig=eig, eig_tol=eig_tol, norm=norm)
    return w[0], z[0]


@dataclass
class TrainStats:
    """Additive training statistics, all float64, relative to a fixed ``shift`` c (shifted-data algorithm):
    count (2,) = [n₀, n₁]; sum (2, D) = Σ_{y=c}(z − c); sum_outer (D, D) = Σ_all (z − c)(z − c)ᵀ.

    Shifting by c ≈ the feature mean (the runner uses the first batch's mean) avoids the catastrophic
    cancellation of raw moments when |mean| ≫ spread. Stats with equal shift add component-wise (DDP:
    sum-reduce count/sum/sum_outer with a shift agreed by all ranks, e.g. zeros); :func:`merge` re-shifts.
    """

    count: Tensor
    sum: Tensor
    sum_outer: Tensor
    shift: Tensor

    @classmethod
    def zeros(cls, dim: int, shift: Tensor | None = None, device: Any = "cpu") -> TrainStats:
        sh = (
            torch.zeros(dim, dtype=F64, device=device)
            if shift is None
            else torch.as_tensor(shift, dtype=F64, device=device).clone()
        )
        return cls(
            torch.zeros(2, dtype=F64, device=device),
            torch.zeros(2, dim, dtype=F64, device=device),
            torch.zeros(dim, dim, dtype=F64, device=device),
            sh,
        )

    def update(self, z: Tensor, y: Tensor) -> TrainStats:
        """Add a batch in place (one float64 matmul for the outer products); returns self.

        NaN/inf features are detected once per fit (they reach the float64 sums), not per batch, to keep
        the streaming cost to one pass over the batch: :func:`fit_gaussian` raises for them."""
        zc = _check_batch(z, y, finite=False).to(self.shift.device, F64) - self.shift
        y = y.to(self.shift.device).long()
        onehot = torch.stack([1 - y, y], 1).to(F64)  # (B, 2): class sums by one small matmul
        self.count += onehot.sum(0)
        self.sum += onehot.T @ zc
        self.sum_outer.addmm_(zc.T, zc)
        return self

    def reshift(self, shift: Tensor) -> TrainStats:
        """The same statistics expressed relative to another shift c' (exact algebra, new object)."""
        delta = self.shift - torch.as_tensor(shift, dtype=F64, device=self.shift.device)
        tot = self.sum.sum(0)
        n = self.count.sum()
        outer = self.sum_outer + torch.outer(tot, delta) + torch.outer(delta, tot) + n * torch.outer(delta, delta)
        return TrainStats(self.count.clone(), self.sum + self.count[:, None] * delta, outer, self.shift - delta)

    def __add__(self, other: TrainStats) -> TrainStats:
        return merge(self, other)


_NONFINITE = "features contain NaN or inf values"


def _check_batch(z: Tensor, y: Tensor, finite: bool = True) -> Tensor:
    if z.ndim != 2 or y.ndim != 1 or z.shape[0] != y.shape[0]:
        raise ValueError(f"expected features (N, D) and labels (N,), got {tuple(z.shape)} and {tuple(y.shape)}")
    if finite and not torch.isfinite(z).all():
        raise ValueError(_NONFINITE)
    if y.numel() and not bool(((y == 0) | (y == 1)).all()):
        raise ValueError("labels must be in {0, 1} (1 <-> +mu)")
    return z


def train_statistics(z: Tensor, y: Tensor, shift: Tensor | None = None) -> TrainStats:
    """Training statistics of one batch; ``shift`` defaults to the batch mean."""
    _check_batch(z, y)
    sh = z.to(F64).mean(0) if shift is None else shift
    return TrainStats.zeros(z.shape[1], sh, z.device).update(z, y)


def merge(a: TrainStats, b: TrainStats) -> TrainStats:
    """a + b (re-shifting b to a's shift when they differ)."""
    if not torch.equal(a.shift, b.shift):
        b = b.reshift(a.shift)
    return TrainStats(a.count + b.count, a.sum + b.sum, a.sum_outer + b.sum_outer, a.shift.clone())


def _divisor(cov_divisor: Any, n: float) -> float:
    table = {"n-2": n - 2.0, "n-1": n - 1.0, "n": n}
    d = table[cov_divisor] if isinstance(cov_divisor, str) else float(cov_divisor)
    if not d > 0:
        raise ValueError(f"covariance divisor {cov_divisor!r} = {d} must be > 0 (too few training samples)")
    return d


def fit_gaussian(stats: TrainStats, cov_divisor: Any = "n-2") -> tuple[Tensor, Tensor, Tensor]:
    """Algorithm 1 line 12: class means μ₁ (y = 1), μ₀ (y = 0) and the pooled covariance
    Σ' = Σ_c Σ_{y=c}(z − μ_c)(z − μ_c)ᵀ / divisor; divisor "n-2" (official code), "n-1" (paper text),
    "n" or a number. Returns (μ₁, μ₀, Σ') in float64."""
    if not (torch.isfinite(stats.sum).all() and torch.isfinite(torch.diagonal(stats.sum_outer)).all()):
        raise ValueError(_NONFINITE)  # any NaN/inf feature reaches Σ(z − c) and the diagonal Σ(z − c)²
    for c in (0, 1):
        if stats.count[c] <= 0:
            raise ValueError(f"class {c} has no training samples")
    m = stats.sum / stats.count[:, None]
    scatter = stats.sum_outer - stats.count[0] * torch.outer(m[0], m[0]) - stats.count[1] * torch.outer(m[1], m[1])
    cov = scatter / _divisor(cov_divisor, float(stats.count.sum()))
    return stats.shift + m[1], stats.shift + m[0], 0.5 * (cov + cov.T)


class LinearClassifiers(NamedTuple):
    """ε-robust classifiers sign((z − m)ᵀw_e − threshold): W (E, D), m (D,), μ̃ (D,), threshold = q/2."""

    W: Tensor
    m: Tensor
    mu_tilde: Tensor
    threshold: float = 0.0


def classifier_from_statistics(
    stats: TrainStats,
    eps_list: Any,
    eps_mode: str = "relative",
    *,
    norm: str = "l2",
    eig_tol: float = 1e-6,
    cov_divisor: Any = "n-2",
    class_prior: float | None = None,
    eig_threads: int | None = None,
) -> LinearClassifiers:
    """Algorithm 1 lines 12-13 from sufficient statistics: one eigendecomposition, W for every ε.

    ``class_prior`` τ (None or 0.5: official, no threshold) adds the prior threshold q/2, q = ln((1−τ)/τ)
    of eq. 5 (Theorem A.3). Warns when a classifier is degenerate (w = 0; module docstring).
    ``eig_threads``: see :func:`retained_eig`.
    """
    mu1, mu0, cov = fit_gaussian(stats, cov_divisor)
    m = stats.sum / stats.count[:, None]
    mu_tilde = 0.5 * (m[1] - m[0])
    eig = retained_eig(cov, eig_tol, eig_threads)
    W, _ = robust_bayes_directions(mu_tilde, cov, eps_list, eps_mode == "relative", eig=eig, eig_tol=eig_tol, norm=norm)
    if (W == 0).all(1).any():
        warnings.warn(
            "SynBench: the robust Bayes classifier is degenerate (w = 0: constant features, or no class "
            "mean difference inside the retained covariance subspace); reporting accuracy 0.5 and "
            "scaled bound 0 for it",
            RuntimeWarning,
            stacklevel=2,
        )
    thr = 0.0 if class_prior in (None, 0.5) else 0.5 * math.log((1.0 - class_prior) / class_prior)
    return LinearClassifiers(W, 0.5 * (mu1 + mu0), mu_tilde, thr)


class TestStats(NamedTuple):
    """Additive test statistics: n_correct (E,) (ties count 1/2), sum_bound (E,) over correct samples, n_total."""

    n_correct: Tensor
    sum_bound: Tensor
    n_total: Tensor
    __test__ = False  # not a pytest test class

    def __add__(self, other: TestStats) -> TestStats:  # type: ignore[override]
        return TestStats(
            self.n_correct + other.n_correct, self.sum_bound + other.sum_bound, self.n_total + other.n_total
        )


def test_statistics(z: Tensor, y: Tensor, clf: LinearClassifiers) -> TestStats:
    """Algorithm 1 lines 14-15 on one batch: prediction sign((z − m)ᵀw − q/2) and the scaled bound of
    Theorem 3.1 (ii) |(z − m)ᵀw| / |μ̃ᵀw| (A.3 (ii) with a prior threshold: 2|u| / (|μ̃ᵀw − q/2| + |μ̃ᵀw + q/2|))."""
    _check_batch(z, y, finite=False)
    W, m, mu_t, thr = clf
    u = (z.to(W.device, F64) - m) @ W.T - thr
    if not torch.isfinite(u).all():  # NaN/inf in z always reaches u (0·inf = NaN): one (N, E) check
        raise ValueError(_NONFINITE)
    proj = W @ mu_t
    denom = 0.5 * ((proj - thr).abs() + (proj + thr).abs())
    margin = u * (2.0 * y.to(W.device, F64) - 1.0)[:, None]
    correct, tie = margin > 0, margin == 0
    bound = torch.where(denom > 0, u.abs() / torch.where(denom > 0, denom, torch.ones_like(denom)), torch.zeros_like(u))
    return TestStats(
        correct.sum(0).to(F64) + 0.5 * tie.sum(0).to(F64),
        (bound * correct).sum(0),
        torch.tensor(float(z.shape[0]), dtype=F64, device=W.device),
    )


test_statistics.__test__ = False  # type: ignore[attr-defined]  # not a pytest test


def finalize_test_statistics(ts: TestStats) -> tuple[Tensor, Tensor]:
    """(accuracy, mean scaled bound of correct samples) per ε; the mean is 0 where nothing is correct."""
    if ts.n_total <= 0:
        raise ValueError("no test samples")
    acc = ts.n_correct / ts.n_total
    mean = torch.where(ts.n_correct > 0, ts.sum_bound / ts.n_correct.clamp_min(1e-300), torch.zeros_like(acc))
    return acc, mean


def evaluate_representation(
    train_z: Tensor,
    train_y: Tensor,
    test_z: Tensor,
    test_y: Tensor,
    eps_list: Sequence[float],
    eps_mode: str = "relative",
    *,
    norm: str = "l2",
    eig_tol: float = 1e-6,
    cov_divisor: Any = "n-2",
    class_prior: float | None = None,
) -> tuple[Tensor, Tensor]:
    """Algorithm 1 lines 12-16: (accuracy, mean scaled bound of correct test samples), one value per ε.

    Composes :func:`train_statistics`, :func:`classifier_from_statistics`, :func:`test_statistics`,
    :func:`finalize_test_statistics`. The mean is over all correct test samples (the paper's definition;
    the official code averages per-batch means with drop_last, a small difference).
    """
    check_eps(eps_list, eps_mode)
    stats = train_statistics(train_z, train_y)
    clf = classifier_from_statistics(
        stats, eps_list, eps_mode, norm=norm, eig_tol=eig_tol, cov_divisor=cov_divisor, class_prior=class_prior
    )
    return finalize_test_statistics(test_statistics(test_z, test_y, clf))


__all__ = [
    "check_eps",
    "torch_threads",
    "retained_eig",
    "robust_bayes_direction",
    "robust_bayes_directions",
    "TrainStats",
    "train_statistics",
    "merge",
    "fit_gaussian",
    "LinearClassifiers",
    "classifier_from_statistics",
    "TestStats",
    "test_statistics",
    "finalize_test_statistics",
    "evaluate_representation",
]
