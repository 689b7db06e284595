"""Grids as scientists have them (issue 50, items 3-5): latitude units read or refused,
rotated-pole grids weighted by their cells' area, dimensions classified from iris's
suffixed names and from 2-D auxiliary coordinates, and the latitude for the weights
following that classification (ORCA2 from iris-sample-data end to end)."""

import glob
import logging
import os

import dask
import numpy as np
import pytest
import xarray as xr
from sklearn.linear_model import LinearRegression as SkLinear
from sklearn.linear_model import Ridge

from dask_dgd import InputError
from dask_dgd.climate import ClimateRegressor, to_design_matrix
from dask_dgd.climate._areas import centre_areas, polygon_areas

_POOLED = {"model": "pooled", "solver": "lbfgs", "max_iter": 500, "tol": 1e-12}


def _grid(dims=("time", "lat", "lon"), lat=None, lon=None, T=24, seed=0, lat_attrs=None, lon_attrs=None):
    """``tas = 1 + slope(row) a + noise`` on ``dims``; ``lat``/``lon``: the Y and X
    coordinate values (None: no coordinate)."""
    lat = np.linspace(-60.0, 60.0, 4) if lat is None else np.asarray(lat, dtype=float)
    lon = np.arange(3) * 20.0 if lon is None else np.asarray(lon, dtype=float)
    Y, X = lat.shape[0], lon.shape[-1]
    rng = np.random.default_rng(seed)
    a = rng.normal(size=(T, Y, X))
    slope = 2.0 + 1.5 * np.arange(Y)[:, None]  # differs by row: the weights matter to a pooled fit
    tas = 1.0 + slope * a + 0.05 * rng.normal(size=(T, Y, X))
    coords = {dims[0]: xr.date_range("2000-01-01", periods=T, freq="MS")}
    if lat_attrs is not False:
        coords[dims[1]] = (dims[1], lat, lat_attrs or {})
    if lon_attrs is not False:
        coords[dims[2]] = (dims[2], lon, lon_attrs or {})
    return xr.Dataset({"a": (dims, a), "tas": (dims, tas, {"units": "K"})}, coords=coords).chunk({dims[0]: 8})


def _weights(ds, **kw):
    """The area weight of each spatial cell, as the design matrix has it."""
    dm = to_design_matrix(ds, ["a"], "tas", **kw)
    w = dm.to_dataarray(dm.sample_weight).compute()
    return w.isel({dm.spec.time_dim: 0}).transpose(*dm.spec.space_dims()).values


def _wls_slope(ds, weights):
    """The slope of ``tas ~ a`` by scikit-learn with ``weights`` on the spatial cells."""
    a, tas = ds["a"].values, ds["tas"].values
    w = np.broadcast_to(weights, a.shape)
    return SkLinear().fit(a.reshape(-1, 1), tas.ravel(), sample_weight=w.ravel()).coef_[0]


