"""Several processes: the torchrun command line, launching and watching a job, the worker each
rank runs, the files they hand over, the process group, process hygiene, the fault switch."""
