"""Figures, tables and a report from ckv's HDF5 outputs (h5py, numpy, matplotlib only)."""
