"""Fitting: the simulator calibrated to measurements, and what the fit achieved.

Imports the core and :mod:`dynamiccl.profiler.formats` (it fits records).

* :mod:`.calibrate` – least-squares fit of tier values plus the refinements of :mod:`.fit_params`
  (what can be fitted, how it is coded for the solver, its prior), solved by :mod:`.least_squares`
  (bounded trust-region reflective, on NumPy alone: the core install has no SciPy);
* :mod:`.fit_report` – error tables, the held-out check, the fitted YAML; :mod:`.fit_plot` –
  measured against predicted time;
* :mod:`.synthetic` – measurements of a system whose truth is known, to check the fit on.
"""