# ------------------------------------------------------------ item 3: latitude units
def test_radians_without_units_are_refused_as_ambiguous_with_the_fix(client):
    rad = np.deg2rad(np.array([-20.0, 10.0, 40.0, 80.0]))  # every value below 1.6
    ds = _grid(lat=rad)
    msg = (r"the latitude coordinate 'lat' has no units and ranges from -0\.349066 to 1\.39626, within \[-pi/2, pi/2\]: "
           r"radians, or a narrow band in degrees\? Say which: ds\['lat'\]\.attrs\['units'\] = 'radians' \(or "
           r"'degrees_north'\), or pass area_weights=False")
    with pytest.raises(InputError, match=msg):
        ClimateRegressor("a", "tas", client=client, **_POOLED).fit(ds)
    with pytest.raises(InputError, match=msg):
        ClimateRegressor("a", "tas", model="pointwise").fit(ds)
    with pytest.raises(InputError, match=msg):
        to_design_matrix(ds, ["a"], "tas", lat="lat")
    # a NaN among them changes nothing: the finite values decide
    with pytest.raises(InputError, match=r"no units and ranges from -0\.349066 to 1\.39626"):
        to_design_matrix(ds.assign_coords(lat=np.r_[rad[:2], np.nan, rad[3:]]), ["a"], "tas")
    # the fixes: say radians (the weights are cos of the values), or degrees (a narrow band)
    ds["lat"].attrs["units"] = "radians"
    np.testing.assert_allclose(_weights(ds)[:, 0], np.cos(rad), rtol=1e-12)
    est = ClimateRegressor("a", "tas", client=client, **_POOLED).fit(ds)
    slope = _wls_slope(ds, np.cos(rad)[:, None])
    assert abs(slope - _wls_slope(ds, np.cos(np.deg2rad(rad))[:, None])) > 0.05  # the weights read as degrees differ
    np.testing.assert_allclose(float(est.coef_.sel(feature="a")), slope, rtol=1e-5)
    ds["lat"].attrs["units"] = "degrees_north"
    np.testing.assert_allclose(_weights(ds)[:, 0], np.cos(np.deg2rad(rad)), rtol=1e-12)
    del ds["lat"].attrs["units"]
    assert np.isfinite(ClimateRegressor("a", "tas", model="pointwise", area_weights=False).fit(ds).coef_).all()


@pytest.mark.parametrize("units", ["degrees_north", "degree_N", "degreesN", "degrees", "degree", "Degrees"])
def test_units_saying_degrees_are_degrees(units):
    band = np.array([-1.5, -0.5, 0.5, 1.5])  # a narrow band near the equator
    ds = _grid(lat=band, lat_attrs={"units": units})
    np.testing.assert_allclose(_weights(ds)[:, 0], np.cos(np.deg2rad(band)), rtol=1e-12)


@pytest.mark.parametrize("units", ["radians", "radian", "rad"])
def test_units_saying_radians_are_radians(units):
    rad = np.array([-1.2, -0.4, 0.4, 1.2])
    ds = _grid(lat=rad, lat_attrs={"units": units})
    np.testing.assert_allclose(_weights(ds)[:, 0], np.cos(rad), rtol=1e-12)


def test_values_beyond_pi_over_2_without_units_stay_degrees():
    lat = np.array([-10.0, -1.0, 1.0, 10.0])
    np.testing.assert_allclose(_weights(_grid(lat=lat))[:, 0], np.cos(np.deg2rad(lat)), rtol=1e-12)


@pytest.mark.parametrize("units", ["m", "km", "1"])
def test_other_units_are_refused_as_not_a_latitude(units):
    ds = _grid(lat=[-3e5, -1e5, 1e5, 3e5], lat_attrs={"units": units})
    with pytest.raises(InputError, match=rf"the coordinate 'lat' has units '{units}', which are not a latitude's "
                                         r"\(degrees_north, degrees or radians\): area weights need the latitude of "
                                         r"every cell; pass lat=<the latitude coordinate in degrees>, or "
                                         r"area_weights=False"):
        to_design_matrix(ds, ["a"], "tas", lat="lat")
    # "auto" classifies 'lat' as Y by its name, then finds its units are not a latitude's
    with pytest.raises(InputError, match=rf"the latitude-like \(Y\) dimension 'lat' has a coordinate that is not a "
                                         rf"latitude \(units '{units}'\) and no 2-D latitude coordinate over "
                                         r"\['lat', 'lon'\] gives the latitude of each cell for the area weights: "
                                         r"give each cell its latitude .*, pass lat=<the latitude coordinate in "
                                         r"degrees>, or area_weights=False"):
        ClimateRegressor("a", "tas", model="pointwise").fit(ds)
    assert to_design_matrix(ds, ["a"], "tas", area_weights=False).spec.sample_dims == ("time", "lat", "lon")


# --------------------------------------------------------- item 4: rotated-pole grids
_POLE_LAT, _POLE_LON = 39.25, 198.0  # the EURO-CORDEX rotated pole


