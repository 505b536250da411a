# cffi needs setup.py for cffi_modules; everything else lives in pyproject.toml.
from setuptools import setup

# The extension is built against CPython's limited API (cffi's default), so one wheel serves every
# CPython >= 3.9: tag it abi3, not with the building interpreter's version.
setup(cffi_modules=["pecore/_build.py:ffibuilder"], zip_safe=False, options={"bdist_wheel": {"py_limited_api": "cp39"}})
