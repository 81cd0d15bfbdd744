"""A run's own logs (TensorBoard, the Trainer's state, Lightning's CSV, MLflow): read
(``read``), held against what the recording measured (``truth``) and compared run to run
(``pairs``); the shared model in ``model``."""