def _rotation(pole_lat, pole_lon, north_pole_grid_longitude=0.0):
    """The matrix taking rotated Cartesian vectors to true ones: the rotated north pole
    is at true (pole_lat, pole_lon), the true north pole at rotated longitude
    ``north_pole_grid_longitude`` (CF's definitions)."""
    def rz(deg):
        c, s = np.cos(np.deg2rad(deg)), np.sin(np.deg2rad(deg))
        return np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])

    def ry(deg):
        c, s = np.cos(np.deg2rad(deg)), np.sin(np.deg2rad(deg))
        return np.array([[c, 0.0, s], [0.0, 1.0, 0.0], [-s, 0.0, c]])

    # move the true pole to rotated longitude 0 and tilt the z axis from the north pole down to the grid pole
    return rz(pole_lon) @ ry(90.0 - pole_lat) @ rz(180.0 - north_pole_grid_longitude)


def _true_lat_lon(rlat, rlon, *pole):
    rlat, rlon = np.broadcast_arrays(rlat, rlon)
    v = np.stack([np.cos(np.deg2rad(rlat)) * np.cos(np.deg2rad(rlon)),
                  np.cos(np.deg2rad(rlat)) * np.sin(np.deg2rad(rlon)), np.sin(np.deg2rad(rlat))], axis=-1)
    t = v @ _rotation(*pole).T
    return np.rad2deg(np.arcsin(np.clip(t[..., 2], -1, 1))), np.rad2deg(np.arctan2(t[..., 1], t[..., 0]))


def test_the_test_rotation_follows_the_cf_definitions():
    # the rotated north pole lands at the grid pole, the true pole at rotated (pole_lat, 0), and the rotated
    # origin at (90 - pole_lat, pole_lon - 180); an unrotated pole at 90 gives back the rotated latitude
    lat, lon = _true_lat_lon(np.array([90.0, _POLE_LAT, 0.0]), np.array([0.0, 0.0, 0.0]), _POLE_LAT, _POLE_LON)
    np.testing.assert_allclose(lat, [_POLE_LAT, 90.0, 90.0 - _POLE_LAT], atol=1e-12)
    np.testing.assert_allclose(np.mod(lon[[0, 2]], 360.0), [_POLE_LON, _POLE_LON - 180.0], atol=1e-9)
    rlat = np.linspace(-80.0, 80.0, 9)
    np.testing.assert_allclose(_true_lat_lon(rlat, np.full(9, 33.0), 90.0, 180.0)[0], rlat, atol=1e-12)
    # north_pole_grid_longitude moves the true pole to that rotated longitude
    np.testing.assert_allclose(_true_lat_lon(np.array([_POLE_LAT]), np.array([25.0]), _POLE_LAT, _POLE_LON,
                                             25.0)[0], [90.0], atol=1e-12)


def _rotated(rlat_name="rlat", rlon_name="rlon", attrs=True, bounds=False, T=24):
    """A EURO-CORDEX-like rotated-pole Dataset: CF grid mapping, 1-D rotated
    coordinates and the 2-D true latitude/longitude."""
    rlat = np.linspace(-23.375, 21.835, 6)
    rlon = np.linspace(-28.375, 18.155, 5)
    ds = _grid(("time", rlat_name, rlon_name), lat=rlat, lon=rlon, T=T,
               lat_attrs={"standard_name": "grid_latitude", "units": "degrees"} if attrs else {"units": "degrees"},
               lon_attrs={"standard_name": "grid_longitude", "units": "degrees"} if attrs else {"units": "degrees"})
    lat, lon = _true_lat_lon(rlat[:, None], rlon[None, :], _POLE_LAT, _POLE_LON)
    ds = ds.assign_coords(lat=((rlat_name, rlon_name), lat, {"standard_name": "latitude", "units": "degrees_north"}),
                          lon=((rlat_name, rlon_name), lon, {"standard_name": "longitude", "units": "degrees_east"}))
    ds["rotated_pole"] = xr.DataArray(0, attrs={"grid_mapping_name": "rotated_latitude_longitude",
                                                "grid_north_pole_latitude": _POLE_LAT,
                                                "grid_north_pole_longitude": _POLE_LON})
    ds["tas"].attrs.update(grid_mapping="rotated_pole", coordinates="lat lon")
    if bounds:
        half = (rlat[1] - rlat[0]) / 2
        ds = ds.assign_coords(rlat_bnds=((rlat_name, "bnds"), np.stack([rlat - half, rlat + half], axis=1)))
        ds[rlat_name].attrs["bounds"] = "rlat_bnds"
    return ds


