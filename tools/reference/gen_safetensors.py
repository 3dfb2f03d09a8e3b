#!/usr/bin/env python3
"""Writes tests/data/reference/python_written.safetensors with the Python `safetensors` library,
and checks that a file written by mixgrad holds the same tensors bit for bit.

Run once by a developer, by hand; never by the build or the tests (tests/io/test_safetensors.cpp
reads the stored file and knows the values below, so the tests need no Python):

    /usr/bin/python3 -m venv --system-site-packages /tmp/stvenv     # Debian's python3-torch 1.13
    /tmp/stvenv/bin/pip install safetensors                          # 0.8.0 was used
    /tmp/stvenv/bin/python tools/reference/gen_safetensors.py write  # -> tests/data/reference/

The other direction (mixgrad writes, Python reads), also by hand:

    MG_IO_INTEROP_DIR=/tmp ./build/tests/test_io "[.interop]"       # writes /tmp/mixgrad_written.safetensors
    /tmp/stvenv/bin/python tools/reference/gen_safetensors.py check /tmp/mixgrad_written.safetensors

`check` loads the file with safetensors.torch.load_file and compares every tensor's dtype, shape
and bit pattern (NaN payloads, -0.0 and subnormals included) with the values below.

The values (the C++ test spells out the same ones): special floats are given as bit patterns.
"""
import argparse
import os
import sys

import torch
from safetensors.torch import load_file, save_file


def bits(values, int_dtype, float_dtype, shape):
    return torch.tensor(values, dtype=int_dtype).view(float_dtype).reshape(shape)


def reference_tensors():
    return {
        # 0.1, -0.0, 1e-300, 5e-324 (smallest subnormal), inf, NaN with payload 1
        "f64": bits([0x3FB999999999999A, -0x8000000000000000, 0x01A56E1FC2F8F359, 0x0000000000000001,
                     0x7FF0000000000000, 0x7FF8000000000001], torch.int64, torch.float64, [2, 3]),
        # 1/3, -2^-149 (negative smallest subnormal), NaN with payload 0x123, -65504.0
        "f32": bits([0x3EAAAAAB, -0x7FFFFFFF, 0x7FC00123, -0x38802000], torch.int32, torch.float32, [4]),
        # 1, 65504, 2^-24, -0.0, inf, -inf, NaN payload 1, 0.333251953125
        "f16": bits([0x3C00, 0x7BFF, 0x0001, -0x8000, 0x7C00, -0x0400, 0x7E01, 0x3555],
                    torch.int16, torch.float16, [2, 4]),
        # 1, -123.5, smallest subnormal, -0.0, inf, NaN payload 1
        "bf16": bits([0x3F80, -0x3D09, 0x0001, -0x8000, 0x7F80, 0x7FC1], torch.int16, torch.bfloat16, [2, 3]),
        "i64": torch.tensor([-2**63, 2**63 - 1, -1, 1234567890123456789], dtype=torch.int64),
        "i32": torch.tensor([-2**31, 2**31 - 1, -7], dtype=torch.int32),
        "u8": torch.tensor([0, 1, 128, 255], dtype=torch.uint8),
        "bool": torch.tensor([[True, False], [False, True]]),
        "scalar": torch.tensor(2.5, dtype=torch.float64),
        "empty": torch.zeros([0, 3], dtype=torch.float32),
    }


INT_VIEW = {torch.float64: torch.int64, torch.float32: torch.int32, torch.float16: torch.int16,
            torch.bfloat16: torch.int16}


def same_bits(a, b):
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    view = INT_VIEW.get(a.dtype)
    if view is not None:
        return torch.equal(a.view(view), b.view(view))
    return torch.equal(a, b)


def check(path):
    ref = reference_tensors()
    got = load_file(path)
    ok = True
    for name, want in ref.items():
        if name not in got:
            print(f"{name}: missing")
            ok = False
        elif not same_bits(got[name], want):
            print(f"{name}: differs: got {got[name].dtype} {list(got[name].shape)} {got[name]}, "
                  f"want {want.dtype} {list(want.shape)} {want}")
            ok = False
        else:
            print(f"{name}: {want.dtype} {list(want.shape)} identical bits")
    for name in got:
        if name not in ref:
            print(f"{name}: unexpected tensor")
            ok = False
    print("all identical" if ok else "MISMATCH")
    return ok


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("write")
    w.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "..", "tests", "data",
                                                 "reference", "python_written.safetensors"))
    c = sub.add_parser("check")
    c.add_argument("path")
    args = parser.parse_args()
    if args.cmd == "write":
        import safetensors
        # One metadata entry: the reference writer orders metadata keys arbitrarily, and the C++ test
        # checks that mixgrad writes these same tensors and metadata as the very same bytes.
        save_file(reference_tensors(), args.out,
                  metadata={"written_by": f"tools/reference/gen_safetensors.py (torch {torch.__version__}, "
                                          f"safetensors {safetensors.__version__})"})
        print("wrote", os.path.normpath(args.out))
        sys.exit(0 if check(args.out) else 1)
    sys.exit(0 if check(args.path) else 1)


if __name__ == "__main__":
    main()
