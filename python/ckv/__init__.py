"""ckv from Python (docs/PYTHON.md): the C++ library's forward pass, recordings, selections
and bounds on numpy arrays, and its output files as numpy arrays and pandas tables.

    import ckv
    model = ckv.load()                       # the default model ($CKV_MODEL or models/)
    rec = model.run("The Eiffel Tower is in Paris. ...", record="q,k,v,attn,nu,logits")
    rec.q.shape                              # [layer, head, pos, d_head], post-RoPE
    res = ckv.bound(rec.q[3], rec.k[3], rec.v[3], model.wo(3), context_end=rec.context_end,
                    methods=["snapkv", "criticalkv(snapkv)"], budgets=[0.2])
    res.mean("L1")                           # [method, budget, head]
    f = ckv.open("bound.h5"); ckv.table(f)   # a pandas DataFrame

Every number comes from the library the CLI runs (lib/), never from a second implementation.
Errors are ckv.Error and its subclasses, with the CLI's one-line message.
"""
from ._ckv import (  # noqa: F401
    DeviceError,
    Error,
    FormatError,
    InputError,
    IoError,
    UnsupportedError,
    UsageError,
    budget_from_fraction,
    default_model_path,
)
from .analysis import BoundResult, bound, select, selection_params, value_norms  # noqa: F401
from .files import open, table  # noqa: F401,A001
from .model import Model, Recording, load  # noqa: F401

__version__ = "0.1.0"


def __getattr__(name):
    # The reader (and h5py, a third of the import time) loads on first use.
    if name == "SchemaError":
        from .reader import SchemaError

        return SchemaError
    raise AttributeError(f"module 'ckv' has no attribute {name!r}")