def _cell_areas(rlat, rlon, order=12):
    """Each cell's area on the unit sphere, computed in *true* coordinates: the integral
    of cos(lat) |d(lat, lon)/d(rlat, rlon)| over the cell, by Gauss-Legendre quadrature
    of the mapping to true latitude and longitude (its Jacobian by central differences)."""
    x, gw = np.polynomial.legendre.leggauss(order)
    dlat, dlon = rlat[1] - rlat[0], rlon[1] - rlon[0]
    out = np.empty((rlat.size, rlon.size))
    h = 1e-5
    for j, c_lat in enumerate(rlat):
        for i, c_lon in enumerate(rlon):
            p = c_lat + x[:, None] * dlat / 2 + 0 * x[None, :]
            q = c_lon + x[None, :] * dlon / 2 + 0 * x[:, None]
            f = lambda a, b: _true_lat_lon(a, b, _POLE_LAT, _POLE_LON)  # noqa: E731
            lat = f(p, q)[0]
            (la1, lo1), (la0, lo0) = f(p + h, q), f(p - h, q)
            (lb1, mo1), (lb0, mo0) = f(p, q + h), f(p, q - h)
            dlo_p = np.mod(lo1 - lo0 + 180.0, 360.0) - 180.0
            dlo_q = np.mod(mo1 - mo0 + 180.0, 360.0) - 180.0
            jac = np.abs((la1 - la0) * dlo_q - dlo_p * (lb1 - lb0)) / (2 * h) ** 2
            integrand = np.cos(np.deg2rad(lat)) * jac * np.deg2rad(1.0) ** 2
            out[j, i] = (gw[:, None] * gw[None, :] * integrand).sum() * (dlat / 2) * (dlon / 2)
    return out


def test_rotated_cells_are_weighted_by_their_area_on_the_sphere_not_by_cos_true_latitude(client):
    ds = _rotated(bounds=True)
    rlat, rlon = ds["rlat"].values, ds["rlon"].values
    w = _weights(ds)
    area = _cell_areas(rlat, rlon)
    # the weights are the cells' areas (per unit of rotated latitude and longitude), computed independently
    np.testing.assert_allclose(w, area / np.deg2rad(rlat[1] - rlat[0]) / np.deg2rad(rlon[1] - rlon[0]), rtol=1e-8)
    # cos of the true latitude would not be: off by up to ~20% between cells
    cos_true = np.cos(np.deg2rad(ds["lat"].values))
    ratio = (cos_true / cos_true.mean()) / (area / area.mean())
    assert np.abs(ratio - 1).max() > 0.1
    # without bounds: cos of the rotated centre, to 1e-12 (cells of equal rotated width)
    plain = _rotated()
    np.testing.assert_allclose(_weights(plain), np.broadcast_to(np.cos(np.deg2rad(rlat))[:, None], (6, 5)),
                               rtol=1e-12)
    # and a pooled fit is the weighted least squares with those weights
    est = ClimateRegressor("a", "tas", client=client, **_POOLED).fit(plain)
    assert est.sample_dims_ == ("time", "rlat", "rlon")
    slope = _wls_slope(plain, np.cos(np.deg2rad(rlat))[:, None])
    assert abs(slope - _wls_slope(plain, cos_true)) > 0.01
    np.testing.assert_allclose(float(est.coef_.sel(feature="a")), slope, rtol=1e-5)


