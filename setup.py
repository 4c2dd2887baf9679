"""The optional compiled hot path (ledgermq.wire._native): built with the machine's C
compiler by the ordinary `pip install`; where it cannot build, the install still succeeds
and the pure-Python twins run (see ledgermq/wire/native.py)."""
from setuptools import Extension, setup

setup(ext_modules=[Extension(
    "ledgermq.wire._native", ["ledgermq/wire/_native.c", "ledgermq/wire/_native_walk.c",
     "ledgermq/wire/_native_send.c", "ledgermq/wire/_native_frame.c",
     "ledgermq/wire/_native_json.c", "ledgermq/wire/_native_store.c",
     "ledgermq/wire/_native_hpack.c"], libraries=["z"],
    depends=["ledgermq/wire/_native.h"],
    extra_compile_args=["-O2", "-std=c11", "-Wall", "-Wextra", "-Wno-unused-parameter",
                        "-Wno-missing-field-initializers"],
    optional=True)])
