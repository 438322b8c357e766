#!/usr/bin/env python3
"""Builds scripts/gpu_check/noop_profiler.c as scripts/gpu_check.sh does and checks its tables.

  check_noop_plugin.py SOURCE WORKDIR [CC]

Each of ncclProfiler_v4 .. _v7 is named "noop"; init returns success, sets the activation mask
to 0 (from 4095) and the context to NULL; startEvent returns a NULL handle; stopEvent,
recordEventState and finalize return success. Exit 0 when all hold.
"""
import ctypes
import os
import subprocess
import sys

RES = ctypes.c_int
VP = ctypes.c_void_p
INIT_V5 = ctypes.CFUNCTYPE(RES, ctypes.POINTER(VP), ctypes.c_uint64, ctypes.POINTER(ctypes.c_int), ctypes.c_char_p,
                           ctypes.c_int, ctypes.c_int, ctypes.c_int, VP)
INIT_V4 = ctypes.CFUNCTYPE(RES, ctypes.POINTER(VP), ctypes.POINTER(ctypes.c_int), ctypes.c_char_p, ctypes.c_uint64,
                           ctypes.c_int, ctypes.c_int, ctypes.c_int, VP)
START = ctypes.CFUNCTYPE(RES, VP, ctypes.POINTER(VP), VP)
STOP = ctypes.CFUNCTYPE(RES, VP)
RECORD = ctypes.CFUNCTYPE(RES, VP, ctypes.c_int, VP)
FINALIZE = ctypes.CFUNCTYPE(RES, VP)


def table(init):
    class T(ctypes.Structure):
        _fields_ = [("name", ctypes.c_char_p), ("init", init), ("startEvent", START), ("stopEvent", STOP),
                    ("recordEventState", RECORD), ("finalize", FINALIZE)]
    return T


def main():
    src, work = sys.argv[1], sys.argv[2]
    cc = sys.argv[3] if len(sys.argv) > 3 else "cc"
    os.makedirs(work, exist_ok=True)
    so = os.path.join(work, "libnccl-profiler-noop.so")
    subprocess.run([cc, "-shared", "-fPIC", "-O2", "-Wall", "-Wextra", "-Werror", "-o", so, src], check=True)
    lib = ctypes.CDLL(so)
    bad = []
    for v in (4, 5, 6, 7):
        t = table(INIT_V4 if v == 4 else INIT_V5).in_dll(lib, "ncclProfiler_v%d" % v)
        ctx, mask = VP(1234), ctypes.c_int(4095)
        if v == 4:
            rc = t.init(ctypes.byref(ctx), ctypes.byref(mask), b"comm", 42, 1, 1, 0, None)
        else:
            rc = t.init(ctypes.byref(ctx), 42, ctypes.byref(mask), b"comm", 1, 1, 0, None)
        handle = VP(5678)
        start = t.startEvent(ctx, ctypes.byref(handle), None)
        got = (t.name, rc, mask.value, ctx.value, start, handle.value, t.stopEvent(None),
               t.recordEventState(None, 22, None), t.finalize(ctx))
        want = (b"noop", 0, 0, None, 0, None, 0, 0, 0)
        print("ncclProfiler_v%d: name, init, mask, context, startEvent, handle, stop, record, finalize = %s" % (v, got))
        if got != want:
            bad.append("ncclProfiler_v%d: %s, expected %s" % (v, got, want))
    for b in bad:
        print("FAIL: " + b)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