@pytest.mark.parametrize("case", ["standard_name", "name rlat", "grid_mapping"])
def test_every_rotated_latitude_is_recognised_and_logged(case, caplog):
    if case == "standard_name":
        ds, name = _rotated(), "rlat"
    elif case == "name rlat":
        ds, name = _rotated(attrs=False), "rlat"
    else:  # dimensions called y/x: only the grid mapping says they are rotated
        ds, name = _rotated("y", "x", attrs=False), "y"
    expected = np.broadcast_to(np.cos(np.deg2rad(ds[name].values))[:, None], (6, 5))
    with caplog.at_level(logging.INFO, logger="dask_dgd.climate"):
        np.testing.assert_allclose(_weights(ds), expected, rtol=1e-12)
    why = {"standard_name": "standard_name 'grid_latitude'", "name rlat": "its name",
           "grid_mapping": "a dimension of 'tas', whose grid_mapping 'rotated_pole' is rotated_latitude_longitude"}
    assert (f"area weights: {name!r} is a rotated latitude ({why[case]}): cells weighted by cos({name}), their "
            "area on the sphere (a rotation keeps areas)") in [r.getMessage() for r in caplog.records]
    # an explicit lat= naming it follows the same rule
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="dask_dgd.climate"):
        np.testing.assert_allclose(_weights(ds, lat=name), expected, rtol=1e-12)
    assert any("is a rotated latitude" in r.getMessage() for r in caplog.records)
    # without the grid mapping (nor units), plain y/x take the 2-D true latitude (a curvilinear grid)
    if case == "grid_mapping":
        del ds["tas"].attrs["grid_mapping"], ds["y"].attrs["units"]
        # which has no cell areas or vertex bounds here: its cells' areas estimated from the centres, within
        # 1.2% of the exact areas on these 9 by 12 degree cells (cos of the true latitude is off by ~20%)
        area = _cell_areas(ds["y"].values, ds["x"].values)
        np.testing.assert_allclose(_weights(ds), area / area.max(), rtol=0.012)


# ----------------------------------------------- item 5: dimensions and their latitude
@pytest.mark.parametrize("names", [("latitude_0", "longitude_0"), ("lat2", "lon_1")])
def test_suffixed_names_are_classified_and_give_the_weights(names, caplog):
    lat = np.linspace(-60.0, 60.0, 4)
    ds = _grid(("time",) + names, lat=lat)
    with caplog.at_level(logging.INFO, logger="dask_dgd.climate"):
        est = ClimateRegressor("a", "tas", model="pointwise", alpha=5.0).fit(ds)
    assert est.sample_dims_ == ("time",) + names
    stripped = [n.rstrip("_0123456789") for n in names]
    assert (f"{names[0]} (its name without the suffix ({stripped[0]!r})), "
            f"{names[1]} (its name without the suffix ({stripped[1]!r}))") in caplog.records[0].getMessage()
    np.testing.assert_allclose(_weights(ds)[:, 0], np.cos(np.deg2rad(lat)), rtol=1e-12)
    # the CF rules of the coordinate come first: a suffixed name with axis attributes says what it is
    swapped = _grid(("time",) + names, lat=lat, lat_attrs={"axis": "X"}, lon_attrs={"axis": "Y"})
    assert to_design_matrix(swapped, ["a"], "tas", area_weights=False).spec.sample_dims == (
        "time", names[1], names[0])


def _estimated(ds, lat, lon):
    """The weights of a curvilinear grid without cell areas or vertex bounds: its cells'
    areas estimated from the centres (their accuracy: tests/climate/test_climate_cell_areas.py)."""
    area = centre_areas(np.deg2rad(ds[lat].values), np.deg2rad(ds[lon].values))
    return area / area.max()


def _two_d(dims=("dim0", "dim1"), lat_attrs=None):
    """A curvilinear grid whose spatial dimensions have no coordinate values and
    whose latitude and longitude are 2-D auxiliary coordinates."""
    ds = _grid(("time",) + dims, lat_attrs=False, lon_attrs=False)
    nav_lat = np.linspace(-80.0, 30.0, 12).reshape(4, 3)
    nav_lon = np.tile(np.arange(3) * 30.0, (4, 1))
    return ds.assign_coords(
        nav_lat=(dims, nav_lat, {"standard_name": "latitude", "units": "degrees_north"} if lat_attrs is None
                 else lat_attrs),
        nav_lon=(dims, nav_lon, {"standard_name": "longitude", "units": "degrees_east"} if lat_attrs is None
                 else {}))


