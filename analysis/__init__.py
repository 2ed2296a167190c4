"""Figures, tables and a report from ckv's HDF5 outputs (h5py, numpy, matplotlib only)."""
import matplotlib

matplotlib.use("Agg")   # files only, no display: set before any module imports pyplot
