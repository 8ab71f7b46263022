"""`RestingGeometry`: a resting object the nominal camera placed, found where it is when the camera moved (no ROS)."""

import numpy as np
import pytest
import torch

from tinker_core.errors import ConfigError
from tinker_core.loop.resting_geometry import RestingGeometry
from tinker_core.nn.locator import triangulate_at_height


def test_a_resting_object_seen_by_a_moved_camera_is_found_where_it_is(sort_geometry):
    """The perception places what the moved camera shows at the resting height (the torch function the ONNX
    graph runs); undoing that through the geometry gives the object back, where adding the offset does not."""
    geometry, z = sort_geometry, sort_geometry.rest_z
    rng = np.random.default_rng(0)
    p = torch.as_tensor(geometry.projections)
    found, added = [], []
    for _ in range(200):
        x = np.array([rng.uniform(0.3, 0.75), rng.uniform(-0.45, 0.45), z])
        d = rng.normal(size=3)
        s = 0.08 * d / np.linalg.norm(d)  # an 8 cm move in a random direction (shifted_camera)
        points = torch.as_tensor(geometry.project(x - s))[None]  # the moved camera shows x as the nominal one x - s
        estimate = triangulate_at_height(points, p, z)[0].numpy()
        found.append(np.linalg.norm(geometry.resting(estimate, s) - x))
        added.append(np.linalg.norm(estimate + s - x))
    assert max(found) < 1e-5
    assert np.median(added) > 0.02  # measured: 5.0 cm; the move's vertical part leaks along the rays


def test_no_offset_changes_nothing(sort_geometry):
    estimate = np.array([0.55, 0.1, sort_geometry.rest_z])
    np.testing.assert_allclose(sort_geometry.resting(estimate, np.zeros(3)), estimate, atol=1e-9)


def test_a_malformed_geometry_is_refused_by_name():
    with pytest.raises(ConfigError, match="located_geometry: expected projections"):
        RestingGeometry.from_dict({"rest_z": 0.07, "bin_inner_half": 0.08})
    with pytest.raises(ConfigError, match="located_geometry.projections: expected two or more finite 3x4"):
        RestingGeometry.from_dict({"projections": [[[1, 0, 0, 0]] * 3], "rest_z": 0.07, "bin_inner_half": 0.08})
    g = RestingGeometry.from_dict({"projections": np.eye(3, 4)[None].repeat(2, 0).tolist(), "rest_z": 0.07,
                                   "bin_inner_half": 0.08})
    assert RestingGeometry.from_dict(g.to_dict()).rest_z == 0.07