@pytest.mark.parametrize("dims", [("dim0", "dim1"), ("nj", "ni"), ("cell_y", "cell_x"), ("j_index", "i_index")])
def test_dimensions_spanned_by_a_2d_latitude_are_y_and_x(dims, caplog):
    ds = _two_d(dims)
    with caplog.at_level(logging.INFO, logger="dask_dgd.climate"):
        est = ClimateRegressor("a", "tas", model="pointwise", alpha=5.0).fit(ds)
    assert est.sample_dims_ == ("time",) + dims
    if dims[0] == "dim0":
        assert ("dim0 (dimension 1 of the 2-D latitude 'nav_lat'('dim0', 'dim1')), "
                "dim1 (dimension 2 of the 2-D latitude 'nav_lat'('dim0', 'dim1'))") in caplog.records[0].getMessage()
    np.testing.assert_allclose(_weights(ds), _estimated(ds, "nav_lat", "nav_lon"), rtol=1e-12)
    # found by name too (no attributes), and in (X, Y) storage order the 2-D coordinate's order decides
    bare = _two_d(dims, lat_attrs={})
    bare["tas"] = bare["tas"].transpose("time", dims[1], dims[0])  # stored (X, Y); nav_lat stays (Y, X)
    assert to_design_matrix(bare, ["a"], "tas").spec.sample_dims == ("time",) + dims


def test_a_2d_latitude_named_in_the_coordinates_attribute_is_used():
    # NEMO's own names, left as data variables (as a file read with decode_coords=False has them)
    ds = _two_d().rename({"nav_lat": "gphit", "nav_lon": "glamt"}).reset_coords(["gphit", "glamt"])
    with pytest.raises(InputError, match=r"'dim0', 'dim1', which sample_dims=\"auto\" cannot classify .*the 2-D "
                                         r"variable 'gphit'\('dim0', 'dim1'\) looks like its latitude"):
        to_design_matrix(ds, ["a"], "tas")
    ds["tas"].attrs["coordinates"] = "gphit glamt"
    assert to_design_matrix(ds, ["a"], "tas").spec.sample_dims == ("time", "dim0", "dim1")
    np.testing.assert_allclose(_weights(ds), _estimated(ds, "gphit", "glamt"), rtol=1e-12)
    # without CF attributes the name in the attribute alone does not say which is the latitude
    del ds["gphit"].attrs["standard_name"], ds["gphit"].attrs["units"]
    del ds["glamt"].attrs["standard_name"], ds["glamt"].attrs["units"]
    with pytest.raises(InputError, match=r"cannot classify"):
        to_design_matrix(ds, ["a"], "tas")


def test_unclassified_dimensions_get_advice_that_fits_them():
    ds = _grid().expand_dims(realization=[0]).transpose("realization", "time", "lat", "lon")
    with pytest.raises(InputError, match=r"the target 'tas' has the dimension\(s\) 'realization', which "
                                         r"sample_dims=\"auto\" cannot classify as time, latitude-like \(Y\) or "
                                         r"longitude-like \(X\): it has size 1: drop it "
                                         r"\(ds\.squeeze\('realization'\) or ds\.isel\(realization=0\)\)"):
        ClimateRegressor("a", "tas", model="pointwise").fit(ds)
    assert ClimateRegressor("a", "tas", model="pointwise").fit(ds.squeeze("realization")).sample_dims_ == (
        "time", "lat", "lon")
    # a 2-D latitude left as a data variable: make it a coordinate
    data = _two_d().reset_coords(["nav_lat", "nav_lon"])
    with pytest.raises(InputError, match=r"the 2-D variable 'nav_lat'\('dim0', 'dim1'\) looks like its latitude or "
                                         r"longitude but is a data variable: make it a coordinate "
                                         r"\(ds = ds\.set_coords\('nav_lat'\)\)"):
        ClimateRegressor("a", "tas", model="pointwise").fit(data)
    fixed = data.set_coords(["nav_lat", "nav_lon"])
    assert ClimateRegressor("a", "tas", model="pointwise").fit(fixed).sample_dims_ == ("time", "dim0", "dim1")


