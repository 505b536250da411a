# cffi needs setup.py for cffi_modules; everything else lives in pyproject.toml.
from setuptools import setup

setup(cffi_modules=["pecore/_build.py:ffibuilder"], zip_safe=False)
