"""The one compiled part of tierlog: the produce path's batch checks and record walk in C
(src/tierlog/records/_cwalk.c). Optional: without a C compiler the install goes on and the broker
runs the Python checks and the numba walk instead (tierlog.records.reader), which give the same results."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "tierlog.records._cwalk",
            sources=["src/tierlog/records/_cwalk.c"],
            extra_compile_args=["-O3"],
            optional=True,
        )
    ]
)