@pytest.mark.parametrize("dims", [("lats", "lons"), ("rlat", "rlon"), ("y", "x")])
def test_spatial_dimensions_accepted_by_auto_give_their_weights(dims, client):
    lat = np.linspace(-60.0, 60.0, 4)
    ds = _grid(("time",) + dims, lat=lat, lat_attrs={"units": "degrees_north"} if dims[0] == "y" else None)
    est = ClimateRegressor("a", "tas", client=client, **_POOLED).fit(ds)
    assert est.sample_dims_ == ("time",) + dims
    np.testing.assert_allclose(_weights(ds)[:, 0], np.cos(np.deg2rad(lat)), rtol=1e-12)
    np.testing.assert_allclose(float(est.coef_.sel(feature="a")), _wls_slope(ds, np.cos(np.deg2rad(lat))[:, None]),
                               rtol=1e-5)


def test_a_projection_y_takes_the_2d_latitude_or_is_refused_with_the_fix():
    m = {"standard_name": "projection_y_coordinate", "units": "m"}
    ds = _grid(("time", "y", "x"), lat=[-3e5, -1e5, 1e5, 3e5], lon=[0.0, 2e5, 4e5], lat_attrs=m,
               lon_attrs={"standard_name": "projection_x_coordinate", "units": "m"})
    with pytest.raises(InputError, match=r"the latitude-like \(Y\) dimension 'y' has a coordinate that is not a "
                                         r"latitude \(standard_name 'projection_y_coordinate'\) and no 2-D latitude "
                                         r"coordinate over \['y', 'x'\] gives the latitude of each cell for the area "
                                         r"weights: give each cell its latitude \(e\.g\. ds = ds\.assign_coords\("
                                         r"lat=\(\('y', 'x'\), values, \{'units': 'degrees_north'\}\)\)\), pass "
                                         r"lat=<the latitude coordinate in degrees>, or area_weights=False"):
        ClimateRegressor("a", "tas", model="pointwise").fit(ds)
    lat2d = np.linspace(40.0, 60.0, 12).reshape(4, 3)
    with_lat = ds.assign_coords(lat=(("y", "x"), lat2d, {"standard_name": "latitude", "units": "degrees_north"}))
    # a 2-D latitude is a curvilinear grid: its cells' areas are estimated from the centres, with a 2-D longitude
    with pytest.raises(InputError, match=r"the latitude 'lat'\('y', 'x'\) is 2-D \(a curvilinear grid\).*no 2-D "
                                         r"longitude over \('y', 'x'\)"):
        _weights(with_lat)
    lon2d = np.tile(np.linspace(0.0, 20.0, 3), (4, 1))
    with_lat = with_lat.assign_coords(lon=(("y", "x"), lon2d, {"standard_name": "longitude", "units": "degrees_east"}))
    np.testing.assert_allclose(_weights(with_lat), _estimated(with_lat, "lat", "lon"), rtol=1e-12)
    # a y without units says nothing about its values: the fix includes saying they are latitudes
    plain = _grid(("time", "y", "x"), lat=np.linspace(-60.0, 60.0, 4))
    with pytest.raises(InputError, match=r"'y' has a coordinate that is not a latitude \(no units or standard_name "
                                         r"say its values are latitudes\).*set ds\['y'\]\.attrs\['units'\] = "
                                         r"'degrees_north' if its values are latitudes, give each cell its latitude"):
        to_design_matrix(plain, ["a"], "tas")
    plain["y"].attrs["units"] = "degrees_north"
    np.testing.assert_allclose(_weights(plain)[:, 0], np.cos(np.deg2rad(np.linspace(-60.0, 60.0, 4))), rtol=1e-12)


