"""kernel_info() and set_kernel(): the CPU, the kernel per op and format, forcing the bf16 GEMM
route, and both routes' bf16 matmuls against an fp64 reference."""
from __future__ import annotations

import numpy as np
import pytest

import flexpoint as fx

from conftest import has

pytestmark = pytest.mark.skipif(not has("flexpoint_kernel_report", "flexpoint_set_kernel"),
                                reason="library without kernel selection")


def test_kernel_info_fields():
    info = fx.kernel_info()
    assert info["backend"] == fx.backend()
    assert "family" in info["cpu"] and "model" in info["cpu"]
    assert set(info["kernels"]) == {"matmul/" + f for f in fx.FORMATS}
    assert all(isinstance(k, str) and k for k in info["kernels"].values())
    assert f"matmul/bf16={info['kernels']['matmul/bf16']}" in info["report"]
    assert info["features"] == fx.cpu_features()


def test_set_kernel_bad_input():
    before = fx.kernel_info()["kernels"]["matmul/bf16"]
    with pytest.raises(fx.UnknownNameError):
        fx.set_kernel("matmul", "bf16", "fastest")
    with pytest.raises(fx.UnknownNameError):
        fx.set_kernel("conv", "bf16", "widen")
    with pytest.raises(fx.FormatError):
        fx.set_kernel("matmul", "bf17", "widen")
    with pytest.raises(fx.ArgumentTypeError):
        fx.set_kernel("matmul", "bf16", 3)
    if "avx512bf16" not in fx.cpu_features():
        with pytest.raises(fx.UnsupportedError):
            fx.set_kernel("matmul", "bf16", "dpbf16")
    assert fx.kernel_info()["kernels"]["matmul/bf16"] == before


def _routes():
    if fx.backend() != "avx512":
        return []
    return ["widen", "dpbf16"] if "avx512bf16" in fx.cpu_features() else ["widen"]


@pytest.mark.parametrize("route", ["widen", "dpbf16"])
def test_routes_against_fp64(route):
    if route not in _routes():
        pytest.skip(f"{route} needs the avx512 backend (and AVX512_BF16 for dpbf16)")
    before = fx.kernel_info()["kernels"]["matmul/bf16"]
    try:
        fx.set_kernel("matmul", "bf16", route)
        assert fx.kernel_info()["kernels"]["matmul/bf16"] == "avx512-" + route
        rng = np.random.default_rng(7)
        M, N, K = 37, 95, 1029
        a = fx.from_numpy(rng.standard_normal((M, K)).astype(np.float32), fmt="bf16")
        b = fx.from_numpy(rng.standard_normal((K, N)).astype(np.float32), fmt="bf16")
        c = fx.matmul(a, b, fmt="fp32").numpy().astype(np.float64)
        a64, b64 = a.numpy().astype(np.float64), b.numpy().astype(np.float64)
        ref = a64 @ b64
        # K fp32 roundings of the running sum: |c - ref| <= 1.01 (K + 2) 2^-24 sum |a_k b_k|
        bound = 1.01 * (K + 2) * 2.0**-24 * (np.abs(a64) @ np.abs(b64))
        assert np.all(np.abs(c - ref) <= bound)
    finally:
        fx.set_kernel("matmul", "bf16", before.split("-")[-1] if before.startswith("avx512-")
                      else before)
