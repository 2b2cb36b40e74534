"""Fitting: the simulator calibrated to measurements, and its report."""
