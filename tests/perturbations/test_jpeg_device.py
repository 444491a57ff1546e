"""JPEG on the images' device: the batched code path a CUDA run takes (nvJPEG there) gives, when run on the CPU
with libjpeg, exactly the images of the CPU path; on a GPU, nvJPEG's images are JPEG images of the same quality."""

from __future__ import annotations

import pytest
import torch

from src.perturbations import perturb
from src.perturbations.jpeg import jpeg_compression, jpeg_compression_cuda


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_batched_path_equals_cpu_path_on_cpu(photo, dtype):
    """Same codec (libjpeg), same uint8 input, same quality: the grouping by quality and the reassembly in input
    order are the only differences, so the outputs are bitwise equal."""
    g = torch.Generator().manual_seed(0)
    x = torch.cat([photo, torch.rand(4, *photo.shape[1:], generator=g, dtype=torch.float64)]).to(dtype)
    for k in (torch.full((5,), 50.0), torch.tensor([30.0, 70.0, 30.0, 49.6, 69.5])):
        a, b = jpeg_compression(x, k), jpeg_compression_cuda(x, k)
        assert a.dtype == b.dtype == dtype and torch.equal(a, b)
    # one image alone gives what it gives inside a batch (independent of batch size and of the other images)
    assert torch.equal(jpeg_compression_cuda(x[2:3], k[2:3]), b[2:3])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="nvJPEG: needs a GPU")
def test_nvjpeg_on_the_device(photo):  # pragma: no cover - no GPU in CI
    """nvJPEG and libjpeg quantise the same DCT coefficients with the same standard tables at a quality; they differ
    in DCT / colour-conversion rounding only, which is far below the quantisation error. So nvJPEG's error to the
    clean image must be of libjpeg's size: within 1.5x of it (the allowance for the two implementations' rounding;
    a wrong quality, 30 instead of 70, changes the error by > 2x)."""
    x = photo.float().cuda()
    for q in (30.0, 70.0):
        y_gpu = perturb(x, "jpeg_compression", q)
        y_cpu = perturb(photo.float(), "jpeg_compression", q)
        assert y_gpu.device == x.device and y_gpu.dtype == x.dtype
        err_gpu = float((y_gpu.cpu() - photo.float()).abs().mean())
        err_cpu = float((y_cpu - photo.float()).abs().mean())
        assert err_gpu <= 1.5 * err_cpu
    torch.manual_seed(0)
    a = perturb(x, "jpeg_compression", 40.0)
    assert torch.equal(a, perturb(x, "jpeg_compression", 40.0))  # reproducible on the device
