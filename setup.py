"""The one compiled part of tierlog: the record walk of the produce path in C
(src/tierlog/records/_cwalk.c). Optional: without a C compiler the install goes on and the broker
uses the numba walk instead (tierlog.records.reader), which gives the same results."""

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
