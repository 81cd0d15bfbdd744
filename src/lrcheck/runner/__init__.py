"""How a run is trained: the loop, the recording, the frameworks, the processes."""
