"""Climate models on xarray gridded datasets (dimensions such as time, lat, lon).

:func:`to_design_matrix` turns a Dataset into a lazy design matrix (masked cells
dropped, ``cos(latitude)`` area weights, lags, lead time, seasonal terms, any
calendar); :class:`ClimateRegressor` fits one pooled model or one model per grid cell
and predicts back onto the grid with the coordinates intact.
"""

from ._design import DesignMatrix, from_design_matrix, to_design_matrix
from ._regressor import ClimateRegressor

__all__ = ["ClimateRegressor", "DesignMatrix", "from_design_matrix", "to_design_matrix"]
