"""Run tracking: MLflow (parameters, per-step metrics, artifacts) and console output, rank 0 only."""

from mua.track.tracker import Tracker, flatten_params, tracking_uri

__all__ = ["Tracker", "flatten_params", "tracking_uri"]
