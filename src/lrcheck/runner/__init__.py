"""How a run is trained: data order, step arithmetic, policies, the loop."""
