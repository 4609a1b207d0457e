"""Matmul throughput per GPU against the catalog's `expected.matmul_tflops`.

Each GPU multiplies two bf16 matrices repeatedly; the result of one product is compared
with a float32 reference (a wrong answer is a FAIL whatever the speed). Without a GPU the
same test runs in float32 on the CPU against `CPU_EXPECTED_TFLOPS`. torch is imported
inside the functions so `runner --help` stays light.
"""

from __future__ import annotations

import time

from runner.preflight.rows import FAIL, PASS, WARN, Row

PASS_RATIO = 0.90  # at least this share of the expected figure passes
WARN_RATIO = 0.75  # between WARN_RATIO and PASS_RATIO warns; below fails
CPU_EXPECTED_TFLOPS = 0.001  # float32 on any x86 core since 2010 exceeds 1 GFLOP/s
TOLERANCE = {"bfloat16": 2e-2, "float32": 1e-4}


def verdict(measured: float, expected: float) -> str:
    """PASS, WARN or FAIL for a measured figure against the expected one."""
    ratio = measured / expected
    return PASS if ratio >= PASS_RATIO else WARN if ratio >= WARN_RATIO else FAIL


def measure(device: str, dtype_name: str, n: int, iters: int) -> tuple[float, float]:
    """(TFLOP/s, relative error of one product against a wider reference) on `device`."""
    import torch

    dtype = getattr(torch, dtype_name)
    gen = torch.Generator(device="cpu").manual_seed(0)
    a = torch.randn(n, n, generator=gen).to(device=device, dtype=dtype)
    b = torch.randn(n, n, generator=gen).to(device=device, dtype=dtype)
    wide = torch.float64 if device == "cpu" else torch.float32
    reference = a[:128].to(wide) @ b.to(wide)
    error = ((a[:128] @ b).to(wide) - reference).norm() / reference.norm()
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda *_: None)
    for _ in range(2):
        a @ b
    sync(device)
    start = time.perf_counter()
    for _ in range(iters):
        a @ b
    sync(device)
    seconds = time.perf_counter() - start
    return 2 * n**3 * iters / seconds / 1e12, float(error)


def check(expected_tflops: float | None, gpus: int | None = None) -> list[Row]:
    """One row: every GPU measured (the slowest named), or the CPU fallback."""
    import torch

    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if gpus is not None:
        count = min(count, gpus)
    if count == 0:
        tflops, error = measure("cpu", "float32", 384, 8)
        return [_row("CPU", [tflops], [error], CPU_EXPECTED_TFLOPS, "float32")]
    results = [measure(f"cuda:{i}", "bfloat16", 8192, 50) for i in range(count)]
    expected = expected_tflops if expected_tflops is not None else 0.0
    return [_row("GPU", [r[0] for r in results], [r[1] for r in results], expected, "bfloat16")]


def _row(unit: str, tflops: list[float], errors: list[float], expected: float, dtype: str) -> Row:
    data = {"tflops": tflops, "expected_tflops": expected, "dtype": dtype}
    wrong = [i for i, e in enumerate(errors) if e > TOLERANCE[dtype]]
    if wrong:
        names = ", ".join(f"{unit}{i} error {errors[i]:.2e}" for i in wrong)
        return Row("matmul", FAIL, f"wrong results: {names}", data=data)
    slowest = min(range(len(tflops)), key=tflops.__getitem__)
    label = unit if unit == "CPU" else f"{unit}{slowest}"
    figure = tflops[slowest]
    if expected <= 0:
        return Row("matmul", WARN, f"{label} {figure:.1f} TFLOP/s, no expected figure", data=data)
    shown = f"{figure * 1000:.1f} GFLOP/s" if figure < 1 else f"{figure:.0f} TFLOP/s"
    want = f"{expected * 1000:.1f} GFLOP/s" if expected < 1 else f"{expected:.0f} TFLOP/s"
    detail = f"slowest {label} {shown}, {figure / expected:.0%} of expected {want} ({dtype})"
    return Row("matmul", verdict(figure, expected), detail, data=data)
