"""kernel_info() and set_kernel(): the CPU, its measured instruction limits, the kernel per op
and format, forcing the bf16 GEMM route and the int16 GEMM kernel, both bf16 routes' matmuls
against an fp64 reference, and every int16 kernel's matmul bits equal to the scalar
backend's."""
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
    if "amx_bf16" not in fx.cpu_features():
        with pytest.raises(fx.UnsupportedError):
            fx.set_kernel("matmul", "bf16", "amx")
    assert fx.kernel_info()["kernels"]["matmul/bf16"] == before


def _routes():
    if fx.backend() != "avx512":
        return []
    feats = fx.cpu_features()
    if "avx512bf16" not in feats:
        return ["widen"]
    # amx: where the CPU has it and the OS lets the process use it (set_kernel says)
    return ["widen", "dpbf16"] + (["amx"] if "amx_bf16" in feats else [])


@pytest.mark.parametrize("route", ["widen", "dpbf16", "amx"])
def test_routes_against_fp64(route):
    if route not in _routes():
        pytest.skip(f"{route} needs the avx512 backend (and AVX512_BF16 for dpbf16, AMX-BF16 "
                    "for amx)")
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


def test_kernel_info_limits():
    if not has("flexpoint_instruction_limits"):
        pytest.skip("library without flexpoint_instruction_limits")
    info = fx.kernel_info()
    lim = info["limits"]
    assert set(lim) == {"fp32_fma", "i16_pairs", "bf16_pairs"}
    feats = info["features"]
    # measured once per process: a second call gives the same numbers
    assert fx.kernel_info()["limits"] == lim
    if "fma" in feats:
        # a CPU with FMA retires at least one 256-bit FMA per ns (16 GFLOP/s) and fewer than
        # 10 per ns (1,600 GFLOP/s at 512 bits) even with several pipes
        assert 16.0 <= lim["fp32_fma"] < 1600.0
        assert f"{lim['fp32_fma']:.1f} GFLOP/s" in info["limits_report"]
    if "avx2" in feats:
        assert lim["i16_pairs"] > 0.0
        assert f"{lim['i16_pairs']:.1f} GOP/s" in info["limits_report"]
    assert (lim["bf16_pairs"] > 0.0) == ("avx512bf16" in feats)


def _i16_kernels():
    if fx.backend() == "scalar":
        return []
    vnni = "avx512vnni" in fx.cpu_features() and fx.backend() == "avx512"
    amx = vnni and "amx_int8" in fx.cpu_features()
    return ["auto", "split", "fast"] + (["wrap"] if vnni else []) + (["amx"] if amx else [])


def test_set_kernel_i16_bad_input():
    before = fx.kernel_info()["kernels"]["matmul/flex16_5"]
    with pytest.raises(fx.UnknownNameError):
        fx.set_kernel("matmul", "flex16_5", "fastest")
    if "avx512vnni" not in fx.cpu_features():
        with pytest.raises(fx.UnsupportedError):
            fx.set_kernel("matmul", "dfp16", "wrap")
    assert fx.kernel_info()["kernels"]["matmul/flex16_5"] == before


def test_i16_kernels_same_bits():
    kernels = _i16_kernels()
    if not kernels:
        pytest.skip("the scalar backend has one int16 matmul")
    rng = np.random.default_rng(11)
    a = rng.standard_normal((70, 300)).astype(np.float32)
    b = rng.standard_normal((300, 90)).astype(np.float32)
    full = rng.uniform(-1.0, 1.0, (300, 90)).astype(np.float32)
    results = {}
    try:
        for k in kernels:
            fx.set_kernel("matmul", "flex16_5", k)
            name = fx.kernel_info()["kernels"]["matmul/dfp16"]
            if k == "auto":  # the AMX kernel's own name where the measurement took it
                amx_auto = "int16 AMX under auto" in fx.kernel_info()["report"] and \
                    "int16 kernel: AMX-INT8" in fx.kernel_info()["report"]
                assert name == fx.backend() + ("-i16-amx" if amx_auto else "-i16")
            else:
                assert name == fx.backend() + "-i16-" + k
            assert "chosen by flexpoint_set_kernel" in fx.kernel_info()["report"]
            outs = []
            for fmt in ("flex16_5", "dfp16"):
                for bb in (b, full):
                    ta = fx.from_numpy(a, fmt=fmt)
                    tb = fx.from_numpy(bb, fmt=fmt)
                    outs.append(fx.matmul(ta, tb, fmt=fmt).numpy())
            results[k] = outs
        backend = fx.backend()
        fx.set_backend("scalar")
        try:
            ref = []
            for fmt in ("flex16_5", "dfp16"):
                for bb in (b, full):
                    ref.append(fx.matmul(fx.from_numpy(a, fmt=fmt), fx.from_numpy(bb, fmt=fmt),
                                         fmt=fmt).numpy())
        finally:
            fx.set_backend(backend)
    finally:
        fx.set_kernel("matmul", "flex16_5", "auto")
    for k, outs in results.items():
        for got, want in zip(outs, ref):
            assert np.array_equal(got, want), k


@pytest.mark.skipif(not has("flexpoint_gemm_i16_stats"), reason="library without GEMM counts")
def test_gemm_i16_stats_counts_a_product():
    """A FLEX16_5 matmul of small Gaussian values on a SIMD level adds units, each with its pairs
    (K = 256: one K block of 128 pairs); the counts never go down."""
    if fx.backend() == "scalar":
        pytest.skip("the portable level counts no units")
    rng = np.random.default_rng(5)
    a = fx.from_numpy(rng.standard_normal((64, 256)).astype(np.float32), "flex16_5")
    b = fx.from_numpy(rng.standard_normal((256, 64)).astype(np.float32), "flex16_5")
    s0 = fx.gemm_i16_stats()
    fx.matmul(a, b)
    s1 = fx.gemm_i16_stats()
    d = {k: s1[k] - s0[k] for k in s0}
    assert all(v >= 0 for v in d.values())
    units = d["fast_tiles"] + d["anydata_tiles"]
    if units == 0:
        pytest.skip("this product ran on the AMX kernel, which is not counted")
    assert d["fast_pairs"] + d["anydata_pairs"] == 128 * units
    assert d["fast_chains"] >= d["fast_tiles"]
