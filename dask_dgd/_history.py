"""An estimator's ``history_`` built from its fit's step records when first read.

A fit keeps its records as plain dicts (``_history_records``: ``(records, attrs)``);
the DataFrame is built once, on the first read of ``history_``: on a fit of a few
thousand rows, or a grid of a few hundred cells, building it took a tenth of the fit.
Pickles and saved models hold the DataFrame under its own name (the format's loader
knows the fitted attributes by name).
"""

__all__ = ["LazyHistory"]


class LazyHistory:
    """Mixin (before ``BaseEstimator`` in the bases): ``history_`` from ``_history_records``."""

    def __getstate__(self):
        state = super().__getstate__()
        if state.pop("_history_records", None) is not None:
            state["history_"] = self.history_
        return state

    def __getattr__(self, name):
        # only for names not found otherwise
        pending = self.__dict__.get("_history_records") if name == "history_" else None
        if pending is not None:
            import pandas as pd

            records, attrs = pending
            frame = pd.DataFrame.from_records(records)
            frame.attrs.update(attrs)
            self.history_ = frame
            self.__dict__.pop("_history_records", None)
            return frame
        if name == "history_" and "history_" in self.__dict__:  # (built by another thread meanwhile)
            return self.__dict__["history_"]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute {name!r}")
