"""ckv's reader of its HDF5 outputs lives in the Python package: python/ckv/reader.py
(`ckv.open`, docs/PYTHON.md). This module loads that file by path, so the analysis scripts
run from a checkout with Debian's python (h5py, numpy) whether or not `ckv` is installed.
"""
import importlib.util
import sys
from pathlib import Path

_NAME = "analysis._ckv_reader"
if _NAME not in sys.modules:
    _spec = importlib.util.spec_from_file_location(
        _NAME, Path(__file__).resolve().parent.parent / "python" / "ckv" / "reader.py")
    _module = importlib.util.module_from_spec(_spec)
    sys.modules[_NAME] = _module  # dataclasses look their module up while being defined
    _spec.loader.exec_module(_module)
_reader = sys.modules[_NAME]
globals().update({k: v for k, v in vars(_reader).items() if not k.startswith("__")})