# ---------------------------------------------------------- ORCA2 from iris-sample-data
def _orca2_files():
    iris_sample_data = pytest.importorskip("iris_sample_data")
    folder = os.path.join(os.path.dirname(iris_sample_data.__file__), "sample_data", "NEMO")
    files = sorted(glob.glob(os.path.join(folder, "nemo_1m_*_grid-T.nc")))
    assert len(files) == 3
    return files


def _orca2():
    """The three monthly ORCA2 (NEMO) files: ``tos(time_counter, y, x)``, ``nav_lat(y, x)``,
    with a month number as the predictor."""
    ds = xr.open_mfdataset(_orca2_files(), combine="nested", concat_dim="time_counter", data_vars="minimal",
                           coords="minimal", compat="override")
    return ds[["tos"]].assign(month=("time_counter", np.array([1.0, 2.0, 3.0])))


@pytest.mark.parametrize("rename", [False, True])
def test_orca2_fits_with_area_weights_from_nav_lat(rename, client):
    ds = _orca2()
    if rename:  # the same file with anonymous dimension names
        ds = ds.rename_dims({"y": "dim0", "x": "dim1"})
    ydim, xdim = ("dim0", "dim1") if rename else ("y", "x")
    dm = to_design_matrix(ds, ["month"], "tos")
    assert dm.spec.sample_dims == ("time_counter", ydim, xdim)
    w = dm.to_dataarray(dm.sample_weight).isel(time_counter=0).compute().values
    sea = np.isfinite(ds["tos"].isel(time_counter=0).values)
    assert sea.sum() > 50_000 and np.array_equal(np.isfinite(w), sea)
    # the vertex bounds left out (ds[["tos"]]): the areas estimated from the centres, within 2% of the exact
    # areas of the file's vertex bounds on every sea cell (cos(nav_lat) is off by a factor up to 60)
    with xr.open_dataset(_orca2_files()[0]) as bounds:
        area = polygon_areas(np.deg2rad(bounds["bounds_lat"].values), np.deg2rad(bounds["bounds_lon"].values))
    np.testing.assert_allclose(w[sea], (area / area.max())[sea], rtol=0.02)
    # pooled: weighted least squares over every sea cell and month
    tos = ds["tos"].values.astype(np.float64)
    month = np.broadcast_to(np.array([1.0, 2.0, 3.0])[:, None, None], tos.shape)
    keep = np.isfinite(tos)
    weights = np.broadcast_to(w, tos.shape)[keep]
    ref = SkLinear().fit(month[keep][:, None], tos[keep], sample_weight=weights)
    pooled = ClimateRegressor(["month"], "tos", client=client, **_POOLED).fit(ds)
    np.testing.assert_allclose(float(pooled.coef_.sel(feature="month")), ref.coef_[0], rtol=1e-5)
    np.testing.assert_allclose(pooled.intercept_, ref.intercept_, rtol=1e-5)
    # pointwise with a ridge penalty: each cell's weight matters; a few cells against scikit-learn
    alpha = 2.0
    pointwise = ClimateRegressor(["month"], "tos", model="pointwise", alpha=alpha).fit(ds)
    assert pointwise.coef_.dims == (ydim, xdim, "feature") and "nav_lat" in pointwise.coef_.coords
    rng = np.random.default_rng(0)
    js, is_ = np.nonzero(sea)
    for k in rng.choice(js.size, 5, replace=False):
        j, i = js[k], is_[k]
        cell = Ridge(alpha=alpha).fit(np.array([[1.0], [2.0], [3.0]]), tos[:, j, i],
                                      sample_weight=np.full(3, w[j, i]))
        np.testing.assert_allclose(float(pointwise.coef_.isel({ydim: j, xdim: i, "feature": 0})), cell.coef_[0],
                                   rtol=1e-8, atol=1e-10)
    X, sw = dask.compute(dm.X, dm.sample_weight)
    assert X.shape[0] == 3 * sea.sum() and sw.min() > 0
