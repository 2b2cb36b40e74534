"""Training: the Hydra pipeline that trains, checkpoints, resumes and sweeps agents."""
