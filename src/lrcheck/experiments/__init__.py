"""What is trained: tasks (data and model) and schedulers, each a registry of plain data."""
