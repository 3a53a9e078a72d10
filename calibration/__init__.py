"""Calibration: time a real transformer with PyTorch and fit the simulator's cost curves."""
