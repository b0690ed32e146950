"""`blend --plot`: legends name datasets by the spec's names (else the shortest distinguishing suffix of
their paths, never two alike), the plots cover the whole run, and no legend sits on the lines."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tokenport.blend import MixtureSchedule
from tokenport.blend.trajectory import dataset_labels, scheduled_trajectory, short_labels, trajectories_figure
from tokenport.builder.report import blend_figure, mixture_report
from tokenport.builder.specs import Blend, BlendSpec, load_blend_spec
from tokenport.errors import ConfigError

pytest.importorskip("matplotlib")

SPEC = {
    "blend": [
        {"name": "code", "weight": 1, "path": "code/part-00000"},
        {"weight": 3, "path": "prose/part-00000"},
        {
            "name": "web",
            "weight": 2,
            "blend": [{"name": "en", "weight": 1, "path": "web/en/part-00000"}, {"weight": 1, "path": "web/fr/x"}],
        },
    ]
}


def test_labels_are_the_shortest_distinguishing_suffixes_and_never_repeat():
    paths = ["/d/code/part-00000", "/d/prose/part-00000", "/d/wiki", "s3://b/code/part-00000", "/d/wiki"]
    assert short_labels(paths) == ("d/code/part-00000", "prose/part-00000", "wiki", "b/code/part-00000", "wiki")
    assert dataset_labels(paths)[-1] == "wiki #2"
    assert dataset_labels(["/a/x", "/b/x", "/c/y"], ["web", "web", ""]) == ("web (a/x)", "web (b/x)", "y")
    assert dataset_labels(["/a/x"], None) == ("x",)


def test_spec_names_reach_the_blend_under_their_groups(tmp_path):
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(SPEC))
    blend = load_blend_spec(path).blend
    assert blend is not None and blend.names == ("code", "", "web/en", "web")
    assert Blend(blend.prefixes, blend.weights) == blend  # names are for display only
    assert dataset_labels(blend.prefixes, blend.names) == ("code", "prose/part-00000", "web/en", "web")
    for bad in ("ab", 3, ("a",), ("a", "b", 3, "d")):
        with pytest.raises(ConfigError, match="give one name"):
            Blend(blend.prefixes, blend.weights, names=bad)


def _legend_outside(figure, axis) -> bool:
    figure.canvas.draw()
    legend = axis.get_legend().get_window_extent()
    return legend.x0 >= axis.get_window_extent().x1


def test_blend_plot_labels_from_the_spec_over_the_whole_run_legend_outside(tmp_path):
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(SPEC))
    figure = blend_figure(load_blend_spec(path), 3000)
    (axis,) = figure.axes
    assert [t.get_text() for t in axis.get_legend().get_texts()] == ["code", "prose/part-00000", "web/en", "web"]
    assert axis.get_xlim() == (1, 3000) and max(np.max(line.get_xdata()) for line in axis.get_lines()) == 3000
    assert axis.get_ylabel() == "share" and "samples" in axis.get_xlabel()
    assert _legend_outside(figure, axis)


def test_blend_plot_of_two_parts_with_one_name_tells_them_apart():
    spec = BlendSpec(blend=Blend(("/d/code/part-00000", "/d/prose/part-00000"), (1.0, 1.0)))
    (axis,) = blend_figure(spec, 100).axes
    assert [t.get_text() for t in axis.get_legend().get_texts()] == ["code/part-00000", "prose/part-00000"]


def test_scheduled_plot_covers_the_run_from_zero_with_target_and_realized(tmp_path):
    spec = {**SPEC, "schedule": [{"at": 0, "weights": [1, 0, 0, 0]}, {"at": 500, "weights": [1, 3, 1, 1]}]}
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))
    trajectories = mixture_report(load_blend_spec(path), 1000, windows=4)
    figure = trajectories_figure(trajectories)
    (axis,) = figure.axes
    assert [t.get_text() for t in axis.get_legend().get_texts()] == ["code", "prose/part-00000", "web/en", "web"]
    assert axis.get_xlim() == (0, 1000)
    for line in axis.get_lines():  # each realized (solid) and target (dotted) line spans 0 .. 1000
        assert line.get_xdata()[0] == 0 and line.get_xdata()[-1] == 1000
    assert len(axis.get_lines()) == 8 and axis.get_ylabel() == "share"
    assert _legend_outside(figure, axis)
    assert trajectories[0].labels[0].endswith("code/part-00000")  # the text and JSON reports keep the paths


def test_adaptive_style_trajectory_without_names_uses_path_suffixes(tmp_path):
    schedule = MixtureSchedule.from_data([{"at": 0, "weights": [1, 1]}])
    trajectory = scheduled_trajectory(schedule, 200, labels=["/x/a/part-00000", "/x/b/part-00000"], windows=2)
    (axis,) = trajectories_figure([trajectory]).axes
    labels = [t.get_text() for t in axis.get_legend().get_texts()]
    assert labels == ["a/part-00000", "b/part-00000"] and np.isclose(axis.get_xlim()[1], 200)
