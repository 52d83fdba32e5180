"""`sbx bench restore` reports the snapshot restore's targets as ratios of one run's medians."""

from __future__ import annotations

from sbx.agent.bench.restore import RestoreBench, cells


def test_the_targets_are_ratios_of_the_medians_with_their_limits() -> None:
    report = RestoreBench(cells=10, live_s=[0.1, 0.2, 0.1], snapshot_s=[0.4, 0.5, 3.0],
                          restored_s=[4.0, 5.0, 6.0])
    targets = {t["name"]: t for t in report.as_json()["targets"]}
    assert targets["restore_first_answer_vs_live"] == {
        "name": "restore_first_answer_vs_live", "limit": 5.0, "measured": 5.0, "met": True}
    assert targets["restore_first_answer_vs_full_replay"] == {
        "name": "restore_first_answer_vs_full_replay", "limit": 0.2, "measured": 0.1,
        "met": True}
    slow = RestoreBench(cells=10, live_s=[0.1], snapshot_s=[2.0], restored_s=[5.0])
    assert [t["met"] for t in slow.targets()] == [False, False]
    assert "NOT met" in slow.render()
    assert RestoreBench(cells=10).targets() == []  # nothing measured: no claim


def test_the_ten_cells_hold_a_dataframe_a_model_fit_and_a_chart() -> None:
    built = cells(10)
    assert len(built) == 10 and "DataFrame" in built[0] and ".fit(" in built[1]
    assert "savefig" in built[2]
